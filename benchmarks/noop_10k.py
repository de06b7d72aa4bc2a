"""Standing target: a no-op `snakemake --cores all` on a 10,000-cell grid takes 5 s or less.

Runs the sweep once for real on a grid of 20 tiles x 25 batches x 4 targets x 5 layouts (CUTLASS
off, one CPU expert, one repeat: the grid's size is the point, not its numbers), then times
repeated no-op runs. Prints the median and whether it meets the target. Usage:

    python benchmarks/noop_10k.py [--work DIR] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0
OVERRIDES = [
    "backend=triton",
    "grid.targets=[h200,rtx_pro_6000,b200,l40s]",
    "grid.tiles=["
    + ",".join(f"{{m:{m},n:{n},k:64}}" for m in (16, 32, 64, 128, 256) for n in (32, 64, 128, 256))
    + "]",
    "grid.stages=[2]",
    "grid.tokens_per_expert=[" + ",".join(str(t) for t in range(1, 26)) + "]",
    "grid.layouts=[{tp:1,pp:1,ep:1},{tp:2,pp:1,ep:1},{tp:1,pp:1,ep:2},{tp:1,pp:2,ep:1},"
    "{tp:2,pp:2,ep:1}]",
    "bench.cpu_experts=1",
    "bench.cpu_repeats=1",
    "bench.routing=[uniform]",
    "bench.collective_extra_sizes=[]",
    "bench.collective_repeats=3",
]


def snakemake(work: Path, *args: str) -> float:
    """Run snakemake on the 10k grid in work; return its wall time in seconds."""
    exe = Path(sys.executable).with_name("snakemake")
    config = "overrides=[" + ",".join(f'"{o}"' for o in OVERRIDES) + "]"
    cmd = [
        str(exe),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "all",
        "--config",
        config,
        *args,
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def grid_cells() -> int:
    """Return the number of cells OVERRIDES compose to (tests/test_grid.py checks it)."""
    from tilesweep import grid
    from tilesweep.config import compose_settings

    return grid.cell_count(compose_settings(OVERRIDES))


def main() -> int:
    """Run the benchmark; return 0 when the target is met, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="sweep folder (kept)")
    parser.add_argument("--runs", type=int, default=3, help="timed no-op runs")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="tilesweep-noop-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    cells = grid_cells()
    print(f"grid: {cells:,} cells (tiles x batches x targets x layouts), work folder {work}")
    first = snakemake(work)
    print(f"full sweep: {first:.1f} s")
    times = [snakemake(work) for _ in range(args.runs)]
    median = statistics.median(times)
    verdict = "meets" if median <= TARGET_S else "misses"
    print(
        f"no-op runs: {', '.join(f'{t:.2f}' for t in times)} s; median {median:.2f} s "
        f"{verdict} the {TARGET_S:.0f} s target"
    )
    return 0 if median <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
