"""The fused-MoE CLI verbs `engine-check FILE` and `engine-tune` (the backend's Commands role)."""

import argparse
import sys

from tilesweep import package_data
from tilesweep.backends import Commands
from tilesweep.backends.roles import Command
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.fused_moe.engines import search
from tilesweep.fused_moe.engines.base import FORMATS, names
from tilesweep.fused_moe.engines.check import check_file, read_file, safe_file, summary
from tilesweep.fused_moe.engines.timer import Method
from tilesweep.io import write_table

# The package data this module reads: each verb's help, description and arguments.
DATA_FILES = ("fused_moe/data/cli_texts.yaml",)
COMMANDS = package_data.data_typed("tilesweep", DATA_FILES[0], None, dict[str, Command])


class FusedMoeCommands(Commands):
    """engine-check and engine-tune."""

    def add_parsers(self, sub) -> None:
        """Add engine-check and engine-tune, each with its handler (set_defaults)."""
        handlers = {"engine-check": engine_check_command, "engine-tune": engine_tune_command}
        for name, command in COMMANDS.items():
            command.add_to(sub, name, handlers[name])


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
    how = Method(timing=args.timing)
    table = check_file(args.file, settings, args.repeats, args.engine, how)
    if args.safe_out:
        kept, replaced = safe_file(table, args.file, settings, args.safe_out, args.engine)
        said = f"{kept} keys kept (won on every routing), {replaced} take the engine's default"
        sys.stdout.write(f"{args.safe_out}: {said}\n")
    if args.out:
        write_table(args.out, table)
    sys.stdout.write(summary(table) + "\n")
    return 0
