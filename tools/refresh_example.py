"""Re-render a kept example (docs/examples/h200) from its own tables with the current code.

The GPU run's per-cell files are not kept, only its tables; when the report or the launch table
gains columns computed from those tables, this brings the example up to date without a GPU:
the launch table gets the measured-launch columns, the verdict table its calibration columns
(computed from its own measured and model rows), report.md and report.html are rendered anew.
Usage: python tools/refresh_example.py docs/examples/h200 experiment=h200_decode
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from tilesweep import verdict
from tilesweep.config import compose
from tilesweep.io import write_table, write_text
from tilesweep.provenance import git_commit, package_version
from tilesweep.report import data as report_data
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.stages import aggregate


def main() -> int:
    """Refresh the example folder; return the exit status."""
    folder, overrides = Path(sys.argv[1]), sys.argv[2:]
    settings = compose(overrides)
    tables = {
        n: pd.read_csv(folder / f"{n}.csv", low_memory=False)
        for n in ("launch", "decode", "collective", "verdict")
    }
    launch = tables["launch"].drop(
        columns=["measured_launch", "measured_smem_bytes"], errors="ignore"
    )
    launch = aggregate.attach_measured_launch(launch, tables["decode"])
    tables["verdict"] = verdict.calibrate(tables["verdict"])
    provenance = {
        "commit": git_commit(),
        "triton": package_version("triton"),
        "torch": package_version("torch"),
        "nvidia-cutlass": package_version("nvidia-cutlass"),
        "note": "re-rendered from the GPU run's tables; versions above are the renderer's",
    }
    args = (settings, launch, tables["decode"], tables["collective"], tables["verdict"])
    write_table(folder / "launch.csv", launch)
    write_table(folder / "verdict.csv", tables["verdict"])
    data = report_data.build(*args, provenance)
    write_text(folder / "report.md", report_md.render(data))
    write_text(folder / "report.html", report_html.render(data))
    print(f"refreshed {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
