"""Print the tuned config per problem and batch from results/tune/fused_moe/*.csv: time, speed-ups
over the engines' defaults and the torch baseline, copy and read-only fractions, the best config
with the project's variants; with --csv, also write those rows (every column) to a file.

Usage: python tools/tune_summary.py [RESULTS_DIR] [--csv OUT.csv [--force]]
  RESULTS_DIR holds tune/fused_moe/<dtype>.csv (a sweep's results), or tune_<dtype>.csv (an
  example).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tilesweep.errors import ConfigError, tool_main
from tilesweep.fused_moe.report_sections import tune_summary, tune_targets
from tilesweep.io import check_out_file, write_table


def _read(path: Path) -> pd.DataFrame:
    """Return one tune table, or raise ConfigError naming the file that is not a text CSV."""
    try:
        return pd.read_csv(path)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not text (bytes that are not UTF-8), so not a CSV") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        why = "empty" if isinstance(exc, pd.errors.EmptyDataError) else "not a readable CSV"
        raise ConfigError(f"{path}: {why}, so not a tune table") from None


def main() -> int:
    """Print (and with --csv write) the tuned summary; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default="results", type=Path)
    parser.add_argument("--csv", help="also write the summary rows here")
    parser.add_argument("--force", action="store_true", help="--csv may overwrite a kept file")
    args = parser.parse_args()
    out = check_out_file(args.csv, args.force, "--csv") if args.csv is not None else None
    swept = sorted((args.results / "tune" / "fused_moe").glob("*.csv"))
    paths = swept or sorted(args.results.glob("tune_*.csv"))
    if not paths:
        raise ConfigError(f"no tune tables under {args.results}")
    odd = [p for p in paths if not p.is_file()]
    if odd:  # a pipe would block the read; a folder holds no table
        raise ConfigError(f"{odd[0]}: not a plain file (a folder, a pipe or a device)")
    tables = [_read(p) for p in paths]
    need = {"tuned", "dtype", "experts", "n", "m"}
    for path, table in zip(paths, tables, strict=True):
        if not need <= set(table.columns):
            missing = ", ".join(sorted(need - set(table.columns)))
            raise ConfigError(f"{path}: not a tune table (no {missing} column)")
    summary = tune_summary(pd.concat(tables, ignore_index=True))
    if out is not None:
        write_table(out, summary)
    cols = ["dtype", "experts", "n", "routing", "m", "config", "time_ms", "x_vllm", "x_sglang"]
    cols += ["x_torch", "copy_fraction", "read_fraction", "best_config", "best_x_vllm"]
    cols += ["best_x_torch"]
    with pd.option_context("display.width", 250, "display.max_rows", 1000):
        print(summary[cols].round(3).to_string(index=False))
        print("\nAgainst the tuning targets (the lowest figure over each range):")
        print(tune_targets(summary).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("tune_summary", main))
