#!/usr/bin/env bash
# Bring `tools/gpu.sh engine-tables`'s output (the folder its files came back to: gpus.csv,
# tables.log, dropins.csv, engine_tables.tgz) into docs/examples/h200/engine_tables/ (no GPU):
# export/ (the drop-in files, laid out as the engines load them), checks/ (every draw's rows),
# dropins.csv, the log and the device. A later call's folder may be given too (e.g. the files a
# second call with --format fp8 decided): its drop-ins are added and dropins.csv's rows of the
# files it decided replace the first call's "not re-checked" rows.
# Every argument is checked before anything is touched; the new tree is built beside the kept
# one and swapped in only when complete (a bad argument leaves the kept tree as it was).
# Usage: tools/import_engine_tables.sh FILES_AT [MORE_FILES_AT ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: tools/import_engine_tables.sh FILES_AT [MORE_FILES_AT ...]"
[ $# -ge 1 ] || { echo "import_engine_tables: $usage" >&2; exit 2; }
for src in "$@"; do
  for need in engine_tables.tgz tables.log; do
    if [ -e "$src/$need" ] && [ ! -f "$src/$need" ]; then
      echo "import_engine_tables: $src/$need: not a plain file (a folder, a pipe or a device); nothing changed" >&2; exit 2
    fi
    [ -f "$src/$need" ] || { echo "import_engine_tables: $src: no $need there; nothing changed" >&2; exit 2; }
  done
  tar -tzf "$src/engine_tables.tgz" tables/dropins.csv >/dev/null 2>&1 ||
    { echo "import_engine_tables: $src/engine_tables.tgz: not a tables archive (no tables/dropins.csv); nothing changed" >&2; exit 2; }
  # The listings are read whole before grep looks (grep -q in a pipe stops early, and under
  # pipefail tar's SIGPIPE would fail the check on a good archive).
  names=$(tar -tzf "$src/engine_tables.tgz" 2>/dev/null)
  long=$(tar -tvzf "$src/engine_tables.tgz" 2>/dev/null)
  grep -q '^tables/checks/' <<<"$names" ||
    { echo "import_engine_tables: $src/engine_tables.tgz: no tables/checks/ in it; nothing changed" >&2; exit 2; }
  if grep -q '^[lh]' <<<"$long"; then
    echo "import_engine_tables: $src/engine_tables.tgz: holds links; a kept tree takes plain files only; nothing changed" >&2; exit 2
  fi
  if grep -qE '(^|/)\.\.(/|$)' <<<"$names"; then
    echo "import_engine_tables: $src/engine_tables.tgz: a member's path climbs out (..); nothing changed" >&2; exit 2
  fi
done
[ -s "$1/gpus.csv" ] || { echo "import_engine_tables: $1: no gpus.csv there, or an empty one; nothing changed" >&2; exit 2; }
dest="$root/docs/examples/h200/engine_tables"
parent=$(dirname "$dest")
[ -d "$parent" ] || { echo "import_engine_tables: $parent: missing; nothing changed" >&2; exit 2; }
new=$(mktemp -d "$parent/.engine_tables.new.XXXXXX")
old="$parent/.engine_tables.old.$$"
trap 'rm -rf "$new" "$old"' EXIT
cp "$1/gpus.csv" "$new/gpus.csv"
mkdir -p "$new/export" "$new/checks"
call=0
for src in "$@"; do
  call=$((call + 1))
  tmp="$new/.unpack_$call"
  mkdir "$tmp"
  tar -xzf "$src/engine_tables.tgz" -C "$tmp"
  if [ -d "$tmp/tables/export" ]; then cp -r "$tmp/tables/export/." "$new/export/"; fi
  cp -r "$tmp/tables/checks/." "$new/checks/"
  cp "$src/tables.log" "$new/tables_$call.log"
  cp "$tmp/tables/dropins.csv" "$new/.dropins_$call.csv"
  rm -rf "$tmp"
done
# One row per file: a later call's row replaces an earlier one for the same file.
# The checkout's own environment, else $PYTHON (or python3), which must have pandas.
py="$root/.venv/bin/python"
[ -x "$py" ] || py=${PYTHON:-python3}
"$py" -c 'import pandas' 2>/dev/null || {
  echo "import_engine_tables: $py cannot import pandas (no $root/.venv): set PYTHON to the project's Python; nothing changed" >&2
  exit 2
}
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$new" <<'PY' || exit 2
import sys
from pathlib import Path

import pandas as pd

from tilesweep.fused_moe.engines.dropins import DROPIN_COLUMNS

dest = Path(sys.argv[1])
parts = sorted(dest.glob(".dropins_*.csv"), key=lambda p: int(p.stem.split("_")[1]))
need = {"status", "engine", "format", "experts", "n", "path"}
frames = []
for part in parts:
    try:
        frame = pd.read_csv(part)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one line
        sys.exit(f"import_engine_tables: a dropins.csv is not a table ({exc}); nothing changed")
    if not need <= set(frame.columns):
        missing = ", ".join(sorted(need - set(frame.columns)))
        sys.exit(f"import_engine_tables: a dropins.csv lacks {missing}; nothing changed")
    frames.append(frame)
rows = pd.concat(frames, ignore_index=True)
decided = ~rows["status"].astype(str).str.startswith("not re-checked")
rows = rows.assign(decided=decided).sort_values("decided", kind="stable")
rows = rows.drop_duplicates(["engine", "format", "experts", "n"], keep="last").sort_index()
rows.reindex(columns=DROPIN_COLUMNS).to_csv(dest / "dropins.csv", index=False)
for p in parts:
    p.unlink()
listed = set(rows["path"].dropna().astype(str))
for path in (dest / "export").rglob("*.json"):  # a file a later call decided not to export
    if path.relative_to(dest / "export").as_posix() not in listed:
        path.unlink()
print(rows[["engine", "format", "n", "status", "worst_x_baseline"]].to_string(index=False))
PY
# The swap: the kept tree aside, the new one in, then the old one gone.
if [ -e "$dest" ]; then mv "$dest" "$old"; fi
mv "$new" "$dest"
echo "import_engine_tables: $dest replaced from $*"
