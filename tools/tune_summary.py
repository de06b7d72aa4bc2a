"""Print the tuned config per batch from results/tune/*.csv (or a journal when the tune job was
cut short): time, speed-ups over the engines' defaults and the torch baseline, copy fraction.

Usage: python tools/tune_summary.py [RESULTS_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from tilesweep.report.data import tune_summary

if __name__ == "__main__":
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    frames = [pd.read_csv(p) for p in sorted((results / "tune").glob("*.csv"))]
    if not frames:
        sys.exit(f"no tune tables under {results}/tune")
    table = pd.concat(frames, ignore_index=True)
    cols = ["dtype", "n", "routing", "m", "config", "time_ms", "x_vllm", "x_sglang", "x_torch"]
    cols += ["copy_fraction", "read_fraction", "best_config", "best_x_vllm", "best_x_torch"]
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(tune_summary(table)[cols].round(3).to_string(index=False))
