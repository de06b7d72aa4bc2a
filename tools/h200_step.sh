#!/usr/bin/env bash
# The decode step as engines run it, on one H200 (conf/experiment/h200_step.yaml): the device's
# ceilings and per-kernel cost, the graphed TP1 whole step of GLM-5 and one rank of TP8, EP8 and
# TP4+PP2 emulated, then the graphed TP1 step of DeepSeek-V3 and the TP1 step and one TP4 rank of
# Qwen3-235B-A22B (GQA attention; models the fit never saw), and the GPU check that a graphed and
# an eager step pick the same tokens.
# STEP_MODELS (default "glm5 dsv3 qwen3") picks the models: "dsv3 qwen3" measures the two the fit
# never sees, when GLM-5's steps come from tools/h200_example.sh in the same session.
# Usage (on the GPU machine, .whl carried): tools/h200_step.sh OUT_DIR
set -uo pipefail
out=${1:?usage: tools/h200_step.sh OUT_DIR}
# It clears results/ between models: refuse a checkout that already holds a sweep's results.
[ -e results ] && { echo "${0##*/}: results/ exists here (a sweep's); move it away first, this script clears it between models" >&2; exit 2; }
models=" ${STEP_MODELS:-glm5 dsv3 qwen3} "
mkdir -p "$out/glm5" "$out/dsv3" "$out/qwen3"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
# The fused kernels are checked against torch first; if it fails here the steps run unfused
# with torch's ops (bench.step_kernels=torch), and the layout tables say so in step_kernels.
attn=()
if ! PYTHONPATH="$PWD/src:${TILESWEEP_SITE:-/tmp/tilesweep-site}" timeout 180 python3 -m pytest -q \
  -p no:cacheprovider tests/test_mla_decode.py tests/test_step_fused.py -k gpu 2>&1 | tail -15 | tee "$out/mla_check.log" |
  grep -q " passed"; then
  attn=(bench.step_kernels=torch)
fi
if grep -q "failed" "$out/mla_check.log"; then attn=(bench.step_kernels=torch); fi
layouts="tp1-pp1-ep1 tp8-pp1-ep1 tp1-pp1-ep8 tp4-pp2-ep1"
targets="results/device/ceilings.json"
for lay in $layouts; do targets="$targets results/layout/$lay.csv"; done
if [[ $models == *" glm5 "* ]]; then
  TILESWEEP_TARGETS="$targets" TILESWEEP_TIMEOUT=${GLM5_TIMEOUT:-330} \
    tools/device_sweep.sh "$out/glm5" experiment=h200_step "${attn[@]}"
  rm -rf results
fi
if [[ $models == *" dsv3 "* ]]; then
  TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv" \
    TILESWEEP_TIMEOUT=${DSV3_TIMEOUT:-150} \
    tools/device_sweep.sh "$out/dsv3" experiment=h200_step "${attn[@]}" model=deepseek_v3 'grid.layouts=[{tp:1,pp:1,ep:1}]'
  rm -rf results
fi
if [[ $models == *" qwen3 "* ]]; then
  TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv results/layout/tp4-pp1-ep1.csv" \
    TILESWEEP_TIMEOUT=${QWEN3_TIMEOUT:-150} \
    tools/device_sweep.sh "$out/qwen3" experiment=h200_step "${attn[@]}" model=qwen3_235b_a22b \
      'grid.layouts=[{tp:1,pp:1,ep:1},{tp:4,pp:1,ep:1}]' 'grid.tokens_per_expert=[4]'
  rm -rf results
fi
PYTHONPATH="$PWD/src:${TILESWEEP_SITE:-/tmp/tilesweep-site}" timeout 120 python3 -m pytest -q -p no:cacheprovider \
  tests/test_whole_step.py tests/test_mla_decode.py tests/test_step_fused.py -k "graphed or launch_counter or gpu or fused" 2>&1 | tail -5 | tee "$out/gpu_tests.log"
