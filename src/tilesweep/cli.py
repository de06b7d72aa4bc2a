"""The `tilesweep` command: `compare A B` (what changed between two sweeps), `failed` (which
per-cell results hold failed rows) and `verdict OVERRIDES --out DIR` (the verdict for any
deployment from a fit file, no sweep), and each registered backend's own subcommands
(backends.roles.Commands)."""

import argparse
import math
import os
import sys

from tilesweep import (
    answer_card,
    answer_picks,
    backends,
    compare,
    deployment_refusals,
    deployment_verdict,
    engine_figures,
    package_data,
)
from tilesweep.backends.roles import Command
from tilesweep.columns import SETTLED, Status
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError, unexpected
from tilesweep.failures import STAGES, failed_outputs
from tilesweep.io import check_out_folder, results_at, write_table

DATA_FILES = ("data/commands.yaml",)
COMMANDS = package_data.data_typed("tilesweep", DATA_FILES[0], None, dict[str, Command])


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser with its subcommands (data/commands.yaml)."""
    top = argparse.ArgumentParser(
        prog="tilesweep",
        description="Tools around a tilesweep run (the sweep itself runs through snakemake).",
    )
    sub = top.add_subparsers(dest="command", required=True)
    handlers = {"compare": compare_command, "failed": failed_command, "verdict": verdict_command}
    for name, command in COMMANDS.items():
        if name == "verdict":  # each backend's own verbs come before (a product adds its CLI)
            backends.command_parsers(sub)
        command.add_to(sub, name, handlers[name])
    return top


def verdict_command(args: argparse.Namespace) -> int:
    """Run `tilesweep verdict`; return the exit status."""
    import pandas as pd

    if args.top < 0:
        raise ConfigError(f"--top={args.top}: must be at least 0")
    files = ("verdict.csv",) + (() if args.no_engines else ("engines.csv",))
    out = None if args.out is None else check_out_folder(args.out, files, args.force)
    overrides = list(args.overrides)
    if not any(o.lstrip("+~").split("=")[0] == "grid.tiles" for o in overrides):
        # The sweep's tiles are not the verdict's: a model whose reductions a swept tile's k
        # does not divide (gpt_oss_120b's hidden=2880 and k=128) still composes.
        overrides.insert(0, engine_figures.ANY_TILE)
    settings = compose_settings(overrides)
    why = (
        deployment_refusals.refusal(settings)
        or deployment_refusals.unused_fit_batches(settings)
        or deployment_refusals.unused_attention_table(settings)
    )
    if why:
        raise ConfigError(why)
    empty = pd.DataFrame()
    table = deployment_verdict.deployment_table(settings, empty, empty, empty, {})
    engines = (
        None if args.no_engines else engine_figures.engine_table(settings, empty, empty, empty, {})
    )
    card = answer_card.build(settings, table, engines=engines)
    lines = card.lines()
    if args.top:
        lines += answer_picks.top_lines(table, args.top, card.target)
    if args.pareto:
        lines += answer_picks.pareto_lines(table)
    if out is not None:
        for name, frame in zip(files, (table, engines), strict=False):  # no engines: one file
            write_table(out / name, frame)
        wrote = " and ".join(str(out / name) for name in files)
        lines.append(f"Wrote {wrote}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def failed_command(args: argparse.Namespace) -> int:
    """Run `tilesweep failed`; return the exit status."""
    known = sorted(str(s) for s in Status if s not in SETTLED)
    for status in args.status or []:
        if status not in known:
            what = "a settled status, not a failure" if status in SETTLED else "not a status"
            raise ConfigError(f"--status={status!r}: {what}; one of {', '.join(known)}")
    folder = results_at(args.results, STAGES, "per-cell outputs", f" ({', '.join(STAGES)})")
    for path in failed_outputs(folder, set(args.status) if args.status else None):
        sys.stdout.write(f"{path}\n")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    """Run `tilesweep compare`; return the exit status."""
    if not math.isfinite(args.threshold) or args.threshold < 0:
        raise ConfigError(f"--threshold={args.threshold}: must be a finite number, at least 0")
    if args.limit < 0:
        raise ConfigError(f"--limit={args.limit}: must be at least 0")
    if args.out is not None:
        check_out_folder(args.out, compare.OUT_FILES)  # a bad folder: one line, first
    run_a, run_b = compare.load_run(args.a), compare.load_run(args.b)
    for side, run in (("A", run_a), ("B", run_b)):
        if run.unrecorded:
            sys.stdout.write(
                f"Note: {side} ({run.path}): its tables carry no .sum records (a run from before "
                "tilesweep kept them, or a folder made by hand): compared as they are, unchecked.\n"
            )
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
    top = parser()
    args, extra = top.parse_known_args(argv)
    # Hydra overrides after an option (`verdict --no-engines hardware=h200`, `~key` deletes):
    # argparse leaves them unparsed; they are the verdict's overrides too. Anything else is an
    # error.
    overrides = all("=" in e or e.startswith("~") for e in extra)
    if extra and getattr(args, "command", None) == "verdict" and overrides:
        args.overrides = [*args.overrides, *extra]
    elif extra:
        top.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.handler(args)  # each subcommand's, a backend's too (set_defaults)
    except ConfigError as err:
        sys.stderr.write(f"tilesweep: {err}\n")
        return 2
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # the file system refused (a read-only or immutable file, no space)
        where = err.filename2 or err.filename
        sys.stderr.write(f"tilesweep: {where}: {err.strerror or err} (the file system refused)\n")
        return 1
    except Exception as err:  # noqa: BLE001 - no traceback reaches a user: one line, trace kept
        sys.stderr.write(f"tilesweep: {unexpected(err)}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
