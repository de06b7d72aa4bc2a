"""Fetch the engines' wheels named in config (backend.fused_moe.engine_versions, pinned) and
extract their fused-MoE Triton kernels, with hashes, into .engine_kernels/<engine>-<version>/
(ignored by git; carry it to the GPU machine), with the engines' shipped config tables and
their get_config_file_name. Needs pip and a package registry. --names PATH also writes the names
the engines' own functions give every format (wheels.name_table; the test data
tests/data/engine_names.json is made so). --release NAME (of fused_moe/data/releases.yaml,
repeatable) extracts instead that older release's kernels and tables into <out>/NAME/
(wheels.extract_release; tools/release_gemm_probe.py times them).

Usage: python tools/fetch_engine_kernels.py [--wheels DIR] [--out DIR] [--names PATH]
           [--release NAME ...] [OVERRIDE ...]
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
from tilesweep.fused_moe.engines.wheels import (
    FOLDER,
    extract,
    extract_release,
    name_table,
    releases,
)
from tilesweep.io import check_out_file, check_out_folder


def main() -> int:
    """Fetch and extract the engines' kernels; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path(".engine_wheels"))  # not carried
    parser.add_argument("--out", type=Path, default=Path(FOLDER))
    parser.add_argument("--names", type=Path, help="write the engines' names of every format")
    parser.add_argument("--release", action="append", help="an older release's kernels instead")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.release:
        return _releases(args)
    versions = compose(args.overrides)["backend"]["fused_moe"]["engine_versions"]
    # Every place it writes, checked before a wheel is fetched (minutes): one line if unusable.
    check_out_folder(str(args.out))
    check_out_folder(str(args.wheels))
    if args.names:
        check_out_file(str(args.names), flag="--names")
    for engine, version in versions.items():
        wheel = _wheel(data(engine).distribution, version, args.wheels)  # engines/<engine>.yaml
        print(f"{engine} {version}: {extract(engine, wheel, args.out)}")
    if args.names:
        tables = [name_table(e, v, args.out) for e, v in versions.items()]
        args.names.parent.mkdir(parents=True, exist_ok=True)
        args.names.write_text(json.dumps(tables, indent=1) + "\n")
        print(f"names: {args.names}")
    return 0


def _wheel(dist: str, version: str, wheels: Path) -> Path:
    """Return the wheel of dist==version in wheels/, fetched there (alone) if missing."""
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"  # a wheel's name: dashes as _
    wheel = next(wheels.glob(pattern), None)
    if wheel is None:  # the wheel alone: its dependencies are not needed to read a file
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        subprocess.run([*cmd, f"{dist}=={version}", "-d", str(wheels)], check=True)
        wheel = next(wheels.glob(pattern))
    return wheel


def _releases(args) -> int:
    """Extract each --release's kernels (releases.yaml); return the exit status."""
    known = releases()
    unknown = [name for name in args.release if name not in known]
    if unknown:
        sys.exit(f"fetch_engine_kernels: no release {unknown[0]} (of {', '.join(known)})")
    check_out_folder(str(args.out))
    check_out_folder(str(args.wheels))
    for name in args.release:
        spec = known[name]
        wheel = _wheel(spec["distribution"], str(spec["version"]), args.wheels)
        print(f"{name}: {extract_release(name, wheel, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("fetch_engine_kernels", main))
