"""Decide drop-in engine config files decode-true against what each engine runs today (its
shipped table, else its default rule), from the kept example's tuned picks, on the GPU at hand
(fused_moe/engines/dropins.py): two picking draws, one held-out draw, files named and laid out as
the engines load them, and dropins.csv.

Usage: python tools/engine_tables.py --out DIR [--force] [--budget-s S] [--repeats R]
       [--engine E ...] [--format F ...] [--shape E,N ...] [--from FOLDER ...] [OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError, tool_main
from tilesweep.fused_moe.engines import dropins
from tilesweep.io import check_out_folder

FORMATS = ("fp8_block", "bf16", "fp8")  # the order files are decided in: the one that lost first
KEPT = ("docs/examples/h200/engine_tune", "docs/examples/h200/engine_tune_fp8")


def _shape(text: str) -> tuple[int, int]:
    """Return an --shape E,N as two positive integers, or raise ConfigError in one line."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"--shape={text!r}: give experts and N as two positive integers, E,N")
    return int(parts[0]), int(parts[1])


def main() -> int:
    """Decide the drop-in files; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--force", action="store_true", help="--out may be a kept folder")
    parser.add_argument("--budget-s", type=float, default=330.0, help="stop starting files after")
    parser.add_argument("--repeats", type=int, default=10, help="graph replays per timing")
    parser.add_argument("--check-experts", type=int, default=16, help="experts checked per batch")
    parser.add_argument("--engine", action="append", help="vllm, sglang (default: both)")
    parser.add_argument("--format", action="append", help="bf16, fp8, fp8_block (default: all)")
    parser.add_argument("--shape", action="append", help="E,N (default: every candidate's)")
    parser.add_argument("--from", dest="folders", action="append", help="kept tune folders")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    for flag, value in (("--budget-s", args.budget_s), ("--repeats", args.repeats),
                        ("--check-experts", args.check_experts)):  # fmt: skip
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"{flag}={value}: must be a finite number above 0")
    shapes = {_shape(s) for s in args.shape or []}
    settings = compose_settings(args.overrides)
    versions = settings.backend.fused_moe.engine_versions
    engines = args.engine or list(versions)
    formats = args.format or list(FORMATS)
    for engine in engines:
        if engine not in versions:
            raise ConfigError(f"--engine={engine!r}: not one of {', '.join(versions)}")
    for fmt in formats:
        if fmt not in FORMATS:
            raise ConfigError(f"--format={fmt!r}: not one of {', '.join(FORMATS)}")
    for folder in args.folders or []:
        if not Path(folder).is_dir():
            raise ConfigError(f"--from={folder}: not a folder")
    check_out_folder(args.out, ("dropins.csv",), args.force)
    work = []
    for fmt in formats:
        found = {e: dropins.candidates(args.folders or KEPT, e, versions[e]) for e in engines}
        keys = sorted({k for f in found.values() for k in f if k[0] == fmt}, key=lambda k: k[2])
        for _, experts, n in keys:  # TP8 (small N) first: the keys the issue found lost
            if shapes and (experts, n) not in shapes:
                continue
            work.extend((e, found[e][fmt, experts, n]) for e in engines if (fmt, experts, n)
                        in found[e])  # fmt: skip
    if not work:
        raise ConfigError("no tuned file matches the --engine, --format, --shape and --from given")
    print("candidates:", *(f"{e} {p}" for e, p in work), sep="\n  ", flush=True)
    frame = dropins.run(settings, work, args.out, args.repeats, args.budget_s,
                              args.check_experts, log=lambda s: print(s, flush=True))  # fmt: skip
    cols = ["engine", "format", "n", "status", "keys_kept", "worst_x_baseline",
            "geomean_x_baseline_m_ge_1024"]  # fmt: skip
    sys.stdout.write(frame.reindex(columns=cols).to_string(index=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("engine_tables", main))
