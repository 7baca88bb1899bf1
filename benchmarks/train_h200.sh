#!/usr/bin/env bash
# One device call: the training evidence of issues 4, 6 and 7 on the H200.
#   1. smoke: nvfp4 on the fake and dequant QLinear GEMM paths, timed (packed: see kernels-h200.md)
#   2. the same model, tokens and seed with every recipe (profiled, nvfp4/ufp4 captured)
#   3. fourcast compare, fourcast project (B200, B300, Rubin, MI355X; native ue5m3/e1m2),
#      fourcast bias on the captured tensors
# Needs: .devwheel/ (the abi3 wheel) and .devdata/{train,val} carried. Writes to $OUT.
# Usage on the device: bash benchmarks/train_h200.sh [STEPS] [MODEL]
# Env: BATCH SEQ (tokens per step), RECIPES, GEMM_PATH (fused), SMOKE_PATHS ("" skips the
# smoke), TRAIN_BUDGET_S, RUN_TIMEOUT, GPU_TESTS_FIRST, GPU_TEST_S (0 skips the tier), CAPTURE, RUNS.
set -uo pipefail
STEPS=${1:-400}
MODEL=${2:-50m}
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-/tmp/runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 FOURCAST_CACHE=/tmp/fccache
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl || exit 1
python3 - <<'PY' | tee "$OUT/env.txt"
import torch, triton, fourcast
print("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, "fourcast", fourcast.__version__)
PY
if [ "${GPU_TESTS_FIRST:-0}" = 1 ]; then
  log() { echo "[$(date +%T)] $*"; }
  log "gpu test tier first"
  timeout "${GPU_TEST_S:-150}" python3 -m pytest tests/gpu -q -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1; tail -4 "$OUT/gpu-tests.txt"
fi
COMMON=(--model "$MODEL" --data .devdata/train --val .devdata/val --tokenizer bpe:16384 --batch "${BATCH:-32}" --seq "${SEQ:-512}"
        --lr 2e-3 --seed 0 --no-progress --eval-every 100 --ckpt-every 0 --set train.eval_batches=${EVAL_BATCHES:-8})
log() { echo "[$(date +%T)] $*"; }

for path in ${SMOKE_PATHS-fake dequant}; do
  log "smoke nvfp4 gemm-path=$path"
  timeout 100 fourcast train --recipe nvfp4 "${COMMON[@]}" --steps 20 --gemm-path "$path" --profile-steps 2 \
    --out "$RUNS/smoke-$path" --json > "$RUNS/smoke-$path.json" 2> "$RUNS/smoke-$path.err" \
    && python3 -c "import json,sys; d=json.load(open('$RUNS/smoke-$path.json')); print('  step_ms', d['step_time_ms'], 'loss', d['final_train_loss'])" \
    || { echo "  FAILED"; tail -5 "$RUNS/smoke-$path.err"; }
done
# Same steps for every recipe, sized so the slowest recipe (taken as 2x the nvfp4 smoke
# step) trains in about TRAIN_BUDGET_S seconds: the call must end inside its 10 minutes.
STEPS=$(python3 - "$RUNS" "$STEPS" "${TRAIN_BUDGET_S:-45}" <<'PY'
import json, pathlib, sys
runs, cap, budget = pathlib.Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
try:
    ms = json.loads((runs / "smoke-dequant.json").read_text())["step_time_ms"]
except Exception:
    ms = 200.0
print(max(20, min(cap, int(budget * 1000 / (2 * ms)) // 10 * 10)))
PY
)
[ -n "${FIXED_STEPS:-}" ] && STEPS=$FIXED_STEPS
GEMM_PATH=${GEMM_PATH:-fused}
RECIPES=${RECIPES:-bf16 nvfp4 mxfp4 ue5m3 ufp4 ufp4-int4}
log "evidence runs: $STEPS steps each, gemm-path=$GEMM_PATH (exact emulation: fused or dequant)"
for r in $RECIPES; do
  extra=()
  case $r in nvfp4|ufp4) [ "${CAPTURE:-1}" = 1 ] && extra=(--capture-every $((STEPS / 2))) ;; esac
  # "preset+sr4" / "preset+sr16": the preset with its SR operands on the four / sixteen-per-counter stream;
  # "+eager": steps not captured in CUDA graphs (train.cuda_graph=false)
  case $r in *+sr4*) extra+=(--set sr_stream=x4) ;; *+sr16*) extra+=(--set sr_stream=x16) ;; esac
  case $r in *+eager*) extra+=(--set train.cuda_graph=false) ;; esac
  case $r in *+*) extra+=(--set "name=$r") ;; esac
  log "train $r"
  timeout "${RUN_TIMEOUT:-100}" fourcast train --recipe "${r%%+*}" "${COMMON[@]}" --steps "$STEPS" --gemm-path "$GEMM_PATH" --profile-steps 3 \
    "${extra[@]}" --out "$RUNS/$r" --json > "$RUNS/$r.json" 2> "$RUNS/$r.err" \
    && python3 -c "import json; d=json.load(open('$RUNS/$r.json')); print('  loss', d['final_train_loss'], 'val', d['final_val_loss'], 'step_ms', d['step_time_ms'])" \
    || { echo "  FAILED"; tail -5 "$RUNS/$r.err"; }
done
log "compare"
fourcast compare $(ls -d "$RUNS"/*/ | grep -v smoke) --plot "$OUT/compare.png" --json > "$OUT/compare.json" 2>> "$OUT/errors.txt"
fourcast compare $(ls -d "$RUNS"/*/ | grep -v smoke) 2>> "$OUT/errors.txt" | tee "$OUT/compare.txt"
log "project"
for r in $RECIPES; do
  other=()
  [ "$r" != bf16 ] && [ -f "$RUNS/bf16/profile.json" ] && other=(--other-from "$RUNS/bf16")
  [ -f "$RUNS/$r/profile.json" ] && fourcast project "$RUNS/$r" --to b200,b300,rubin,mi355x --native ue5m3,e1m2 \
    "${other[@]}" --json > "$RUNS/$r/projection-cli.json" 2>> "$OUT/errors.txt"
done
log "bias on captured tensors"
for r in nvfp4 ufp4; do
  [ -d "$RUNS/$r/tensors" ] && fourcast bias --run "$RUNS/$r" --grid e2m1,e1m2,int4 --rht 0,16 --json > "$RUNS/bias-real-$r.json" 2>> "$OUT/errors.txt"
done
log "pack"
tar czf "$OUT/runs.tar.gz" --exclude='*.safetensors' --exclude='tensors' -C "$(dirname "$RUNS")" "$(basename "$RUNS")"
ls -la "$OUT"
if [ "${GPU_TESTS_FIRST:-0}" != 1 ] && [ "${GPU_TEST_S:-90}" != 0 ]; then
  log "gpu test tier (whatever time is left)"
  timeout "${GPU_TEST_S:-90}" python3 -m pytest tests/gpu -q -x -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1; tail -3 "$OUT/gpu-tests.txt"
fi
log "done"
