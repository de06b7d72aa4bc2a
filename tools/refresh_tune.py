"""Re-evaluate fused-MoE tuning from a run's journals (no GPU): the tune tables and the engines'
config files, from every time as measured, with the current evaluation and selection code.

Usage: python tools/refresh_tune.py WORK_DIR CEILINGS_JSON OUT_DIR DRIVER TRITON
  WORK_DIR holds <dtype>/spec.json and <dtype>/journal.jsonl (results/tune/.work of a run), or
  journal.jsonl.gz as kept in docs/examples; writes OUT_DIR/tune_<dtype>.csv and
  OUT_DIR/tuned/<dtype>/.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

from tilesweep.io import read_json
from tilesweep.measure.tune_worker import read_journal
from tilesweep.stages.tune import write_outputs

if __name__ == "__main__":
    work, ceilings, out, driver, triton = sys.argv[1:6]
    versions = {"driver": driver, "triton": triton}
    for spec_path in sorted(Path(work).glob("*/spec.json")):
        spec = json.loads(spec_path.read_text())
        journal = spec_path.parent / "journal.jsonl"
        if journal.exists():
            records = read_journal(journal)
        else:  # a kept example's journal is compressed
            with tempfile.TemporaryDirectory() as tmp:
                plain = Path(tmp) / journal.name
                plain.write_bytes(gzip.decompress(journal.with_suffix(".jsonl.gz").read_bytes()))
                records = read_journal(plain)
        dtype = spec["dtype"]
        table, configs = Path(out) / f"tune_{dtype}.csv", Path(out) / "tuned" / dtype
        rows, files = write_outputs(spec, records, read_json(ceilings), versions, table, configs)
        print(f"{dtype}: {rows} rows, {files} config files")
