"""Standing target: CUTLASS shared-memory accounting costs 15 s or less per cell, amortised, on
2 cores. Accounts the brief's 24 cells (4 tiles x 2 epilogues x sm_90/sm_100/sm_120) with an empty
cache and prints the wall time per cell. Usage: python benchmarks/cutlass_accounting.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 15.0
TILES = [(128, 128, 128), (128, 128, 256), (128, 256, 128), (256, 128, 128)]
DTYPE = {"sm_90": "fp8", "sm_100": "nvfp4", "sm_120": "nvfp4"}


def main() -> int:
    """Time the accounting; return 0 when it meets the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from tilesweep.cutlass.accounting import account

    cells = [
        {
            "arch": arch,
            "dtype": DTYPE[arch],
            "tile_m": m,
            "tile_n": n,
            "tile_k": k,
            "stages": "auto",
            "epilogue": epi,
            "cluster_m": 1,
            "cluster_n": 1,
        }
        for arch, (m, n, k), epi in itertools.product(DTYPE, TILES, ("default", "finalize"))
    ]
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        results = account(cells, Path(work), jobs=args.jobs)
        seconds = time.perf_counter() - start
    ok = sum(r["status"] == "ok" for r in results)
    per_cell = seconds / len(cells)
    verdict = "meets" if per_cell <= TARGET_S else "misses"
    print(
        f"{len(cells)} cells ({ok} ok) in {seconds:.1f} s with {args.jobs} jobs: "
        f"{per_cell:.1f} s per cell, {verdict} the {TARGET_S:.0f} s target"
    )
    return 0 if per_cell <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
