#!/usr/bin/env bash
# Bring tools/h200_engine_tables.sh's output (the folder its files came back to: gpus.csv,
# tables.log, dropins.csv, engine_tables.tgz) into docs/examples/h200/engine_tables/ (no GPU):
# export/ (the drop-in files, laid out as the engines load them), checks/ (every draw's rows),
# dropins.csv, the log and the device. A later call's folder may be given too (e.g. the files a
# second call with --format fp8 decided): its drop-ins are added and dropins.csv's rows of the
# files it decided replace the first call's "not re-checked" rows.
# Usage: tools/import_engine_tables.sh FILES_AT [MORE_FILES_AT ...]
set -euo pipefail
dest=docs/examples/h200/engine_tables
first=${1:?usage: tools/import_engine_tables.sh FILES_AT [MORE_FILES_AT ...]}
rm -rf "$dest"
mkdir -p "$dest"
cp "$first/gpus.csv" "$dest/gpus.csv"
call=0
for src in "$@"; do
  call=$((call + 1))
  tmp=$(mktemp -d)
  tar -xzf "$src/engine_tables.tgz" -C "$tmp"
  mkdir -p "$dest/export" "$dest/checks"
  cp -r "$tmp/tables/export/." "$dest/export/" 2>/dev/null || true
  cp -r "$tmp/tables/checks/." "$dest/checks/"
  cp "$src/tables.log" "$dest/tables_$call.log"
  cp "$tmp/tables/dropins.csv" "$tmp/dropins_$call.csv"
  mv "$tmp/dropins_$call.csv" "$dest/.dropins_$call.csv"
  rm -rf "$tmp"
done
# One row per file: a later call's row replaces an earlier one for the same file.
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" python3 - "$dest" <<'PY'
import sys
from pathlib import Path

import pandas as pd

from tilesweep.fused_moe.engine_tables import DROPIN_COLUMNS

dest = Path(sys.argv[1])
parts = sorted(dest.glob(".dropins_*.csv"), key=lambda p: int(p.stem.split("_")[1]))
rows = pd.concat([pd.read_csv(p) for p in parts], ignore_index=True)
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
