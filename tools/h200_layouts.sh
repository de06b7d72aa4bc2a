#!/usr/bin/env bash
# Re-measure what the example's check and verdict rest on, on one H200, in one device call of
# about 7 minutes: the device's ceilings and per-kernel cost, the graphed whole step of GLM-5
# (conf/experiment/h200_example.yaml) for every layout at every batch (TP1 and one rank of each
# other layout emulated), then the steps of DeepSeek-V3 (TP1) and Qwen3-235B-A22B (TP1 and one
# TP4 rank), which the fit never sees, and the GPU tests of the step's kernels. PROFILE_BATCHES
# (e.g. 1,64; default none) also brings back the kernels of each graphed GLM-5 step at those
# batches (TILESWEEP_KERNEL_PROFILE); off by default, so no kept time is taken in a process that
# ran the profiler.
# Carry .whl (tools/fetch_wheels.py). Then, here:
#   tar xzf FILES_AT/runs.tgz; tools/import_example.sh glm5/results.tgz docs/examples/h200 experiment=h200_example \
#     'deployment.batches=[1,8,64,512]'   (the other tables: docs/examples/h200/README.md, "How it was made")
# LAYOUT_MODELS (default "glm5 dsv3 qwen3") picks the models.
# Usage (on the GPU machine): tools/h200_layouts.sh OUT_DIR
set -uo pipefail
only=" ${LAYOUT_MODELS:-glm5 dsv3 qwen3} "
out=${1:?usage: tools/h200_layouts.sh OUT_DIR}
mkdir -p "$out"
# It clears results/ between models: refuse a checkout that already holds a sweep's results.
[ -e results ] && { echo "${0##*/}: results/ exists here (a sweep's); move it away first, this script clears it between models" >&2; exit 2; }
layouts="tp1-pp1-ep1 tp2-pp1-ep1 tp1-pp1-ep2 tp1-pp2-ep1 tp8-pp1-ep1 tp4-pp2-ep1 tp1-pp1-ep8"
targets="results/device/ceilings.json"
for lay in $layouts; do targets="$targets results/layout/$lay.csv"; done
profile=()
[[ -n ${PROFILE_BATCHES:-} ]] && profile=(TILESWEEP_KERNEL_PROFILE="$PWD/results/kernels" TILESWEEP_KERNEL_PROFILE_BATCHES="$PROFILE_BATCHES")
[[ $only == *" glm5 "* ]] && env "${profile[@]}" TILESWEEP_TARGETS="$targets" \
  TILESWEEP_TIMEOUT=${GLM5_TIMEOUT:-330} "$(dirname "$0")/device_sweep.sh" "$out/glm5" \
  experiment=h200_example 'deployment.batches=[1,8,64,512]' backend.fused_moe.enabled=false
rm -rf results
[[ $only == *" dsv3 "* ]] && TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv" \
  TILESWEEP_TIMEOUT=${DSV3_TIMEOUT:-100} "$(dirname "$0")/device_sweep.sh" "$out/dsv3" \
  experiment=h200_step model=deepseek_v3 'grid.layouts=[{tp:1,pp:1,ep:1}]'
rm -rf results
[[ $only == *" qwen3 "* ]] && TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv results/layout/tp4-pp1-ep1.csv" \
  TILESWEEP_TIMEOUT=${QWEN3_TIMEOUT:-100} "$(dirname "$0")/device_sweep.sh" "$out/qwen3" \
  experiment=h200_step model=qwen3_235b_a22b 'grid.layouts=[{tp:1,pp:1,ep:1},{tp:4,pp:1,ep:1}]' \
  'grid.tokens_per_expert=[4]'
rm -rf results
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_mla_decode.py \
  tests/test_step_fused.py tests/test_whole_step.py -k "gpu or graphed or fused" 2>&1 |
  tail -5 | tee "$out/gpu_tests.log"
# The device tool brings back at most 8 files: one archive of the three runs (tables, logs).
mkdir -p "$out/glm5" "$out/dsv3" "$out/qwen3"
tar czf "$out/runs.tgz" -C "$out" glm5 dsv3 qwen3 gpu_tests.log && rm -rf "$out/glm5" "$out/dsv3" "$out/qwen3"
