#!/usr/bin/env bash
# The kept example's project-kernel bf16 picks (not engine files), GLM-5 TP1 (E=256, N=2048) and
# TP8 (E=256, N=256), timed against vLLM's default config in vLLM 0.33's own fused-MoE kernel (tilesweep
# engine-check), on the GPU at hand. Carry .whl and .engine_kernels (tools/fetch_engine_kernels.py).
# Usage (on the GPU machine): tools/h200_engine_check.sh OUT_DIR
set -uo pipefail
out=${1:?usage: tools/h200_engine_check.sh OUT_DIR}
mkdir -p "$out"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/gpus.csv"
tuned=docs/examples/h200
for file in "$tuned/tune_work/project_kernel/bf16/project_kernel_E=256,N=2048,device_name=NVIDIA_H200.json" \
  "$tuned/tune_layouts/project_kernel/bf16/project_kernel_E=256,N=256,device_name=NVIDIA_H200.json"; do
  name=$(basename "$file" .json | cut -d, -f1-2 | tr ',=' '_-')
  start=$(date +%s)
  python3 -m tilesweep.cli engine-check "$file" --out "$out/check_$name.csv" 2>&1 |
    tail -n 20 | tee "$out/check_$name.log"
  echo "$name: $(( $(date +%s) - start )) s" | tee -a "$out/check_$name.log"
done
