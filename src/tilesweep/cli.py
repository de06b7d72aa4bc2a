"""The `tilesweep` command: `compare A B` (what changed between two sweeps), `failed` (which
per-cell results hold failed rows), `engine-check FILE` (an engine config file against the
engine's default, in the engine's own kernel, on the GPU at hand) and `engine-tune` (config
files searched and picked in the engines' own kernels, never slower than their defaults) and
`verdict OVERRIDES --out DIR` (the verdict for any deployment from a fit file, no sweep)."""

from __future__ import annotations

import argparse
import math
import os
import sys

from tilesweep.errors import ConfigError


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser with its subcommands."""
    top = argparse.ArgumentParser(
        prog="tilesweep",
        description="Tools around a tilesweep run (the sweep itself runs through snakemake).",
    )
    sub = top.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser(
        "compare",
        help="print and plot what changed beyond the noise between two results folders",
        description=(
            "Compare two sweeps' results folders (e.g. before and after a driver upgrade, or two "
            "machines). Timed values count as changed when their medians differ by more than "
            "both runs' p10..p90 spread; values without a spread (one repeat, or modelled) when "
            "they move by more than --threshold; launch status, fits and shared memory, and "
            "verdict labels, on any change."
        ),
    )
    cmp.add_argument("a", help="results folder of run A (or a work folder holding results/)")
    cmp.add_argument("b", help="results folder of run B")
    cmp.add_argument("--out", help="folder for changes.csv, summary.txt and changes.png")
    cmp.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="relative change that counts for values without a spread (default 0.10 = 10%%)",
    )
    cmp.add_argument("--limit", type=int, default=40, help="changes printed per table (default 40)")
    cmp.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit with status 1 when anything changed beyond the noise",
    )
    failed = sub.add_parser(
        "failed",
        help="list per-cell result files holding failed rows (to rerun just those)",
        description=(
            "Print the per-cell result files whose rows failed (compile, launch, runtime, crash, "
            "timeout, correctness), one per line, for `snakemake --forcerun $(tilesweep failed)`."
        ),
    )
    failed.add_argument("results", nargs="?", default="results", help="results folder")
    failed.add_argument("--status", action="append", help="only this status (repeatable)")
    check = sub.add_parser(
        "engine-check",
        help="time an engine config file against the engine's current table, in its kernel",
        description=(
            "On the GPU at hand, time every batch key of a vLLM / SGLang fused-MoE config file "
            "(any tuner's) against what the engine runs today (its shipped table, else its "
            "default rule; the default reported beside it), in the engine's own Triton kernel "
            "(tools/fetch_engine_kernels.py), decode-true (cold L2), under uniform and Zipf "
            "routing; a key is won, lost or a tie within the noise."
        ),
    )
    check.add_argument("file", help="E=..,N=..,device_name=..[,dtype=..].json")
    check.add_argument("--out", help="write the rows here (CSV)")
    check.add_argument(
        "--safe-out",
        help="write the file as it may be exported: a key's config only where it won on every "
        "routing, else the engine's current config",
    )
    check.add_argument("--repeats", type=int, default=20, help="graph replays per timing")
    check.add_argument("--engine", default="vllm", help="whose kernel and default (vllm, sglang)")
    check.add_argument(
        "--timing",
        choices=["decode", "warm"],
        default="decode",
        help="decode: cold L2 over rotated weight copies (default); warm: one weight set, as the "
        "engines' own tuners time",
    )
    check.add_argument("overrides", nargs="*", help="Hydra overrides (the model, bench.seed)")
    tune = sub.add_parser(
        "engine-tune",
        help="search and pick engine config files in the engines' own kernels",
        description=(
            "On the GPU at hand, for each engine, format and (E, N): screen the engine's default "
            "and its neighbours in its own kernel at every batch key, time the finalists on "
            "uniform and Zipf routing, export a config only where it beats the default beyond "
            "the p10-p90 noise (else the default's), then check the exported file on fresh data "
            "(backend.fused_moe.engine_tune)."
        ),
    )
    tune.add_argument("--out", required=True, help="folder: <engine>-<version>/ files and tables")
    tune.add_argument("--engine", action="append", help="vllm, sglang (default: both)")
    tune.add_argument("--format", action="append", help="bf16, fp8, fp8_block (default: conf)")
    tune.add_argument("--shape", action="append", help="E,N (default: the model at TP1)")
    tune.add_argument("--keys", help="batch keys M, comma-separated (default: conf batch_keys)")
    tune.add_argument("--extra", action="append", default=[], help="another tuner's file")
    tune.add_argument("overrides", nargs="*", help="Hydra overrides (the model, bench.seed)")
    verdict = sub.add_parser(
        "verdict",
        help="the verdict for any deployment from a fit file, without a sweep",
        description=(
            "Compose the verdict (verdict.csv: time per token, tokens/s, split, bound, floor per "
            "layout x batch) and the engines' figures beside it (engines.csv) for the hardware, "
            "model, deployment, engine, layouts and batches the Hydra overrides name, from a fit "
            "file (deployment.fit_file; default: the shipped H200 fit). No sweep runs: the "
            "collectives come from the hardware file. Same columns as the verdict rule's."
        ),
    )
    verdict.add_argument("--out", required=True, help="folder for verdict.csv and engines.csv")
    verdict.add_argument(
        "--no-engines", action="store_true", help="skip engines.csv (the cited engine figures)"
    )
    verdict.add_argument("overrides", nargs="*", help="Hydra overrides (hardware=h200 ...)")
    return top


def verdict_command(args: argparse.Namespace) -> int:
    """Run `tilesweep verdict`; return the exit status."""
    from pathlib import Path

    import pandas as pd

    from tilesweep import deployment_verdict
    from tilesweep.config import compose
    from tilesweep.io import write_table

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out={args.out!r}: exists and is not a folder")
    settings = compose(args.overrides)
    empty = pd.DataFrame()
    table = deployment_verdict.deployment_table(settings, empty, empty, empty, {})
    engines = (
        None
        if args.no_engines
        else deployment_verdict.engine_table(settings, empty, empty, empty, {})
    )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--out={args.out!r}: cannot create the folder ({exc.strerror})"
        ) from None
    write_table(out / "verdict.csv", table)
    if engines is not None:
        write_table(out / "engines.csv", engines)
    show = table[table["fits_memory"] == "yes"]
    cols = ["layout", "batch", "tpot_ms", "tokens_per_s_per_gpu", "x_floor", "bound"]
    sys.stdout.write(
        (show[cols].to_string(index=False) if not show.empty else "no layout fits in memory")
        + f"\nWrote {out / 'verdict.csv'}"
        + (f" and {out / 'engines.csv'}" if engines is not None else "")
        + "\n"
    )
    return 0


def _ints(text: str, what: str) -> list[int]:
    """Return comma-separated positive integers, or raise ConfigError naming the argument."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{what}={text!r}: expected comma-separated integers") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{what}={text!r}: expected positive integers")
    return values


def engine_tune_command(args: argparse.Namespace) -> int:
    """Run `tilesweep engine-tune`; return the exit status."""
    from tilesweep.config import compose
    from tilesweep.fused_moe import engine_tune
    from tilesweep.fused_moe.engine_timing import LAUNCHERS

    settings = compose(args.overrides)
    fused = settings["backend"]["fused_moe"]
    engines = args.engine or list(fused["engine_versions"])
    for engine in engines:
        if engine not in LAUNCHERS or engine not in fused["engine_versions"]:
            raise ConfigError(f"--engine {engine}: expected one of {', '.join(LAUNCHERS)}")
    formats = args.format or list(fused["engine_tune"]["formats"])
    for fmt in formats:
        if fmt not in ("bf16", "fp8", "fp8_block"):
            raise ConfigError(f"--format {fmt}: expected bf16, fp8 or fp8_block")
    model = settings["model"]
    shapes = [tuple(_ints(s, "--shape")) for s in args.shape or []] or [
        (model["routed_experts"], model["moe_intermediate"])
    ]
    if any(len(s) != 2 for s in shapes):
        raise ConfigError("--shape: expected E,N (local experts, shard intermediate)")
    keys = _ints(args.keys, "--keys") if args.keys else None
    from tilesweep.fused_moe.engine_check import read_file

    for path in args.extra:
        read_file(path)  # a bad file is refused before anything starts
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("engine-tune times the engines' kernels on a GPU; none is here")
    summary = engine_tune.run(settings, engines, formats, shapes, args.out, keys, args.extra)
    sys.stdout.write(summary.to_string(index=False) + "\n")
    return 0


def engine_check_command(args: argparse.Namespace) -> int:
    """Run `tilesweep engine-check`; return the exit status."""
    from tilesweep.config import compose
    from tilesweep.fused_moe.engine_check import check_file, read_file, safe_file, summary

    read_file(args.file)  # a bad file is refused before anything starts
    if args.repeats < 3:
        raise ConfigError(f"--repeats={args.repeats}: must be at least 3 (p10 and p90)")
    settings = compose(args.overrides)
    table = check_file(args.file, settings, args.repeats, engine=args.engine, timing=args.timing)
    if args.safe_out:
        kept, replaced = safe_file(table, args.file, settings, args.safe_out, args.engine)
        sys.stdout.write(
            f"{args.safe_out}: {kept} keys kept (won on every routing), {replaced} take the "
            "engine's default\n"
        )
    if args.out:
        from tilesweep.io import write_table

        write_table(args.out, table)
    sys.stdout.write(summary(table) + "\n")
    return 0


def failed_command(args: argparse.Namespace) -> int:
    """Run `tilesweep failed`; return the exit status."""
    from pathlib import Path

    from tilesweep.columns import Status
    from tilesweep.failures import failed_outputs, results_folder

    known = sorted(str(s) for s in Status)
    for status in args.status or []:
        if status not in known:
            raise ConfigError(f"--status={status!r}: not a status; one of {', '.join(known)}")
    folder = results_folder(Path(args.results))
    for path in failed_outputs(folder, set(args.status) if args.status else None):
        sys.stdout.write(f"{path}\n")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    """Run `tilesweep compare`; return the exit status."""
    from tilesweep import compare

    if not math.isfinite(args.threshold) or args.threshold < 0:
        raise ConfigError(f"--threshold={args.threshold}: must be a finite number, at least 0")
    if args.limit < 0:
        raise ConfigError(f"--limit={args.limit}: must be at least 0")
    if args.out:
        compare.check_out(args.out)  # before the comparison: a bad folder is one line
    run_a, run_b = compare.load_run(args.a), compare.load_run(args.b)
    changes = compare.compare_runs(run_a, run_b, args.threshold)
    text = compare.format_changes(changes, run_a, run_b, args.threshold, args.limit)
    sys.stdout.write(text)
    if args.out:
        paths = compare.write_outputs(changes, text, args.out)
        sys.stdout.write("Wrote " + ", ".join(str(p) for p in paths) + "\n")
    beyond = bool(changes["beyond"].astype(bool).any()) if not changes.empty else False
    return 1 if args.fail_on_change and beyond else 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (2 for a bad argument or folder)."""
    args = parser().parse_args(argv)
    try:
        if args.command == "compare":
            return compare_command(args)
        if args.command == "failed":
            return failed_command(args)
        if args.command == "engine-check":
            return engine_check_command(args)
        if args.command == "engine-tune":
            return engine_tune_command(args)
        if args.command == "verdict":
            return verdict_command(args)
    except ConfigError as err:
        sys.stderr.write(f"tilesweep: {err}\n")
        return 2
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
