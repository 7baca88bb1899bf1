#!/usr/bin/env bash
# One device call for issue 8 on nvidia-h200-x2 or -x4 (benchmarks/multigpu.py does the work):
#   1. the 1-GPU runs of each recipe (same global batch; same per-GPU batch),
#   2. under torchrun on every GPU: NCCL all-reduce / reduce-scatter / all-gather 1 KiB..1 GiB,
#      the same training on N GPUs (DDP), then the report (calibration, what-if, losses).
# Needs .devwheel/ (the abi3 wheel: maturin build --release -o .devwheel) and the text in
# .devdata/{train,val} (as benchmarks/train_h200.sh), both carried:
#   run(command="bash benchmarks/multigpu_run.sh", carry=[".devwheel", ".devdata"],
#       kind="nvidia-h200-x2", timeout_s=600)
# Results: $OUT/multigpu.{json,md}, $OUT/comm.json, $OUT/runs/*/ (metrics, summaries).
# Knobs (env): NPROC (default: every GPU), MODEL (50m), BATCH per GPU (16), SEQ (512),
# STEPS (150), RECIPES (bf16,ue5m3), TOKENIZER (bpe:16384), MAX_BYTES (1GiB), DATA (.devdata).
# CPU functional check (no GPU, gloo, tiny sizes, local venv):
#   DEVICE=cpu SKIP_INSTALL=1 OUT=/tmp/mg bash benchmarks/multigpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export FOURCAST_CACHE=${FOURCAST_CACHE:-$OUT/cache}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-.devdata}
log() { echo "[$(date +%T)] $*"; }

if [ -z "${SKIP_INSTALL:-}" ]; then
  $PY -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
fi
(cd /tmp && $PY -c "import fourcast, torch; print('fourcast', fourcast.__version__, 'torch', torch.__version__)") || exit 1

if [ "$DEVICE" = cpu ]; then
  NPROC=${NPROC:-2}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # what torchrun gives each rank: the 1-process runs get the same
  ARGS=(--backend gloo --device cpu --max-bytes "${MAX_BYTES:-4MiB}" --fit-min-bytes "${FIT_MIN_BYTES:-512KiB}" --target-s 0.05
        --model "${MODEL:-tiny,n_layers=1}" --batch "${BATCH:-2}" --seq "${SEQ:-64}" --steps "${STEPS:-20}" --timing-steps 10
        --tokenizer "${TOKENIZER:-bytes}" --lr 1e-2 --eval-batches 1)
else
  NPROC=${NPROC:-$(nvidia-smi -L | wc -l)}
  nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  ARGS=(--backend nccl --device cuda --max-bytes "${MAX_BYTES:-1GiB}"
        --model "${MODEL:-50m}" --batch "${BATCH:-16}" --seq "${SEQ:-512}" --steps "${STEPS:-150}"
        --tokenizer "${TOKENIZER:-bpe:16384}")
fi
if [ "$NPROC" -lt 2 ]; then
  echo "only $NPROC GPU visible: multi-GPU evidence needs nvidia-h200-x2 or -x4" >&2
  exit 2
fi
ARGS+=(--world "$NPROC" --recipes "${RECIPES:-bf16,ue5m3}" --data "$DATA/train" --val "$DATA/val" --out "$OUT" --hw "${HW:-h200}")

log "1-GPU reference runs"
timeout "${REF_S:-260}" $PY benchmarks/multigpu.py ref "${ARGS[@]}" 2>&1 | tee "$OUT/ref.log" | grep -v "^\s*$" | tail -20
log "torchrun x$NPROC: collectives, training, report"
timeout "${DIST_S:-290}" $PY -m torch.distributed.run --standalone --nproc_per_node "$NPROC" \
  benchmarks/multigpu.py dist --verbose "${ARGS[@]}" > "$OUT/dist.log" 2>&1
rc=$?
grep -v "^\s*$" "$OUT/dist.log" | grep -v "^fourcast train\|^[┏┃┡│└]" | tail -80
log "done (dist exit $rc)"
exit $rc
