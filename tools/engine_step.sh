#!/usr/bin/env bash
# The whole decode step with SGLang's kernel list beside the project's lean step, on the one GPU
# at hand: the default model (conf/config.yaml) at TP1, batches 1, 8 and 32, each list measured in
# CUDA graphs and composed from the shipped fit (deployment.fit_file); about 2-4 minutes.
# Writes OUT/engine_step.csv (and the step's own table and log) and prints a short table; any
# failure is a row with its reason. Extra arguments are Hydra overrides (engine=vllm, model=...) and
# --layout=tp8-pp1-ep1 (one rank of that layout, emulated alone; default TP1).
# ENGINE_STEP_TESTS=1 also runs tests/test_step_engine.py's GPU tests after it (about a minute).
# Usage (on the GPU machine, .whl carried): tools/engine_step.sh OUT_DIR [OVERRIDES...]
set -uo pipefail
out=${1:?usage: tools/engine_step.sh OUT_DIR [OVERRIDES...]}
shift
mkdir -p "$out"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee "$out/gpus.csv"
start=$(date +%s)
timeout 280 python3 -m tilesweep.measure.step_engine_check "$out" engine=sglang "$@" 2>&1 |
  tee "$out/engine_step.log"
rc=${PIPESTATUS[0]}
if [[ ! -s "$out/engine_step.csv" ]]; then # killed before it wrote: one row says so
  echo "kernel_list,batch,status,reason" >"$out/engine_step.csv"
  echo "all,all,runtime,step_engine_check exited $rc before writing (124: past 280 s); see engine_step.log" >>"$out/engine_step.csv"
fi
echo "engine_step: exit $rc, $(($(date +%s) - start)) s" | tee -a "$out/engine_step.log"
if [[ ${ENGINE_STEP_TESTS:-0} == 1 ]]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_step_engine.py -m gpu 2>&1 |
    tail -n 15 | tee "$out/gpu_tests.log"
fi
