"""The comparison of two sweeps for people: the console summary and the files of --out."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from tilesweep.columns import RUN_PROVENANCE_KEYS, TOOLCHAIN_KEY
from tilesweep.compare import Run, as_float, key_text
from tilesweep.io import write_table, write_text
from tilesweep.report.formatting import fmt_value

# What `tilesweep compare --out` writes (write_outputs), in that order.
OUT_FILES = ("changes.csv", "summary.txt", "changes.png")


def provenance_changes(a: Run, b: Run) -> list[tuple[str, str, str]]:
    """Return (field, A's values, B's values) for provenance fields that differ between runs."""

    def values(run: Run, field: str) -> str:
        found: set[str] = set()
        # Launch rows are compiled on the host: they name a toolchain and commit, not a device.
        skip = {"launch"} if field not in (TOOLCHAIN_KEY, "commit") else set()
        for name, frame in run.tables.items():
            if field in frame and name not in skip:
                found |= set(frame[field].dropna().astype(str))
        if field in run.ceilings and run.ceilings[field] is not None:
            found.add(str(run.ceilings[field]))
        return ", ".join(sorted(found)) or "-"

    out = []
    for field in RUN_PROVENANCE_KEYS:
        va, vb = values(a, field), values(b, field)
        if va != vb:
            out.append((field, va, vb))
    return out


def _cell(value: object) -> str:
    if isinstance(value, str) or math.isnan(as_float(value)):
        return key_text(value)
    if math.isfinite(as_float(value)) and abs(as_float(value)) >= 1e15:
        return f"{as_float(value):.4g}"  # not 300 digits for a damaged 1e308
    return fmt_value(value, 4)


def format_changes(changes: pd.DataFrame, a: Run, b: Run, threshold: float, limit: int = 40) -> str:
    """Return the console summary: provenance differences, then per table what moved."""
    lines = [f"A: {a.path}", f"B: {b.path}"]
    prov = provenance_changes(a, b)
    if prov:
        lines.append("Provenance that differs:")
        lines += [f"  {field}: {va}  ->  {vb}" for field, va, vb in prov]
    else:
        lines.append("Provenance: same device, versions and commit.")
    lines.append(
        f"Beyond noise: timed values whose medians differ by more than both runs' p10..p90; "
        f"values without a spread, by more than {threshold:.0%}; labels and launch shared "
        "memory, any change."
    )
    if changes.empty:
        lines.append("Nothing to compare: neither run has tables.")
        return "\n".join(lines) + "\n"
    for table, part in changes.groupby("table", sort=False):
        if (part["metric"] == "table").any():  # the table has rows in one run only
            rec = part.iloc[0]
            lines.append(f"\n{table}: {rec['basis']} ({rec['label']}); nothing to compare")
            continue
        only = part[part["metric"] == "row"]
        values = part[part["metric"] != "row"]
        beyond = values[values["beyond"].astype(bool)]
        head = f"\n{table}: {len(beyond)} of {len(values)} values changed beyond the noise"
        for side in ("A", "B"):
            count = int((only["basis"] == f"only in {side}").sum())
            head += f"; {count} rows only in {side}" if count else ""
        lines.append(head)
        order = beyond.assign(
            _size=beyond["ratio"].map(lambda r: abs(math.log(r)) if as_float(r) > 0 else math.inf)
        ).sort_values("_size", ascending=False)
        for rec in order.head(limit).to_dict("records"):
            ratio = as_float(rec["ratio"])
            ratio_txt = f"  x{ratio:.3g}" if not math.isnan(ratio) else ""
            lines.append(
                f"  {rec['label']}  {rec['metric']}: {_cell(rec['a'])} -> {_cell(rec['b'])}"
                f"{ratio_txt}  [{rec['basis']}]"
            )
        if len(order) > limit:
            lines.append(f"  ... and {len(order) - limit} more (see changes.csv with --out)")
        for side in ("A", "B"):
            labels = list(only.loc[only["basis"] == f"only in {side}", "label"])
            if labels:
                more = f" ... and {len(labels) - 5} more" if len(labels) > 5 else ""
                lines.append(f"  only in {side}: {', '.join(labels[:5])}{more}")
    return "\n".join(lines) + "\n"


def write_outputs(changes: pd.DataFrame, text: str, out: str | Path) -> list[Path]:
    """Write changes.csv, summary.txt and changes.png (B/A per value) into out; return paths."""
    # matplotlib (via report.plotting): drawn only here; compare loads without it
    from tilesweep.report.plotting import compare_ratios, png

    out = Path(out)
    paths = [out / name for name in OUT_FILES]
    write_table(paths[0], changes)
    write_text(paths[1], text)
    paths[2].write_bytes(png(compare_ratios(changes)))
    return paths
