#!/usr/bin/env bash
# Standing target: the default sweep finishes in 10 minutes or less on 2 CPU cores, from a fresh
# clone. Clones this checkout into a new folder, runs `make bootstrap` (timed apart: it is pip),
# then `make sweep` with the default config, and prints both times and the verdict.
# Usage: benchmarks/fresh_clone_sweep.sh [WORK_DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
git clone -q "$repo" "$work/tilesweep"
cd "$work/tilesweep"
t0=$(date +%s)
make -s bootstrap >/dev/null
t1=$(date +%s)
make -s sweep CORES=2 >sweep.log 2>&1
t2=$(date +%s)
sweep=$((t2 - t1))
echo "bootstrap (pip install): $((t1 - t0)) s"
echo "default sweep on 2 cores: ${sweep} s ($(nproc) cores present)"
if [ "$sweep" -le 600 ]; then echo "meets the 600 s target"; else echo "misses the 600 s target"; fi
grep -E "^[a-z_]+ +[0-9]+$" sweep.log | head -20 || true
