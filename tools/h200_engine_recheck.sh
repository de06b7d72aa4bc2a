#!/usr/bin/env bash
# Superseded by tools/h200_engine_tables.sh (issue 38): the exports it reads were removed; kept
# as the record of how the older checks in docs/examples/h200/engine_tune/ were made.
# An independent check of the kept exported engine files (docs/examples/h200/engine_tune): each
# file timed against its engine's default in that engine's own kernel on fresh weights and
# routing (bench.seed differs from the tuning and from its own held-out check), then the
# per-tensor fp8 format tuned in both engines. Carry .whl and .engine_kernels.
# Usage (on the GPU machine): tools/h200_engine_recheck.sh OUT_DIR [SEED]
set -uo pipefail
out=${1:?usage: tools/h200_engine_recheck.sh OUT_DIR [SEED]}
seed=${2:-7}
mkdir -p "$out/recheck"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/gpus.csv"
kept=docs/examples/h200/engine_tune
start=$(date +%s)
for dir in "$kept"/vllm-* "$kept"/sglang-*; do
  engine=$(basename "$dir" | cut -d- -f1)
  for file in "$dir"/E=*.json; do
    name=$(basename "$file" .json | tr -d ' []' | tr ',=' '__')
    t0=$(date +%s)
    python3 -m tilesweep.cli engine-check "$file" "bench.seed=$seed" --engine "$engine" \
      --out "$out/recheck/$(basename "$dir")_$name.csv" 2>&1 | tail -25
    echo "check $(basename "$dir") $(basename "$file"): $(($(date +%s) - t0)) s"
  done
done 2>&1 | tee "$out/recheck.log"
echo "recheck: $(($(date +%s) - start)) s" | tee -a "$out/recheck.log"
if [ "${TILESWEEP_SKIP_FP8:-0}" != 1 ]; then
  t0=$(date +%s)
  timeout "${TILESWEEP_FP8_LIMIT_S:-330}" python3 -m tilesweep.cli engine-tune --out "$out/fp8" \
    --format fp8 \
    --shape 256,2048 --shape 256,256 2>&1 | tail -60 | tee "$out/fp8_tune.log"
  echo "fp8 per-tensor engine-tune: $(($(date +%s) - t0)) s" | tee -a "$out/fp8_tune.log"
fi
tar -C "$out" -czf "$out/engine_recheck.tgz" --exclude='*.tgz' .
