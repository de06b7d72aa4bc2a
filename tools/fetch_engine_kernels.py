"""Fetch the engines' wheels named in config (backend.fused_moe.engine_versions, pinned) and
extract their fused-MoE Triton kernels, with hashes, into .engine_kernels/<engine>-<version>/
(ignored by git; carry it to the GPU machine). Needs pip and a package registry.

Usage: python tools/fetch_engine_kernels.py [--wheels DIR] [--out DIR] [OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tilesweep.config import compose
from tilesweep.engine_kernels import FOLDER, extract

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path(".engine_wheels"))  # not carried
    parser.add_argument("--out", type=Path, default=Path(FOLDER))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    versions = compose(args.overrides)["backend"]["fused_moe"]["engine_versions"]
    args.wheels.mkdir(parents=True, exist_ok=True)
    for engine, version in versions.items():
        wheel = next(args.wheels.glob(f"{engine}-{version}-*.whl"), None)
        if wheel is None:  # the wheel alone: its dependencies are not needed to read a file
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            subprocess.run([*cmd, f"{engine}=={version}", "-d", str(args.wheels)], check=True)
            wheel = next(args.wheels.glob(f"{engine}-{version}-*.whl"))
        print(f"{engine} {version}: {extract(engine, wheel, args.out)}")
