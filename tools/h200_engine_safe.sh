#!/usr/bin/env bash
# Superseded by tools/h200_engine_tables.sh (issue 38): the exports it reads were removed; kept
# as the record of how the older checks in docs/examples/h200/engine_tune/ were made.
# The one kept engine file that lost a key on the independent recheck (SGLang bf16 TP8, M=128
# under Zipf, bench.seed=7) made safe from that recheck (`engine-check --safe-out`: a key keeps
# its tuned config only where it won on every routing), then every kept file and the safe one
# checked on a third draw (bench.seed=11), then the per-tensor fp8 TP8 file SGLang's tuning did
# not reach before (N=256). Carry .whl and .engine_kernels.
# Usage (on the GPU machine): tools/h200_engine_safe.sh OUT_DIR
set -uo pipefail
out=${1:?usage: tools/h200_engine_safe.sh OUT_DIR}
mkdir -p "$out/safe" "$out/draw11"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/gpus.csv"
kept=docs/examples/h200/engine_tune
lost="$kept/sglang-0.5.23/E=256,N=256,device_name=NVIDIA_H200.json"
start=$(date +%s)
{
  python3 -m tilesweep.cli engine-check "$lost" bench.seed=7 --engine sglang \
    --out "$out/safe/check_seed7.csv" --safe-out "$out/safe/$(basename "$lost")" 2>&1 | tail -25
  for file in "$kept"/vllm-*/E=*.json "$kept"/sglang-*/E=*.json "$out/safe/$(basename "$lost")"; do
    engine=$(basename "$(dirname "$file")" | cut -d- -f1)
    [ "$engine" = safe ] && engine=sglang
    name=$(basename "$(dirname "$file")")_$(basename "$file" .json | tr -d ' []' | tr ',=' '__')
    t0=$(date +%s)
    python3 -m tilesweep.cli engine-check "$file" bench.seed=11 --engine "$engine" \
      --out "$out/draw11/$name.csv" 2>&1 | tail -3
    echo "check $name: $(($(date +%s) - t0)) s"
  done
} 2>&1 | tee "$out/checks.log"
echo "checks: $(($(date +%s) - start)) s" | tee -a "$out/checks.log"
t0=$(date +%s)
timeout "${TILESWEEP_FP8_LIMIT_S:-240}" python3 -m tilesweep.cli engine-tune --out "$out/fp8" \
  --engine sglang --format fp8 --shape 256,256 2>&1 | tail -40 | tee "$out/fp8_tune.log"
echo "sglang fp8 per-tensor N=256 engine-tune: $(($(date +%s) - t0)) s" | tee -a "$out/fp8_tune.log"
tar -C "$out" -czf "$out/engine_safe.tgz" --exclude='*.tgz' .
