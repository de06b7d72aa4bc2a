#!/usr/bin/env bash
# Do timings from a sweep run with every core match a serial run within the noise? Runs the tiny
# sweep twice with --cores all: once as usual (builds side by side), once strictly one job at a
# time (every job holds the one unit of a `serial` resource), so both give each benchmark the
# same cores. Then `tilesweep compare` prints every figure that moved beyond the noise.
# Usage: benchmarks/parallel_vs_serial.sh [WORK_DIR] [extra overrides...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
shift || true
bin=$(dirname "$(command -v python)")
[ -x "$repo/.venv/bin/snakemake" ] && bin="$repo/.venv/bin"
overrides=$(printf '"%s",' experiment=tiny "$@")
run() {
  mkdir -p "$work/$1"
  "$bin/snakemake" -s "$repo/Snakefile" --directory "$work/$1" --cores all "${@:2}" \
    --config "overrides=[${overrides%,}]" >"$work/$1.log" 2>&1
}
run parallel
run serial --default-resources serial=1 --resources serial=1
"$bin/tilesweep" compare "$work/parallel/results" "$work/serial/results" --out "$work/compare"
