"""Fetch the engines' wheels named in config (backend.fused_moe.engine_versions, pinned) and
extract their fused-MoE Triton kernels, with hashes, into .engine_kernels/<engine>-<version>/
(ignored by git; carry it to the GPU machine), with the engines' shipped config tables and
their get_config_file_name. Needs pip and a package registry. --names PATH also writes the names
the engines' own functions give every format (wheels.name_table; the test data
tests/data/engine_names.json is made so).

Usage: python tools/fetch_engine_kernels.py [--wheels DIR] [--out DIR] [--names PATH] [OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tilesweep.config import compose
from tilesweep.errors import tool_main
from tilesweep.fused_moe.engines.base import data
from tilesweep.fused_moe.engines.wheels import FOLDER, extract, name_table
from tilesweep.io import check_out_file, check_out_folder


def main() -> int:
    """Fetch and extract the engines' kernels; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path(".engine_wheels"))  # not carried
    parser.add_argument("--out", type=Path, default=Path(FOLDER))
    parser.add_argument("--names", type=Path, help="write the engines' names of every format")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    versions = compose(args.overrides)["backend"]["fused_moe"]["engine_versions"]
    # Every place it writes, checked before a wheel is fetched (minutes): one line if unusable.
    check_out_folder(str(args.out))
    check_out_folder(str(args.wheels))
    if args.names:
        check_out_file(str(args.names), flag="--names")
    for engine, version in versions.items():
        dist = data(engine).distribution  # engines/<engine>.yaml
        pattern = f"{dist.replace('-', '_')}-{version}-*.whl"  # a wheel's name: dashes as _
        wheel = next(args.wheels.glob(pattern), None)
        if wheel is None:  # the wheel alone: its dependencies are not needed to read a file
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            subprocess.run([*cmd, f"{dist}=={version}", "-d", str(args.wheels)], check=True)
            wheel = next(args.wheels.glob(pattern))
        print(f"{engine} {version}: {extract(engine, wheel, args.out)}")
    if args.names:
        tables = [name_table(e, v, args.out) for e, v in versions.items()]
        args.names.parent.mkdir(parents=True, exist_ok=True)
        args.names.write_text(json.dumps(tables, indent=1) + "\n")
        print(f"names: {args.names}")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("fetch_engine_kernels", main))
