#!/usr/bin/env bash
# The one entry point for a GPU machine: tools/gpu.sh TASK OUT_DIR [ARGS...], from the repository
# root; `tools/gpu.sh --help` lists the tasks. Each task runs on whatever GPU is at hand; a task
# whose defaults (a preset, the kept example's picks) were made for the H200 says so in its line.
# Beforehand, where pip works: `python tools/fetch_wheels.py .whl` (and, for the CUTLASS GPU
# program, `bash gpu/build_cutlass.sh`); carry .whl (and gpu/bin) to the GPU machine, which needs
# torch, triton and nvcc but no package registry. Every task sources tools/gpu_env.sh (the carried
# wheels beside the machine's own torch and triton, NVLink multicast off).
# A usage error (no OUT_DIR, an argument the task does not take) is one line, exit 2, and
# creates nothing. Each task was once its own script (tools/device_sweep.sh, tools/answer_time.sh,
# tools/engine_step.sh, tools/h200_<task>.sh; docs/examples/*/CHANGELOG.md keeps the names as
# run); the behaviour, environment variables and outputs are theirs.
set -uo pipefail
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$tools/gpu.sh"

# The tasks: name | arguments after OUT_DIR ("" = none) | one line for --help.
# Task NAME runs the function task_NAME (dashes as underscores) below, which documents it.
TASKS=(
  "sweep|[OVERRIDES...]|the Snakemake sweep (default, or a preset: experiment=h200_decode); OUT_DIR/snakemake.log, results.tgz"
  "answer-time|[OVERRIDES...]|the default sweep stopped once its answer card is written: the time a new user waits; OUT_DIR/answer_time.txt"
  "engine-step|[OVERRIDES...]|the whole decode step with SGLang's kernel list beside the lean one, TP1, batches 1/8/32 (2-4 min); OUT_DIR/engine_step.csv"
  "example||regenerate docs/examples/h200 (H200 defaults: experiment=h200_example; about 10 min; OMIT_LAYOUTS=1 skips the whole steps)"
  "layouts||ceilings and every layout's graphed step of GLM-5, then DeepSeek-V3 and Qwen3 (H200 defaults: h200_example, h200_step; about 7 min); OUT_DIR/runs.tgz"
  "step||the decode step as engines run it, fused kernels checked first (H200 defaults: experiment=h200_step); OUT_DIR/{glm5,dsv3,qwen3}/"
  "engine-tables|[engine_tables.py ARGS...]|drop-in engine config files decided decode-true from the kept H200 picks (carry .engine_kernels); OUT_DIR/dropins.csv"
  "engine-tune|[engine-tune ARGS...]|tune and pick in the engines' own fused-MoE kernels, the kept H200 picks screened beside them (carry .engine_kernels)"
  "engine-check||the kept H200 example's project-kernel bf16 picks timed by engine-check in vLLM's kernel (carry .engine_kernels)"
)

# Print the usage and one line per task.
help_text() {
  local row name args line
  echo "usage: tools/gpu.sh TASK OUT_DIR [ARGS...]   (on the GPU machine, from the repository root, .whl carried)"
  echo "tasks:"
  for row in "${TASKS[@]}"; do
    IFS='|' read -r name args line <<<"$row"
    printf '  %-13s OUT_DIR %-27s %s\n' "$name" "$args" "$line"
  done
}

# The sweep (Snakemake) with the given overrides: OUT_DIR gets gpus.csv, snakemake.log and one
# archive, results.tgz (tables, reports, plots, logs and every step's own file, so a sweep cut
# short can still be aggregated where it is brought back), e.g. `tools/gpu.sh sweep "$OUT"
# experiment=h200_decode`. TILESWEEP_TARGETS (space-separated result paths or rule names) limits
# the run to those targets; TILESWEEP_TIMEOUT (seconds, default 3600) stops Snakemake, and what
# finished still comes back; leave a minute for the archive below the device call's own limit.
task_sweep() {
  local out=$1 rc start sweep
  shift
  mkdir -p "$out"
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv | tee "$out/gpus.csv"
  # No overrides: no --config at all (an empty list item would reach Hydra as `overrides=[""]`).
  local config=() overrides
  if [ $# -gt 0 ]; then
    overrides=$(printf '"%s",' "$@")
    config=(--config "overrides=[${overrides%,}]")
  fi
  start=$(date +%s)
  # -k: Snakemake waits for its running jobs after the TERM; kill it 20 s later, so the archive
  # below is always written (on 2026-12-02 a TERM-ed sweep outlived the device call's limit).
  # shellcheck disable=SC2086  # the targets are words on purpose
  timeout -k 20 "${TILESWEEP_TIMEOUT:-3600}" python3 -m snakemake ${TILESWEEP_TARGETS:-} --cores all --keep-going \
    ${config[@]+"${config[@]}"} \
    >"$out/snakemake.log" 2>&1 &
  sweep=$!
  # `timeout` runs Snakemake in a process group of its own, which a TERM or Ctrl-C meant for this
  # script never reaches: pass it on, so stopping this script stops the sweep (then the archive).
  trap 'kill -TERM "$sweep" 2>/dev/null' INT TERM
  while kill -0 "$sweep" 2>/dev/null; do wait "$sweep"; done
  wait "$sweep"
  rc=$?
  trap - INT TERM
  echo "snakemake exit $rc after $(($(date +%s) - start)) s" | tee -a "$out/snakemake.log"
  # One archive (the device tool brings back at most 8 files).
  tar czf "$out/results.tgz" --exclude='results/build/*/*/*/*.cubin' results 2>/dev/null
  tail -n 30 "$out/snakemake.log"
  exit $rc
}

# Time to the answer: the default sweep (task sweep, with the given overrides) stopped once the
# verdict has written its answer card, so a short device lease measures what a new user waits
# for. Carry .whl and gpu/bin, as for sweep. OUT_DIR gets snakemake.log (its "verdict ended Ns
# into the run" line), sweep_stdout.txt, answer_time.txt, card.json and results.tgz.
# TILESWEEP_ANSWER_LIMIT (seconds, default 540): stop there even with no card.
task_answer_time() {
  local out=$1 limit card sweep start
  shift
  mkdir -p "$out"
  limit=${TILESWEEP_ANSWER_LIMIT:-540}
  card=results/tables/card.json
  rm -f "$card"
  TILESWEEP_TIMEOUT=$limit bash "$self" sweep "$out" "$@" >"$out/sweep_stdout.txt" 2>&1 &
  sweep=$!
  start=$(date +%s)
  while [ ! -f "$card" ] && kill -0 "$sweep" 2>/dev/null; do sleep 2; done
  echo "card: $([ -f "$card" ] && echo written || echo none) after $(($(date +%s) - start)) s" | tee "$out/answer_time.txt"
  # The console prints the card once Snakemake reports the verdict job done, a moment after the
  # job wrote it: wait for that line (30 s at most) before stopping the sweep.
  for _ in $(seq 15); do
    grep -q "verdict ended" "$out/snakemake.log" 2>/dev/null || ! kill -0 "$sweep" 2>/dev/null && break
    sleep 2
  done
  # Stop the rest of this sweep only: TERM its `timeout`, which passes it to Snakemake (waiting
  # for its running jobs) and KILLs it 20 s later (-k 20); never another Snakemake on the machine.
  pkill -TERM -P "$sweep" -x timeout || true
  wait "$sweep"
  cp "$card" "$out/" 2>/dev/null || true
  grep -A14 "verdict ended" "$out/snakemake.log" | tee -a "$out/answer_time.txt"
}

# The whole decode step with SGLang's kernel list beside the project's lean step, on the one GPU
# at hand: the default model (conf/config.yaml) at TP1, batches 1, 8 and 32, each list measured in
# CUDA graphs and composed from the shipped fit (deployment.fit_file); about 2-4 minutes.
# Writes OUT_DIR/engine_step.csv (and the step's own table, engine_step.log and gpus.csv) and
# prints a short table; any failure is a row with its reason. Extra arguments are Hydra overrides
# (engine=vllm, model=...) and --layout=tp8-pp1-ep1 (one rank of that layout, emulated alone;
# default TP1). ENGINE_STEP_TESTS=1 also runs tests/test_step_engine.py's GPU tests after it
# (about a minute; OUT_DIR/gpu_tests.log).
task_engine_step() {
  local out=$1 rc start
  shift
  mkdir -p "$out"
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee "$out/gpus.csv"
  start=$(date +%s)
  timeout 280 python3 -m tilesweep.measure.step.engine_check "$out" engine=sglang "$@" 2>&1 |
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
}

# Regenerate docs/examples/h200 from one run on one GPU (issue 26, item 7; its defaults are the
# H200's): the decode sweep of conf/experiment/h200_example.yaml at the verdict's four batches
# (launch, decode, collectives, the graphed whole step of every layout, ceilings and power, all
# from the same code), the fused-MoE tuning left out (the folder's tuning journals are replayed
# where it is re-rendered); TILESWEEP_TIMEOUT defaults to 540 here.
# Plan about 10 minutes of device time: ask `status` first, since a call cut by the session's
# device budget brings nothing back (2026-12-04: 334 s were left and the sweep wrote nothing).
# Carry .whl and gpu/bin (tools/fetch_wheels.py, gpu/build_cutlass.sh). Then, here:
#   tools/import_example.sh FILES_AT/ex/results.tgz docs/examples/h200
# OMIT_LAYOUTS=1 leaves out the whole steps and what needs them (tables, verdict, report):
# launch, decode, collectives, ceilings and power alone (327 s on 2026-12-04), for layouts
# measured in another call (task layouts); join the two runs' per-cell outputs with the
# `tables` rule here.
task_example() {
  local out=$1
  [[ ${OMIT_LAYOUTS:-0} == 1 ]] && export TILESWEEP_TARGETS="--omit-from bench_layout"
  TILESWEEP_TIMEOUT=${TILESWEEP_TIMEOUT:-540} bash "$self" sweep "$out" \
    experiment=h200_example 'deployment.batches=[1,8,64,512]' backend.fused_moe.enabled=false
}

# Refuse a checkout that already holds a sweep's results (the task clears results/ between models).
refuse_results() {
  [ -e results ] && { echo "gpu.sh $1: results/ exists here (a sweep's); move it away first, this task clears it between models" >&2; exit 2; }
  return 0
}

# Re-measure what the example's check and verdict rest on, in one device call of about 7 minutes
# (its presets are the H200's: h200_example, h200_step): the device's ceilings and per-kernel
# cost, the graphed whole step of GLM-5 (conf/experiment/h200_example.yaml) for every layout at
# every batch (TP1 and one rank of each other layout emulated), then the steps of DeepSeek-V3
# (TP1) and Qwen3-235B-A22B (TP1 and one TP4 rank), which the fit never sees, and the GPU tests
# of the step's kernels. PROFILE_BATCHES (e.g. 1,64; default none) also brings back the kernels
# of each graphed GLM-5 step at those batches (TILESWEEP_KERNEL_PROFILE); off by default, so no
# kept time is taken in a process that ran the profiler. LAYOUT_MODELS (default "glm5 dsv3
# qwen3") picks the models; GLM5_TIMEOUT, DSV3_TIMEOUT, QWEN3_TIMEOUT (330, 100, 100 s) bound each.
# Carry .whl (tools/fetch_wheels.py). Then, here:
#   tar xzf FILES_AT/runs.tgz; tools/import_example.sh glm5/results.tgz docs/examples/h200 experiment=h200_example \
#     'deployment.batches=[1,8,64,512]'   (the other tables: docs/examples/h200/README.md, "How it was made")
task_layouts() {
  local out=$1 only layouts targets lay profile=()
  only=" ${LAYOUT_MODELS:-glm5 dsv3 qwen3} "
  refuse_results layouts
  mkdir -p "$out"
  layouts="tp1-pp1-ep1 tp2-pp1-ep1 tp1-pp1-ep2 tp1-pp2-ep1 tp8-pp1-ep1 tp4-pp2-ep1 tp1-pp1-ep8"
  targets="results/device/ceilings.json"
  for lay in $layouts; do targets="$targets results/layout/$lay.csv"; done
  [[ -n ${PROFILE_BATCHES:-} ]] && profile=(TILESWEEP_KERNEL_PROFILE="$PWD/results/kernels" TILESWEEP_KERNEL_PROFILE_BATCHES="$PROFILE_BATCHES")
  [[ $only == *" glm5 "* ]] && env "${profile[@]}" TILESWEEP_TARGETS="$targets" \
    TILESWEEP_TIMEOUT="${GLM5_TIMEOUT:-330}" bash "$self" sweep "$out/glm5" \
    experiment=h200_example 'deployment.batches=[1,8,64,512]' backend.fused_moe.enabled=false
  rm -rf results
  [[ $only == *" dsv3 "* ]] && TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv" \
    TILESWEEP_TIMEOUT=${DSV3_TIMEOUT:-100} bash "$self" sweep "$out/dsv3" \
    experiment=h200_step model=deepseek_v3 'grid.layouts=[{tp:1,pp:1,ep:1}]'
  rm -rf results
  [[ $only == *" qwen3 "* ]] && TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv results/layout/tp4-pp1-ep1.csv" \
    TILESWEEP_TIMEOUT=${QWEN3_TIMEOUT:-100} bash "$self" sweep "$out/qwen3" \
    experiment=h200_step model=qwen3_235b_a22b 'grid.layouts=[{tp:1,pp:1,ep:1},{tp:4,pp:1,ep:1}]' \
    'grid.tokens_per_expert=[4]'
  rm -rf results
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_mla_decode.py \
    tests/test_step_fused.py tests/test_whole_step.py -k "gpu or graphed or fused" 2>&1 |
    tail -5 | tee "$out/gpu_tests.log"
  # The device tool brings back at most 8 files: one archive of the three runs (tables, logs).
  mkdir -p "$out/glm5" "$out/dsv3" "$out/qwen3"
  tar czf "$out/runs.tgz" -C "$out" glm5 dsv3 qwen3 gpu_tests.log && rm -rf "$out/glm5" "$out/dsv3" "$out/qwen3"
}

# The decode step as engines run it (conf/experiment/h200_step.yaml, the H200's preset): the
# device's ceilings and per-kernel cost, the graphed TP1 whole step of GLM-5 and one rank of TP8,
# EP8 and TP4+PP2 emulated, then the graphed TP1 step of DeepSeek-V3 and the TP1 step and one TP4
# rank of Qwen3-235B-A22B (GQA attention; models the fit never saw), and the GPU check that a
# graphed and an eager step pick the same tokens. OUT_DIR gets mla_check.log, gpu_tests.log and
# one sweep folder per model (glm5, dsv3, qwen3). STEP_MODELS (default "glm5 dsv3 qwen3") picks
# the models: "dsv3 qwen3" measures the two the fit never sees, when GLM-5's steps come from task
# example in the same session; GLM5_TIMEOUT, DSV3_TIMEOUT, QWEN3_TIMEOUT (330, 150, 150 s) bound each.
task_step() {
  local out=$1 models attn=() layouts targets lay
  refuse_results step
  models=" ${STEP_MODELS:-glm5 dsv3 qwen3} "
  mkdir -p "$out/glm5" "$out/dsv3" "$out/qwen3"
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  # The fused kernels are checked against torch first; if it fails here the steps run unfused
  # with torch's ops (bench.step_kernels=torch), and the layout tables say so in step_kernels.
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
      bash "$self" sweep "$out/glm5" experiment=h200_step "${attn[@]}"
    rm -rf results
  fi
  if [[ $models == *" dsv3 "* ]]; then
    TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv" \
      TILESWEEP_TIMEOUT=${DSV3_TIMEOUT:-150} \
      bash "$self" sweep "$out/dsv3" experiment=h200_step "${attn[@]}" model=deepseek_v3 'grid.layouts=[{tp:1,pp:1,ep:1}]'
    rm -rf results
  fi
  if [[ $models == *" qwen3 "* ]]; then
    TILESWEEP_TARGETS="results/device/ceilings.json results/layout/tp1-pp1-ep1.csv results/layout/tp4-pp1-ep1.csv" \
      TILESWEEP_TIMEOUT=${QWEN3_TIMEOUT:-150} \
      bash "$self" sweep "$out/qwen3" experiment=h200_step "${attn[@]}" model=qwen3_235b_a22b \
      'grid.layouts=[{tp:1,pp:1,ep:1},{tp:4,pp:1,ep:1}]' 'grid.tokens_per_expert=[4]'
    rm -rf results
  fi
  PYTHONPATH="$PWD/src:${TILESWEEP_SITE:-/tmp/tilesweep-site}" timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/test_whole_step.py tests/test_mla_decode.py tests/test_step_fused.py -k "graphed or launch_counter or gpu or fused" 2>&1 | tail -5 | tee "$out/gpu_tests.log"
}

# Drop-in engine config files that are true for decode (issue 38), on one GPU: the kept H200
# example's tuned picks (docs/examples/h200/engine_tune*/<engine>-<version>/picks_E=*.json) for
# GLM-5 TP1 (E=256, N=2048) and TP8 (E=256, N=256), bf16, fp8 and fp8 128x128 blocks, in vLLM's
# and SGLang's own kernels (the versions conf pins), re-checked decode-true (cold L2 over rotated
# weight copies, CUDA-graph replays) at every batch key M = 1-4,096 on uniform and Zipf routing
# against what the engine runs today (its shipped table from the pinned wheel, else its default
# rule) on two draws; a key keeps the pick only where it won beyond the noise on both, else it
# takes the engine's current config; then one held-out draw (tools/engine_tables.py, which takes
# the extra arguments). Not a new tune: a full tune of 12 files does not fit the 7 minutes. Files
# are decided fp8_block first, then bf16, then fp8, TP8 before TP1; one not started within the
# budget is withheld and says so in dropins.csv (run again with e.g. --format fp8 to decide the
# rest). TILESWEEP_TABLES_BUDGET_S (300) and TILESWEEP_TABLES_LIMIT_S (370) bound it.
# Each file's configs are compiled (15 processes) just before it is timed. Carry .whl
# (tools/fetch_wheels.py) and .engine_kernels (tools/fetch_engine_kernels.py at this commit or
# later: kernels, shipped tables and get_config_file_name, with hashes; an older extraction
# lacks the tables and is refused before anything runs); the Triton cache is kept in
# .triton_cache between calls. Writes OUT_DIR/gpus.csv, tables.log, dropins.csv and
# engine_tables.tgz (exports, checks); tools/import_engine_tables.sh brings them in here.
task_engine_tables() {
  local out=$1 start
  shift
  mkdir -p "$out"
  start=$(date +%s)
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  export TRITON_CACHE_DIR="$PWD/.triton_cache"
  python3 - <<'PY' || exit 1
import json
from pathlib import Path

from tilesweep.config import compose

for engine, version in compose([])["backend"]["fused_moe"]["engine_versions"].items():
    manifest = Path(f".engine_kernels/{engine}-{version}/manifest.json")
    got = json.loads(manifest.read_text()) if manifest.is_file() else {}
    if "tables" not in got or "names_py_sha256" not in got:
        raise SystemExit(f"{manifest}: missing or without shipped tables; run "
                         "tools/fetch_engine_kernels.py of this commit and carry .engine_kernels")
PY
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpus.csv"
  python3 -c 'import torch, triton; p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__}, triton {triton.__version__}, L2 {p.L2_cache_size} bytes")' |
    tee "$out/tables.log"
  timeout -k 10 "${TILESWEEP_TABLES_LIMIT_S:-370}" python3 tools/engine_tables.py --out "$out/tables" \
    --budget-s "${TILESWEEP_TABLES_BUDGET_S:-300}" "$@" 2>&1 | tee -a "$out/tables.log"
  echo "engine tables: $(($(date +%s) - start)) s" | tee -a "$out/tables.log"
  cp "$out/tables/dropins.csv" "$out/dropins.csv" 2>/dev/null
  tar -C "$out" -czf "$out/engine_tables.tgz" tables && rm -rf "$out/tables"
}

# Tables tuned and picked in the engines' own fused-MoE kernels (tilesweep engine-tune), GLM-5
# TP1 (E=256, N=2048) and TP8 (E=256, N=256), each checked on fresh data against the engine's
# default in that kernel; the project kernel's bf16 picks of the kept H200 example are screened
# beside the neighbours. Extra arguments go to engine-tune (default: --shape 256,2048 --shape
# 256,256, i.e. both engines, bf16 and fp8_block, both shapes, every batch key). OUT_DIR gets
# gpus.csv, engine_tune.log and engine-tune's own output. Carry .whl and .engine_kernels
# (tools/fetch_engine_kernels.py).
task_engine_tune() {
  local out=$1 kept start args
  shift
  mkdir -p "$out"
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
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
}

# The kept H200 example's project-kernel bf16 picks (not engine files), GLM-5 TP1 (E=256,
# N=2048) and TP8 (E=256, N=256), timed against vLLM's default config in vLLM's own fused-MoE
# kernel (tilesweep engine-check), on the GPU at hand; OUT_DIR gets gpus.csv and one
# check_<file>.csv and .log per file. Carry .whl and .engine_kernels (tools/fetch_engine_kernels.py).
task_engine_check() {
  local out=$1 tuned file name start
  mkdir -p "$out"
  # shellcheck source=tools/gpu_env.sh
  source "$tools/gpu_env.sh" || exit 1
  nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/gpus.csv"
  tuned=docs/examples/h200
  for file in "$tuned/tune_work/project_kernel/bf16/project_kernel_E=256,N=2048,device_name=NVIDIA_H200.json" \
    "$tuned/tune_layouts/project_kernel/bf16/project_kernel_E=256,N=256,device_name=NVIDIA_H200.json"; do
    name=$(basename "$file" .json | cut -d, -f1-2 | tr ',=' '_-')
    start=$(date +%s)
    python3 -m tilesweep.cli engine-check "$file" --out "$out/check_$name.csv" 2>&1 |
      tail -n 20 | tee "$out/check_$name.log"
    echo "$name: $(($(date +%s) - start)) s" | tee -a "$out/check_$name.log"
  done
}

# The options a task's extra arguments may hold: "those taking a value|flags"; every other
# argument must be a Hydra override (KEY=VALUE, +KEY=VALUE, ~KEY). tools/engine_tables.py and
# `tilesweep engine-tune` check the values themselves; gpu.sh sets their --out.
task_options() {
  case $1 in
    engine-tables) echo "--budget-s --repeats --check-experts --engine --format --shape --from|--force" ;;
    engine-tune) echo "--engine --format --shape --keys --extra|" ;;
    engine-step) echo "--layout|" ;;
    *) echo "|" ;;
  esac
}

# Refuse, in one line and exit 2, an argument after OUT_DIR that the task does not take (before
# anything is created or installed: off a GPU machine pip's own lines named none of it).
check_args() {
  local usage=$1 task=$2 opts flags arg want=""
  shift 2
  IFS='|' read -r opts flags <<<"$(task_options "$task")"
  for arg in "$@"; do
    if [[ -n $want ]]; then want=""; continue; fi # the value of the option before it
    case $arg in
      --*=*) [[ " $opts " == *" ${arg%%=*} "* ]] || { echo "$usage (unknown option: ${arg%%=*})" >&2; exit 2; } ;;
      --*)
        if [[ " $opts " == *" $arg "* ]]; then want=$arg
        elif [[ " $flags " != *" $arg "* ]]; then echo "$usage (unknown option: $arg)" >&2; exit 2; fi ;;
      -*) echo "$usage (unknown option: $arg)" >&2; exit 2 ;;
      [~+]* | *=*) ;;
      *) echo "$usage (not a Hydra override, KEY=VALUE: $arg)" >&2; exit 2 ;;
    esac
  done
  [[ -z $want ]] || { echo "$usage ($want needs a value)" >&2; exit 2; }
}

# Refuse, in one line and exit 2, an OUT_DIR that is a file, or that cannot be made or written
# (its nearest existing folder not writable), before anything is made.
check_out_dir() {
  local task=$1 out=$2 up probe
  [[ -e $out && ! -d $out ]] && { echo "gpu.sh $task: OUT_DIR=$out is a file, not a folder" >&2; exit 2; }
  up=$out
  while [[ ! -e $up ]]; do up=$(dirname "$up"); done
  # A probe folder made and removed at once (root passes `-w` on a read-only file system).
  if [[ ! -d $up ]] || ! probe=$(mktemp -d "$up/.gpu-sh-probe.XXXXXX" 2>/dev/null) || ! rmdir "$probe"; then
    echo "gpu.sh $task: OUT_DIR=$out cannot be written ($up is not a writable folder)" >&2
    exit 2
  fi
}

# Refuse, in one line and exit 2, a machine a task cannot run on: no nvidia-smi (not a GPU
# machine), or neither the carried wheels (.whl) nor Snakemake and Hydra installed.
need_gpu_machine() {
  command -v nvidia-smi >/dev/null 2>&1 ||
    { echo "gpu.sh $1: no nvidia-smi here: run it on the GPU machine (tools/gpu.sh --help)" >&2; exit 2; }
  if ! python3 -c 'import snakemake, hydra' 2>/dev/null && ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu.sh $1: no carried wheels in .whl/ here ($PWD): run python tools/fetch_wheels.py .whl where pip works and carry .whl" >&2
    exit 2
  fi
  # Every task runs Snakemake or the tests on the checkout it is run from.
  if [[ ! -f Snakefile || ! -d conf ]]; then
    echo "gpu.sh $1: no Snakefile and conf/ here ($PWD): run it from the repository root" >&2
    exit 2
  fi
}

# Dispatch: every argument is checked before a task touches anything.
main() {
  local task=${1:-} row name args line
  case $task in
    -h | --help | help) help_text; exit 0 ;;
    "") help_text >&2; exit 2 ;;
  esac
  for row in "${TASKS[@]}"; do
    IFS='|' read -r name args line <<<"$row"
    [[ $name == "$task" ]] || continue
    local usage="usage: tools/gpu.sh $name OUT_DIR${args:+ $args}"
    if [[ $# -lt 2 || -z $2 || $2 == -* ]]; then echo "$usage" >&2; exit 2; fi
    if [[ -z $args && $# -gt 2 ]]; then echo "$usage (no arguments after OUT_DIR; got: ${*:3})" >&2; exit 2; fi
    check_args "$usage" "$name" "${@:3}"
    check_out_dir "$name" "$2"
    [[ $name == layouts || $name == step ]] && refuse_results "$name"
    need_gpu_machine "$name"
    shift
    "task_${name//-/_}" "$@"
    exit
  done
  echo "gpu.sh: unknown task '$task' (tools/gpu.sh --help lists them)" >&2
  exit 2
}

main "$@"
