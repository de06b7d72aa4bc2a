#!/usr/bin/env bash
# Time to the answer on a GPU machine: the default sweep (tools/device_sweep.sh) stopped once the
# verdict has written its answer card, so a short device lease measures what a new user waits for.
# Usage: tools/answer_time.sh OUT_DIR [overrides...]   (carry .whl and gpu/bin, as device_sweep.sh)
# OUT_DIR gets snakemake.log (its "verdict ended Ns into the run" line), card.json, results.tgz.
# TILESWEEP_ANSWER_LIMIT (seconds, default 540): stop there even with no card.
set -uo pipefail
out=${1:?usage: tools/answer_time.sh OUT_DIR [overrides...]}
shift
mkdir -p "$out"
limit=${TILESWEEP_ANSWER_LIMIT:-540}
card=results/tables/card.json
rm -f "$card"
TILESWEEP_TIMEOUT=$limit bash "$(dirname "$0")/device_sweep.sh" "$out" "$@" >"$out/sweep_stdout.txt" 2>&1 &
sweep=$!
start=$(date +%s)
while [ ! -f "$card" ] && kill -0 "$sweep" 2>/dev/null; do sleep 2; done
echo "card: $([ -f "$card" ] && echo written || echo none) after $(($(date +%s) - start)) s" | tee "$out/answer_time.txt"
# Stop the rest of the sweep (Snakemake waits for its running jobs; killed 20 s later).
pkill -TERM -f -- "-m snakemake" || true
sleep 20
pkill -KILL -f -- "-m snakemake" || true
wait "$sweep"
cp "$card" "$out/" 2>/dev/null || true
grep -A14 "verdict ended" "$out/snakemake.log" | tee -a "$out/answer_time.txt"
