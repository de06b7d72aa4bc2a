"""Re-render a kept example (docs/examples/h200) from its own measured tables with the current
code, without a GPU: the launch table's measured-launch columns, the verdict and its check, and
both reports are computed anew from launch, decode, collective, layout (the measured whole steps),
power and tune_<dtype>.csv tables and the device's ceilings.json, exactly as the aggregate step
computes them.
Usage: python tools/refresh_example.py docs/examples/h200 experiment=h200_example
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from tilesweep.config import compose
from tilesweep.io import read_json, write_table, write_text
from tilesweep.provenance import git_commit, package_version
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.stages import aggregate

MEASURED = ("launch", "decode", "collective", "layout", "power")


def main() -> int:
    """Refresh the example folder; return the exit status."""
    folder, overrides = Path(sys.argv[1]), sys.argv[2:]
    settings = compose(overrides)
    measured = {n: pd.read_csv(folder / f"{n}.csv", low_memory=False) for n in MEASURED}
    tunes = [pd.read_csv(p) for p in sorted(folder.glob("tune_*.csv"))]
    measured["tune"] = pd.concat(tunes, ignore_index=True) if tunes else pd.DataFrame()
    launch = measured["launch"].drop(
        columns=["measured_launch", "measured_smem_bytes"], errors="ignore"
    )
    measured["launch"] = aggregate.attach_measured_launch(
        launch, measured["decode"], settings["catalog"]
    )
    provenance = {
        "commit": git_commit(),
        "triton": package_version("triton"),
        "torch": package_version("torch"),
        "nvidia-cutlass": package_version("nvidia-cutlass"),
        "note": "re-rendered from the GPU run's tables; versions above are the renderer's",
    }
    tables, data = aggregate.assemble(
        settings, measured, read_json(folder / "ceilings.json"), provenance
    )
    for name in ("launch", "verdict", "check"):
        write_table(folder / f"{name}.csv", tables[name])
    if "gap" not in tables["fit"]:  # the shipped fit (deployment.fit_file) follows the run's steps
        write_text(folder / "fit.json", json.dumps(tables["fit"], indent=1, sort_keys=True) + "\n")
    write_text(folder / "report.md", report_md.render(data))
    write_text(folder / "report.html", report_html.render(data))
    print(f"refreshed {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
