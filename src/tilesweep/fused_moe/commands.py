"""The fused-MoE CLI verbs `engine-check FILE` and `engine-tune` (the backend's Commands role)."""

from __future__ import annotations

import argparse
import sys

from tilesweep import package_data
from tilesweep.backends import Commands
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.fused_moe.engines import search
from tilesweep.fused_moe.engines.base import FORMATS, names
from tilesweep.fused_moe.engines.check import check_file, read_file, safe_file, summary
from tilesweep.io import write_table

# The package data this module reads: each verb's help and description.
DATA_FILES = ("fused_moe/data/cli_texts.yaml",)
TEXTS = package_data.data_texts("tilesweep", DATA_FILES[0], ("help", "description"))


class FusedMoeCommands(Commands):
    """engine-check and engine-tune."""

    def add_parsers(self, sub) -> None:
        """Add engine-check and engine-tune, each with its handler (set_defaults)."""
        check = _parser(sub, "engine-check")
        check.add_argument("file", help="E=..,N=..,device_name=..[,dtype=..].json")
        check.add_argument("--out", help="write the rows here (CSV)")
        check.add_argument(
            "--safe-out",
            help="write the file as it may be exported: a key's config only where it won on every "
            "routing, else the engine's current config",
        )
        check.add_argument("--repeats", type=int, default=20, help="graph replays per timing")
        check.add_argument(
            "--engine", default="vllm", help="whose kernel and default (vllm, sglang)"
        )
        check.add_argument(
            "--timing",
            choices=["decode", "warm"],
            default="decode",
            help="decode: cold L2 over rotated weight copies (default); warm: one weight set, "
            "as the engines' own tuners time",
        )
        check.add_argument("overrides", nargs="*", help="Hydra overrides (the model, bench.seed)")
        check.set_defaults(handler=engine_check_command)
        tune = _parser(sub, "engine-tune")
        tune.add_argument(
            "--out", required=True, help="folder: <engine>-<version>/ files and tables"
        )
        tune.add_argument("--engine", action="append", help="vllm, sglang (default: both)")
        tune.add_argument("--format", action="append", help="bf16, fp8, fp8_block (default: conf)")
        tune.add_argument("--shape", action="append", help="E,N (default: the model at TP1)")
        tune.add_argument("--keys", help="batch keys M, comma-separated (default: conf batch_keys)")
        tune.add_argument("--extra", action="append", default=[], help="another tuner's file")
        tune.add_argument("overrides", nargs="*", help="Hydra overrides (the model, bench.seed)")
        tune.set_defaults(handler=engine_tune_command)


def _parser(sub, verb: str) -> argparse.ArgumentParser:
    """Return a verb's parser with its help and description (data/cli_texts.yaml)."""
    help_text, description = TEXTS[verb]
    return sub.add_parser(verb, help=help_text, description=description)


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
    settings = compose_settings(args.overrides)
    fused = settings.backend.fused_moe
    engines = args.engine or list(fused.engine_versions)
    for engine in engines:
        if engine not in names() or engine not in fused.engine_versions:
            raise ConfigError(f"--engine {engine}: expected one of {', '.join(names())}")
    formats = args.format or list(fused.engine_tune.formats)
    for fmt in formats:
        if fmt not in FORMATS:
            raise ConfigError(f"--format {fmt}: expected bf16, fp8 or fp8_block")
    model = settings.model
    default = [(model.routed_experts, model.moe_intermediate)]
    shapes = [tuple(_ints(s, "--shape")) for s in args.shape or []] or default
    if any(len(s) != 2 for s in shapes):
        raise ConfigError("--shape: expected E,N (local experts, shard intermediate)")
    keys = _ints(args.keys, "--keys") if args.keys else None
    for path in args.extra:
        read_file(path)  # a bad file is refused before anything starts
    summary = search.run(settings, engines, formats, shapes, args.out, keys, args.extra)
    sys.stdout.write(summary.to_string(index=False) + "\n")
    return 0


def engine_check_command(args: argparse.Namespace) -> int:
    """Run `tilesweep engine-check`; return the exit status."""
    read_file(args.file)  # a bad file is refused before anything starts
    if args.repeats < 3:
        raise ConfigError(f"--repeats={args.repeats}: must be at least 3 (p10 and p90)")
    settings = compose_settings(args.overrides)
    table = check_file(args.file, settings, args.repeats, engine=args.engine, timing=args.timing)
    if args.safe_out:
        kept, replaced = safe_file(table, args.file, settings, args.safe_out, args.engine)
        said = f"{kept} keys kept (won on every routing), {replaced} take the engine's default"
        sys.stdout.write(f"{args.safe_out}: {said}\n")
    if args.out:
        write_table(args.out, table)
    sys.stdout.write(summary(table) + "\n")
    return 0
