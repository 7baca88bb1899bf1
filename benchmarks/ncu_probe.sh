#!/usr/bin/env bash
# Nsight Compute over benchmarks/ncu_probe.py's cases (stall reasons, issue activity,
# occupancy, memory throughput of one launch each), on the GPU machine:
#   OUT=$OUT bash benchmarks/ncu_probe.sh [CASE...]
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
ncu --version | tail -1
for c in $CASES; do
  echo "== $c"
  timeout 75 ncu --clock-control none --kernel-name-base function \
      -k regex:"_strip_kernel|_split_kernel|_wgmma_kernel|_ws_kernel|_rs_kernel" --launch-skip 2 --launch-count 1 \
      $SECTIONS --page details python3 benchmarks/ncu_probe.py "$c" > "$OUT/ncu-$c.txt" 2>&1
  echo "rc $?"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|DRAM Throughput|L2 Cache Throughput" "$OUT/ncu-$c.txt" | head -8
  # the stall reasons, largest first (warps stalled per issued instruction)
  grep -E "issue_stalled" "$OUT/ncu-$c.txt" | sort -k3 -g -r | head -6
done
