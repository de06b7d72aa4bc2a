#!/usr/bin/env bash
# Bring a GPU run's measured tables into a kept example folder and re-render it here (no GPU):
# the joined tables (launch, decode, collective, layout, power) and the device's ceilings from
# the run's results.tgz (tools/gpu.sh sweep writes it), the overrides it ran with, then
# `snakemake --forceall --config example=FOLDER` (verdict, check, engines, figures, reports).
# Every argument is checked before anything is touched (the archive, each table read as a table,
# the ceilings as JSON, the overrides composed); the folder's files are kept aside and put back
# if the re-render fails, so a bad archive or a failed render leaves the example as it was.
# Usage: tools/import_example.sh RESULTS_TGZ FOLDER [override ...]
#   e.g. tools/import_example.sh /work/.device/1/ex/results.tgz docs/examples/h200 \
#        experiment=h200_example 'deployment.batches=[1,8,64,512]'
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: tools/import_example.sh RESULTS_TGZ FOLDER [override ...]"
fail() { echo "import_example: $*; nothing changed" >&2; exit 2; }
[ $# -ge 2 ] || { echo "import_example: $usage" >&2; exit 2; }
tgz=$1
folder=$2
shift 2
# The checkout's own environment, else $PYTHON (or python3): checked where it is first needed.
py="$root/.venv/bin/python"
[ -x "$py" ] || py=${PYTHON:-python3}
[ ! -e "$tgz" ] || [ -f "$tgz" ] || fail "$tgz: not a plain file (a folder, a pipe or a device)"
[ -f "$tgz" ] || fail "$tgz: no such file"
[ -d "$folder" ] || fail "$folder: not a folder (a kept example folder must exist)"
[ $# -gt 0 ] || [ -f "$folder/overrides.yaml" ] ||
  fail "$folder: no overrides.yaml there and none given"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=$(tar tzf "$tgz" 2>/dev/null) || fail "$tgz: not a gzipped tar archive"
! grep -qE '(^|/)\.\.(/|$)' <<<"$names" || fail "$tgz: a member's path climbs out (..)"
tar xzf "$tgz" -C "$tmp" 2>/dev/null || fail "$tgz: not a gzipped tar archive"
files=(tables/launch.csv tables/decode.csv tables/collective.csv tables/layout.csv
  tables/power.csv device/ceilings.json)
# Each file a plain file, each table a table with rows, the ceilings a JSON object, and the
# overrides composed as the re-render will compose them (the same one-line refusals).
"$py" -c 'import omegaconf, pandas, yaml' 2>/dev/null ||
  fail "$py cannot import pandas, omegaconf and yaml (no $root/.venv): set PYTHON to the project's Python"
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$tmp/results" "$tgz" "$@" <<'PY' ||
import json
import sys
from pathlib import Path

import pandas as pd

from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError

base, tgz, overrides = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
for name in ("launch", "decode", "collective", "layout", "power"):
    path = base / "tables" / f"{name}.csv"
    if not path.is_file() or path.is_symlink():
        sys.exit(f"import_example: {tgz}: no {name} table (results/tables/{name}.csv)")
    try:
        table = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one line
        sys.exit(f"import_example: {tgz}: results/tables/{name}.csv is not a table ({exc})")
    if table.empty or "status" not in table.columns:
        sys.exit(f"import_example: {tgz}: results/tables/{name}.csv has no rows or no status")
path = base / "device" / "ceilings.json"
try:
    ceilings = json.loads(path.read_text())
except (OSError, ValueError, RecursionError) as exc:
    sys.exit(f"import_example: {tgz}: results/device/ceilings.json unreadable ({exc})")
if not isinstance(ceilings, dict):
    sys.exit(f"import_example: {tgz}: results/device/ceilings.json is not a JSON object")
try:
    compose_settings(overrides)
except ConfigError as exc:
    sys.exit(f"import_example: {exc}")
PY
  exit 2 # the one line above says why; nothing changed
# Keep the folder's files aside; put them back if anything below fails.
keep="$tmp/keep"
mkdir "$keep"
cp -a "$folder/." "$keep/"
restore() {
  echo "import_example: the re-render failed; $folder put back as it was" >&2
  find "$folder" -mindepth 1 -delete
  cp -a "$keep/." "$folder/"
}
trap 'rm -rf "$tmp"' EXIT
{
  for f in "${files[@]}"; do cp "$tmp/results/$f" "$folder/$(basename "$f")"; done
  if [ "$#" -gt 0 ]; then
    PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$folder" "$@" <<'PY'
import sys
from pathlib import Path

import yaml

folder, overrides = sys.argv[1], sys.argv[2:]
head = (
    "# The overrides this example was rendered with. Re-render it from its own tables, no GPU"
    f" needed:\n#   snakemake --cores all --forceall --config example={folder}\n"
)
body = yaml.safe_dump({"overrides": overrides}, default_flow_style=False, width=1000)
Path(folder, "overrides.yaml").write_text(head + body)
PY
  fi
  snakemake --cores all --forceall --config example="$folder"
} || { restore; exit 1; }
echo "import_example: $folder re-rendered from $tgz"
