#!/usr/bin/env bash
# Do timings from a sweep run with every core match a serial run within the noise? Runs the tiny
# sweep twice, with --cores all and with --cores 1, then `tilesweep compare` prints every decode
# and collective figure that moved beyond both runs' p10..p90 spread.
# Usage: benchmarks/parallel_vs_serial.sh [WORK_DIR] [extra overrides...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
shift || true
bin=$(dirname "$(command -v python)")
[ -x "$repo/.venv/bin/snakemake" ] && bin="$repo/.venv/bin"
overrides=$(printf '"%s",' experiment=tiny "$@")
for cores in all 1; do
  mkdir -p "$work/cores-$cores"
  "$bin/snakemake" -s "$repo/Snakefile" --directory "$work/cores-$cores" --cores "$cores" \
    --config "overrides=[${overrides%,}]" >"$work/cores-$cores.log" 2>&1
done
"$bin/tilesweep" compare "$work/cores-all/results" "$work/cores-1/results" --out "$work/compare"
