#!/usr/bin/env bash
# Tables tuned and picked in the engines' own fused-MoE kernels (tilesweep engine-tune), GLM-5
# TP1 (E=256, N=2048) and TP8 (E=256, N=256), each checked on fresh data against the engine's
# default in that kernel; the project kernel's bf16 picks of the kept example are screened beside the
# neighbours. Carry .whl and .engine_kernels (tools/fetch_engine_kernels.py).
# Usage (on the GPU machine): tools/h200_engine_tune.sh OUT_DIR [engine-tune arguments ...]
# (default: both engines, bf16 and fp8_block, both shapes, every batch key).
set -uo pipefail
out=${1:?usage: tools/h200_engine_tune.sh OUT_DIR [ARGS ...]}
shift
mkdir -p "$out"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/gpus.csv"
kept=docs/examples/h200
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--shape 256,2048 --shape 256,256)
fi
start=$(date +%s)
python3 -m tilesweep.cli engine-tune --out "$out" "${args[@]}" \
  --extra "$kept/tune_work/project_kernel/bf16/project_kernel_E=256,N=2048,device_name=NVIDIA_H200.json" \
  --extra "$kept/tune_layouts/project_kernel/bf16/project_kernel_E=256,N=256,device_name=NVIDIA_H200.json" \
  2>&1 | tee "$out/engine_tune.log"
echo "engine-tune: $(($(date +%s) - start)) s" | tee -a "$out/engine_tune.log"
