"""Print the tuned config per problem and batch from results/tune/fused_moe/*.csv: time, speed-ups
over the engines' defaults and the torch baseline, copy and read-only fractions, the best config
with the project's variants; with --csv, also write those rows (every column) to a file.

Usage: python tools/tune_summary.py [RESULTS_DIR] [--csv OUT.csv]
  RESULTS_DIR holds tune/fused_moe/<dtype>.csv (a sweep's results), or tune_<dtype>.csv (an
  example).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tilesweep.fused_moe.tune_analysis import tune_summary, tune_targets

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default="results", type=Path)
    parser.add_argument("--csv", type=Path, help="also write the summary rows here")
    args = parser.parse_args()
    swept = sorted((args.results / "tune" / "fused_moe").glob("*.csv"))
    paths = swept or sorted(args.results.glob("tune_*.csv"))
    if not paths:
        raise SystemExit(f"no tune tables under {args.results}")
    summary = tune_summary(pd.concat([pd.read_csv(p) for p in paths], ignore_index=True))
    if args.csv:
        summary.to_csv(args.csv, index=False)
    cols = ["dtype", "experts", "n", "routing", "m", "config", "time_ms", "x_vllm", "x_sglang"]
    cols += ["x_torch", "copy_fraction", "read_fraction", "best_config", "best_x_vllm"]
    cols += ["best_x_torch"]
    with pd.option_context("display.width", 250, "display.max_rows", 1000):
        print(summary[cols].round(3).to_string(index=False))
        print("\nAgainst the tuning targets (the lowest figure over each range):")
        print(tune_targets(summary).round(3).to_string(index=False))
