#!/usr/bin/env bash
# The kernels' one device call: install the wheel built here (maturin build --release
# -o .devwheel, carried), run the GPU test tier, then benchmarks/kernels.py within what
# is left of the call's limit. Logs and JSON land in $OUT.
#   run(command="bash benchmarks/gpu_run.sh", carry=[".devwheel"], timeout_s=360)
set -uo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
LIMIT=${LIMIT:-345}
OUT=${OUT:-/tmp/fourcast-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
pip install -q --no-deps .devwheel/fourcast-*.whl 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
cd tests  # import fourcast from the installed wheel, not ../python
timeout "${TEST_S:-120}" python -m pytest -c ../pyproject.toml --rootdir .. -q -m gpu -p no:cacheprovider \
  -o console_output_style=classic ../tests/gpu 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
cd ..
BUDGET=$(( LIMIT - (SECONDS - START) - 15 ))
echo "benchmark budget ${BUDGET}s"
python benchmarks/kernels.py --budget "$BUDGET" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v "^\[" | tail -60
