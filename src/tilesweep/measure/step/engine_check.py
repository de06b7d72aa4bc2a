"""The whole decode step with an engine's kernel list beside the lean one, measured on the one
GPU at hand and composed from the shipped fit (tools/gpu.sh engine-step):
`python -m tilesweep.measure.step.engine_check OUT [--layout=tpT-ppP-epE] [OVERRIDES...]`.

TP1 (or one emulated rank) at BATCHES, lean then with the engine's extras; OUT/engine_step.csv
is always written, a failure as a row with its reason."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tilesweep import grid, package_data
from tilesweep.columns import Status
from tilesweep.deployment_verdict import fit_on_datasheet
from tilesweep.device import catalog_name
from tilesweep.errors import last_line
from tilesweep.io import project_path
from tilesweep.pipeline import Sweep
from tilesweep.plan import calibration
from tilesweep.stages.layout import bench_layout

if TYPE_CHECKING:
    from tilesweep.settings import HardwareSpec, ModelSettings, RootSettings

BATCHES = (1, 8, 32)
LAYOUT = "tp1-pp1-ep1"
_LAYOUT_NAME = re.compile(r"tp(\d+)-pp(\d+)-ep(\d+)")
OVERRIDES = (
    "bench.step_kernel_list=engine",
    "bench.step_timeout_s=200",  # the step's ranks are killed past this: rows say so
)
_LISTS = package_data.column_lists("tilesweep.measure.step.engine_check")  # data/columns.yaml
COLUMNS = _LISTS["COLUMNS"]
SHOWN = _LISTS["SHOWN"]


def layout_override(layout: str) -> str:
    """Return the grid.layouts override of a layout named tpT-ppP-epE."""
    match = _LAYOUT_NAME.fullmatch(layout)
    if not match:
        raise ValueError(f"--layout={layout!r}: name a layout tpT-ppP-epE (e.g. tp8-pp1-ep1)")
    tp, pp, ep = match.groups()
    return f"grid.layouts=[{{tp:{tp},pp:{pp},ep:{ep}}}]"


def settings_and_cell(overrides: list[str], layout: str = LAYOUT) -> tuple[RootSettings, str]:
    """Return (settings, the layout's whole-step cell at BATCHES)."""
    sweep = Sweep([layout_override(layout), *OVERRIDES, *overrides], None)
    cell = json.loads(sweep.layout_step_cell(layout))
    cell["batches"] = list(BATCHES)
    return sweep.settings, grid.canonical(cell)


def composed(steps: pd.DataFrame, settings: RootSettings) -> pd.DataFrame:
    """Return the measured steps' check rows composed from deployment.fit_file."""
    fit = json.loads(project_path(settings.deployment.fit_file).read_text())
    return compose_for(steps, fit, settings.model, settings.catalog)


def compose_for(
    steps: pd.DataFrame,
    fit: dict,
    model: ModelSettings,
    catalog: dict[str, HardwareSpec],
    attention=None,
) -> pd.DataFrame:
    """Return step_check's rows composed from `fit` for the GPU that ran them."""
    ran = steps.loc[steps["status"] == Status.OK, "device"] if "device" in steps else []
    device = str(ran.iloc[0]) if len(ran) else fit["device"]
    here = catalog_name(device, catalog)
    if here is None or here == catalog_name(fit["device"], catalog):
        hw = calibration.device_hardware(fit["ceilings"], fit["device"], None)
        on = calibration.Here(model, hw, fit["device"], attention=attention)
        check = calibration.step_check(steps, on, fit=fit)
        where = f"on {fit['device']}'s measured figures (the fit's own ceilings)"
        if here is None and device != fit["device"]:
            gap = f"{device} has no conf/hardware file: composed on the fit device's figures"
            check["gaps"] = [g + "; " + gap if g else gap for g in check["gaps"].fillna("")]
        return check.assign(composed_for=where)
    moved, how = fit_on_datasheet(fit, "", catalog)
    if moved is None:
        raise ValueError(how)
    on = calibration.Here(model, catalog[here], device, attention=attention)
    check = calibration.step_check(steps, on, fit=moved)
    where = f"for {here} ({device}) on its datasheet, from the fit on {fit['device']}{how}"
    label = check["composed_label"] + f"; {where}"
    return check.assign(composed_label=label, composed_for=where, held_out=True)  # another GPU


def table(steps: pd.DataFrame, check: pd.DataFrame) -> pd.DataFrame:
    """Return each measured row with its composed time and its list over lean."""
    out = steps.copy()
    if not check.empty:
        keys = ["kernel_list", "batch"]
        composed = ["composed_ms", "composed_error_pct", "composed_label", "composed_for", "gaps"]
        out = out.merge(check[[*keys, *composed]], on=keys, how="left")
    lean = out[out["kernel_list"] == "lean"].set_index("batch")
    ratios = {"step_ms": "engine_over_lean", "composed_ms": "composed_engine_over_lean"}
    for col, over in ratios.items():
        if col not in out:
            out[over] = math.nan
            continue
        base = out["batch"].map(lean[col]) if col in lean else math.nan
        out[over] = pd.to_numeric(out[col], errors="coerce") / pd.to_numeric(base, errors="coerce")
    order = out["kernel_list"].ne("lean").astype(int)
    out = out.assign(_order=order).sort_values(["_order", "batch"], kind="stable")
    return out.reindex(columns=COLUMNS).reset_index(drop=True)


def failed(reason: str, lists: tuple[str, ...] = ("lean", "engine")) -> pd.DataFrame:
    """Return one failure row per kernel list and batch, with the reason."""
    rows = [
        {"kernel_list": k, "batch": b, "status": Status.RUNTIME, "reason": reason}
        for k in lists
        for b in BATCHES
    ]
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def run(out: Path, overrides: list[str], layout: str = LAYOUT) -> pd.DataFrame:
    """Measure, compose and write OUT/engine_step.csv; return the table (failures as rows)."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        settings, cell = settings_and_cell(overrides, layout)
    except Exception as exc:  # a config that does not compose: every row says why
        frame = failed(f"config: {last_line(exc)}")
    else:
        try:
            steps = bench_layout(cell, str(out / f"layout_{layout}.csv"), str(out / "layout.log"))
        except Exception as exc:  # bench_layout makes rows of a step's failure; this is the rest
            frame = failed(f"measure: {last_line(exc)}")
        else:
            try:
                check = composed(steps, settings)
            except Exception as exc:  # the measured rows stand, without a composed time
                check = pd.DataFrame()
                steps = steps.assign(gaps=f"compose: {last_line(exc)}")
            frame = table(steps, check)
    frame.to_csv(out / "engine_step.csv", index=False)
    return frame


def main(argv: list[str] | None = None) -> int:
    """Run the check (argv: OUT [--layout=NAME] [OVERRIDES...]); return the status."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(" ".join(__doc__.splitlines()[2:4]).strip(), file=sys.stderr)
        return 2
    layouts = [a.removeprefix("--layout=") for a in args[1:] if a.startswith("--layout=")]
    overrides = [a for a in args[1:] if not a.startswith("--layout=")]
    try:
        layout = layouts[-1] if layouts else LAYOUT
        layout_override(layout)
    except ValueError as exc:
        print(f"step_engine_check: {exc}", file=sys.stderr)
        return 2
    frame = run(Path(args[0]), overrides, layout)
    with pd.option_context("display.width", 200, "display.max_colwidth", 48):
        print(frame[SHOWN].to_string(index=False))
    bad = frame[frame["status"] != Status.OK]
    for _, row in bad.drop_duplicates("reason").iterrows():
        print(f"{row['kernel_list']} batch {row['batch']}: {row['status']}: {row['reason']}")
    print(f"wrote {Path(args[0]) / 'engine_step.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
