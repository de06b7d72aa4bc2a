#!/usr/bin/env bash
# Run the sweep on a GPU machine that has torch, triton and nvcc but no package registry.
# Beforehand, where pip works: `python tools/fetch_wheels.py .whl` (and, for the CUTLASS GPU
# program, `bash gpu/build_cutlass.sh`); carry .whl (and gpu/bin) to the GPU machine.
# Usage: tools/device_sweep.sh OUT_DIR [snakemake overrides...]
#   e.g. tools/device_sweep.sh "$OUT" experiment=h200_decode
# TILESWEEP_TARGETS (space-separated result paths or rule names) limits the run to those targets;
# TILESWEEP_TIMEOUT (seconds, default 3600) stops Snakemake, and what finished still comes back;
# leave a minute for the archive below the device call's own limit.
set -uo pipefail
out=${1:?usage: tools/device_sweep.sh OUT_DIR [overrides...]}
shift
mkdir -p "$out"
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv | tee "$out/gpus.csv"
# No overrides: no --config at all (an empty list item would reach Hydra as `overrides=[""]`).
config=()
if [ $# -gt 0 ]; then
  overrides=$(printf '"%s",' "$@")
  config=(--config "overrides=[${overrides%,}]")
fi
start=$(date +%s)
# shellcheck disable=SC2086  # the targets are words on purpose
# -k: Snakemake waits for its running jobs after the TERM; kill it 20 s later, so the archive
# below is always written (on 2026-12-02 a TERM-ed sweep outlived the device call's limit).
timeout -k 20 "${TILESWEEP_TIMEOUT:-3600}" python3 -m snakemake ${TILESWEEP_TARGETS:-} --cores all --keep-going \
  ${config[@]+"${config[@]}"} \
  >"$out/snakemake.log" 2>&1
rc=$?
echo "snakemake exit $rc after $(( $(date +%s) - start )) s" | tee -a "$out/snakemake.log"
# One archive (the device tool brings back at most 8 files): tables, reports, plots, logs, and
# every step's own file, so a sweep cut short can still be aggregated where it is brought back.
tar czf "$out/results.tgz" --exclude='results/build/*/*/*/*.cubin' results 2>/dev/null
tail -n 30 "$out/snakemake.log"
exit $rc
