#!/usr/bin/env bash
# The kernels' one device call: install the wheel built here (maturin build --release
# -o .devwheel, carried), run the GPU test tier, then benchmarks/kernels.py within what
# is left of the call's limit. Logs and JSON land in $OUT.
#   run(command="bash benchmarks/gpu_run.sh", carry=[".devwheel"], timeout_s=360)
# Env: LIMIT (s), TEST_S, TEST_K (a pytest -k filter for the GPU tier), BENCH_ARGS (kernels.py's
# arguments as shell words, e.g. BENCH_ARGS="--only rowcol_gluon --variants 'X: decoded,dY: decoded'").
# python3 there is /opt/torch/.venv/bin/python3 (torch, triton); plain `python` is not.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
LIMIT=${LIMIT:-345}
OUT=${OUT:-/tmp/fourcast-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=python3
$PY -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl > "$OUT/pip.log" 2>&1
if ! (cd /tmp && $PY -c "import fourcast.kernels.ops") 2>>"$OUT/pip.log"; then
  echo "pip install did not give an importable fourcast; extracting the wheel instead"
  mkdir -p /tmp/fcwheel && $PY -m zipfile -e .devwheel/fourcast-*.whl /tmp/fcwheel
  export PYTHONPATH=/tmp/fcwheel
fi
(cd /tmp && $PY -c "import fourcast, torch, triton; print('fourcast', fourcast.__file__, 'torch', torch.__version__, 'triton', triton.__version__)")
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n 8"  # compile kernels in parallel workers
cd tests  # import fourcast from the installed wheel, not ../python
timeout "${TEST_S:-130}" $PY -m pytest -c ../pyproject.toml --rootdir .. -q -m gpu -p no:cacheprovider $XDIST \
  ${TEST_K:+-k "$TEST_K"} ../tests/gpu 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
cd "$ROOT"
BUDGET=$(( LIMIT - (SECONDS - START) - 15 ))
echo "benchmark budget ${BUDGET}s"
eval "bench_args=(${BENCH_ARGS:-})"  # shell words: a quoted --variants list keeps its spaces
$PY benchmarks/kernels.py --budget "$BUDGET" ${bench_args[@]+"${bench_args[@]}"} 2>&1 | tee "$OUT/bench.log" | grep -v "^\[" | tail -60
