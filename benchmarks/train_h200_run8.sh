#!/usr/bin/env bash
# Run 8 (session 5), one device call: every size the projection is checked on, each run
# with a timeline step (FOURCAST_TIMELINE_STEP), so the profile holds every op's GPU
# kernel time beside its CUDA-event span (fit_emulation.py --measure gpu):
#   125m B32 T1024, five recipes (the run-5 shapes: the fit set), then held out:
#   350m B16 T2048 (run 6's shapes), moe-125m B32 T1024 (run 7's host-bound MoE),
#   50m B16 T2048 (run 7's dense shapes).
#   run(command="bash benchmarks/train_h200_run8.sh", carry=[".devwheel", ".devdata"])
# Each size is packed into $OUT as it finishes (a call cut at its limit keeps the rest).
# Env: STEPS, TIMELINE_STEP, RUN_TIMEOUT, CONFIGS (space-separated NAME:BATCH:SEQ:RECIPES).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export FOURCAST_TIMELINE_STEP=${TIMELINE_STEP:-20}
python3 -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl || exit 1
CONFIGS=${CONFIGS:-"125m:32:1024:bf16,ue5m3,nvfp4,mxfp4,ufp4 350m:16:2048:bf16,ue5m3,nvfp4 moe-125m:32:1024:bf16,ue5m3,nvfp4,mxfp4,ufp4 50m:16:2048:bf16,ue5m3,nvfp4"}
for spec in $CONFIGS; do
  IFS=: read -r model batch seq recipes <<< "$spec"
  echo "=== $model (batch $batch, seq $seq: $recipes) $(date +%T)"
  OUT=/tmp/run8/$model RUNS=/tmp/run8-runs/$model BATCH=$batch SEQ=$seq FIXED_STEPS=${STEPS:-30} SMOKE_PATHS="" \
    CAPTURE=0 SKIP_INSTALL=1 GPU_TEST_S=0 RUN_TIMEOUT=${RUN_TIMEOUT:-90} RECIPES="${recipes//,/ }" \
    bash benchmarks/train_h200.sh "${STEPS:-30}" "$model"
  tar czf "$OUT/run8-$model.tar.gz" --exclude='*.safetensors' --exclude='tensors' --exclude='runs.tar.gz' \
    --exclude='timeline-trace.json.gz' -C /tmp "run8/$model" "run8-runs/$model"
done
# two timeline traces for a look in Perfetto (the others stay on the device)
for t in 125m/ue5m3 moe-125m/ue5m3; do
  cp "/tmp/run8-runs/$t/timeline-trace.json.gz" "$OUT/trace-${t//\//-}.json.gz" 2>/dev/null
done
