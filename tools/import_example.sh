#!/usr/bin/env bash
# Bring a GPU run's measured tables into a kept example folder and re-render it here (no GPU):
# the joined tables (launch, decode, collective, layout, power) and the device's ceilings from
# the run's results.tgz (tools/device_sweep.sh writes it), the overrides it ran with, then
# `snakemake --forceall --config example=FOLDER` (verdict, check, engines, figures, reports).
# Usage: tools/import_example.sh RESULTS_TGZ FOLDER [override ...]
#   e.g. tools/import_example.sh /work/.device/1/ex/results.tgz docs/examples/h200 \
#        experiment=h200_example 'deployment.batches=[1,8,64,512]'
set -euo pipefail
tgz=${1:?usage: tools/import_example.sh RESULTS_TGZ FOLDER [override ...]}
folder=${2:?usage: tools/import_example.sh RESULTS_TGZ FOLDER [override ...]}
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$tgz" -C "$tmp"
for name in launch decode collective layout power; do
  test -s "$tmp/results/tables/$name.csv" || { echo "no $name table in $tgz" >&2; exit 1; }
  cp "$tmp/results/tables/$name.csv" "$folder/$name.csv"
done
cp "$tmp/results/device/ceilings.json" "$folder/ceilings.json"
if [ "$#" -gt 0 ]; then
  {
    echo "# The overrides this example was rendered with. Re-render it from its own tables, no GPU needed:"
    echo "#   snakemake --cores all --forceall --config example=$folder"
    echo "overrides:"
    for o in "$@"; do printf '  - "%s"\n' "$o"; done
  } >"$folder/overrides.yaml"
fi
snakemake --cores all --forceall --config example="$folder"
