#!/usr/bin/env bash
# Run 7 (session 4), one device call: the MoE preset with every recipe (issue 4's MoE
# evidence) and the 50M dense model at a new shape (B16 T2048: GEMM and attention shapes
# no fit has seen, the projection's held-out check).
#   run(command="bash benchmarks/train_h200_run7.sh", carry=[".devwheel", ".devdata"])
# Env: MOE_STEPS, DENSE_STEPS, MOE_RECIPES, DENSE_RECIPES, RUN_TIMEOUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# one step of every run under torch.profiler -> timeline.json (GPU busy vs idle)
export FOURCAST_TIMELINE_STEP=${TIMELINE_STEP:-25}
python3 -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl || exit 1
# SM clock and power every 250 ms (the projection reads training GEMMs as running at a
# higher clock than back-to-back isolated GEMMs): first 8 s of isolated BF16 8192^3
# cuBLAS GEMMs, then the training runs; phases.txt holds the wall time of each phase.
mkdir -p /tmp/run7
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 250 \
  > /tmp/run7/clocks.csv 2>&1 &
SMI=$!
echo "isolated-gemm-start $(date +%s.%N)" >> /tmp/run7/phases.txt
python3 - <<'PY' >> /tmp/run7/phases.txt
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t0, n = time.time(), 0
while time.time() - t0 < 8:
    for _ in range(20):
        torch.mm(a, b)
    torch.cuda.synchronize()
    n += 20
dt = time.time() - t0
print(f"isolated-gemm-tflops {2 * 8192 ** 3 * n / dt / 1e12:.0f}")
PY
echo "isolated-gemm-end $(date +%s.%N)" >> /tmp/run7/phases.txt
for spec in "moe-125m 32 1024 ${MOE_STEPS:-50} ${MOE_RECIPES:-bf16,ue5m3,nvfp4,mxfp4,ufp4}" \
            "50m 16 2048 ${DENSE_STEPS:-60} ${DENSE_RECIPES:-bf16,ue5m3,nvfp4}"; do
  set -- $spec
  echo "=== $1 (batch $2, seq $3, $4 steps: $5)"
  echo "train-$1-start $(date +%s.%N)" >> /tmp/run7/phases.txt
  OUT=/tmp/run7/$1 RUNS=/tmp/run7-runs/$1 BATCH=$2 SEQ=$3 FIXED_STEPS=$4 SMOKE_PATHS="" CAPTURE=0 SKIP_INSTALL=1 \
    GPU_TEST_S=0 RUN_TIMEOUT=${RUN_TIMEOUT:-90} RECIPES="${5//,/ }" bash benchmarks/train_h200.sh "$4" "$1"
  echo "train-$1-end $(date +%s.%N)" >> /tmp/run7/phases.txt
done
kill $SMI
tar czf "$OUT/run7.tar.gz" --exclude='*.safetensors' --exclude='tensors' -C /tmp run7 run7-runs
