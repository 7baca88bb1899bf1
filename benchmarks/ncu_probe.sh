#!/usr/bin/env bash
# Nsight Compute over benchmarks/ncu_probe.py's cases (stall reasons, issue activity,
# occupancy, memory throughput of one launch each), on the GPU machine:
#   OUT=$OUT bash benchmarks/ncu_probe.sh [CASE...]
#   L1=1 OUT=$OUT bash benchmarks/ncu_probe.sh CASE...   # instead: what fills the L1/TEX
#       pipeline (the breakdown of l1tex__throughput into its sub-units, shared-store
#       wavefronts, global-load sectors and requests: kernels-h200.md session 13)
#   DRAM=1 [CACHE=none] [ZERO_FLUSH=1] OUT=$OUT bash benchmarks/ncu_probe.sh CASE...  # instead: DRAM and
#       L2 bytes; CACHE=none keeps the caches as the last launch left them, ZERO_FLUSH=1 zeroes
#       256 MB before each call as do_bench's flush does
#   SRC=1 OUT=$OUT bash benchmarks/ncu_probe.sh CASE...  # the default sections plus SourceCounters
#       (the most-stalled SASS instructions and their stall reasons)
# ncu leaves the clocks alone (--clock-control none, the device README's advice).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fourcast-out}
mkdir -p "$OUT"
CASES=${*:-strip_x strip_dy gemm_split gemm_wgmma gemm_wgmma_decode gemm_wgmma_lut gemm_wgmma_lut_decode}
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section MemoryWorkloadAnalysis_Tables
          --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
if [ "${SRC:-0}" = 1 ]; then  # and where the warps stall, per SASS instruction
  SECTIONS="$SECTIONS --section SourceCounters --import-source no"
fi
if [ "${L1:-0}" = 1 ]; then
  SECTIONS="--metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,\
l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,\
l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed"
fi
if [ "${DRAM:-0}" = 1 ]; then  # instead: DRAM and L2 bytes (what a launch costs beyond its own bytes)
  SECTIONS="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
fi
# CACHE=none: ncu leaves the caches as the previous launch left them (default: flushed, invalidated)
KERNELS=${KERNELS:-_strip_kernel|_split_kernel|_wgmma_kernel|_ws_kernel|_rs_kernel|_rowcol_kernel|_io_rowcol_gluon_kernel}
ncu --version | tail -1
for c in $CASES; do
  echo "== $c"
  timeout 75 ncu --clock-control none --cache-control "${CACHE:-all}" --kernel-name-base function \
      -k regex:"$KERNELS" --launch-skip 2 --launch-count 1 \
      $SECTIONS --page details python3 benchmarks/ncu_probe.py "$c" > "$OUT/ncu-$c.txt" 2>&1
  echo "rc $?"
  grep -E "dram__|lts__t_sectors|gpu__time" "$OUT/ncu-$c.txt" | head -8
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|DRAM Throughput|L2 Cache Throughput" "$OUT/ncu-$c.txt" | head -8
  # the stall reasons, largest first (warps stalled per issued instruction)
  grep -E "issue_stalled" "$OUT/ncu-$c.txt" | sort -k3 -g -r | head -6
done
