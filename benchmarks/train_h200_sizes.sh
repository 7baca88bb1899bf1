#!/usr/bin/env bash
# One device call of training runs at several sizes, each run with a timeline step
# (FOURCAST_TIMELINE_STEP: GPU time per op in profile.json), each size packed into $OUT
# as it finishes (a call cut at its limit keeps the rest). A recipe "preset+sr4" is the
# preset with its SR operands on the four-per-counter Philox stream (sr_stream = x4);
# "preset+sr16" on the sixteen-per-counter 8-bit stream (sr_stream = x16).
#   run(command="RUN=run10 bash benchmarks/train_h200_sizes.sh", carry=[".devwheel", ".devdata"])
# The runs made with it (benchmarks/results/training-h200-run*/):
#   run 8:  RUN=run8 CONFIGS="125m:32:1024:bf16,ue5m3,nvfp4,mxfp4,ufp4 350m:16:2048:bf16,ue5m3,nvfp4
#           moe-125m:32:1024:bf16,ue5m3,nvfp4,mxfp4,ufp4 50m:16:2048:bf16,ue5m3,nvfp4" (26-30 steps)
#   run 9:  RUN=run9 (the default CONFIGS)
#   run 10: RUN=run10 CONFIGS="125m:32:1024:bf16,ue5m3,nvfp4,ue5m3+sr4,nvfp4+sr4,mxfp4+sr4
#           350m:16:2048:bf16,ue5m3+sr4"
#   run 13: RUN=run13 TIMELINE_STEP=21 STEPS=30 CONFIGS="125m:32:1024:bf16,bf16+eager,ue5m3+sr16,ue5m3+sr16+eager"
#           (then 350m:16:2048:bf16,ue5m3+sr16,ue5m3+sr16+eager and the other recipes, README of run 13)
# Env: RUN (folder name), STEPS, TIMELINE_STEP, RUN_TIMEOUT, CONFIGS (space-separated NAME:BATCH:SEQ:RECIPES).
# Recipe suffixes: +sr4, +sr16 (SR stream), +eager (no CUDA graphs).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
RUN=${RUN:-run9}
export FOURCAST_TIMELINE_STEP=${TIMELINE_STEP:-20}
python3 -m pip install -q --no-deps --force-reinstall .devwheel/fourcast-*.whl || exit 1
CONFIGS=${CONFIGS:-"125m:32:1024:bf16,ue5m3,ue5m3+sr4,nvfp4+sr4,mxfp4+sr4,ufp4+sr4 350m:16:2048:bf16,ue5m3+sr4"}
for spec in $CONFIGS; do
  IFS=: read -r model batch seq recipes <<< "$spec"
  echo "=== $model (batch $batch, seq $seq: $recipes) $(date +%T)"
  OUT=/tmp/$RUN/$model RUNS=/tmp/$RUN-runs/$model BATCH=$batch SEQ=$seq FIXED_STEPS=${STEPS:-30} SMOKE_PATHS="" \
    CAPTURE=0 SKIP_INSTALL=1 GPU_TEST_S=0 RUN_TIMEOUT=${RUN_TIMEOUT:-90} RECIPES="${recipes//,/ }" \
    bash benchmarks/train_h200.sh "${STEPS:-30}" "$model"
  tar czf "$OUT/$RUN-$model.tar.gz" --exclude='*.safetensors' --exclude='tensors' --exclude='runs.tar.gz' \
    --exclude='timeline-trace.json.gz' -C /tmp "$RUN/$model" "$RUN-runs/$model"
done
# timeline traces for a look in Perfetto (the others stay on the device)
for t in ${TRACES:-125m/ue5m3+sr4}; do
  cp "/tmp/$RUN-runs/$t/timeline-trace.json.gz" "$OUT/trace-${t//[\/+]/-}.json.gz" 2>/dev/null
done
