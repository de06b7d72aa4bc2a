"""Compare two sweeps' results: what changed beyond the noise.

A timed value changed beyond the noise when the difference of the medians exceeds the spread
(p10..p90) of both runs. A value without a spread in either run (one repeat, or modelled) changed
beyond the noise when it moved by more than a relative threshold. Labels (launch status, fits,
verdict, bound) and launch shared memory change whenever they differ at all.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tilesweep.columns import RUN_PROVENANCE_KEYS, SPLIT_COLUMNS, TABLE_KEYS, TOOLCHAIN_KEY
from tilesweep.errors import ConfigError
from tilesweep.io import check_out_folder, write_table, write_text
from tilesweep.measure.gemm_case import TOLERANCE
from tilesweep.report.formatting import fmt_value

# The tables compared, with the columns that identify a row (those present in both runs are used).
KEYS = {
    name: TABLE_KEYS[name]
    for name in ("launch", "decode", "collective", "verdict", "check", "engines", "power", "tune")
}
# Values compared with their spread (or the relative threshold), per table.
MEASURES = {
    "decode": ["time_ms"],
    "collective": ["time_ms"],
    "verdict": ["tpot_ms", *SPLIT_COLUMNS],
    "check": ["measured_ms", "composed_ms"],
    "engines": ["composed_tpot_ms"],
    "power": ["power_frac_median"],
    "tune": ["time_ms"],
}
# Values any change of which counts, per table.
EXACT = {
    "launch": ["status", "fits", "smem_bytes"],
    "decode": ["status", "bound", "rotation_sets", "max_tokens_per_expert"],
    "collective": ["status"],
    "verdict": ["fits_memory", "bound"],
    "check": [],
    "engines": ["fits_memory", "bound"],
    "power": ["status"],
    "tune": ["status", "tuned"],
}
# Relative errors against the reference, per table: changed when one run's is not a number (inf
# or NaN: a wrong or damaged result) and the other's is, or when they fall on either side of the
# dtype's tolerance (measure.gemm_case.TOLERANCE).
CHECKED = {"decode": ["rel_err"], "tune": ["rel_err"]}
CEILINGS = ("copy_gbs", "matmul_tflops")
COLUMNS = [
    "table",
    "label",
    "metric",
    "a",
    "b",
    "ratio",
    "noise_a",
    "noise_b",
    "basis",
    "beyond",
]


@dataclass
class Run:
    """One sweep's results folder: its tables and measured device ceilings."""

    path: Path
    tables: dict[str, pd.DataFrame]
    ceilings: dict


def results_dir(path: str | Path) -> Path:
    """Return the results folder at path: path itself, or path/results, holding tables/."""
    path = Path(path)
    for candidate in (path, path / "results"):
        if (candidate / "tables").is_dir():
            return candidate
    raise ConfigError(f"{path}: no tables/ here or in results/; give a sweep's results folder")


def load_run(path: str | Path) -> Run:
    """Return the tables (launch, decode, collective, verdict, check, power, tune) and ceilings
    of a results folder."""
    root = results_dir(path)
    tables = {}
    for name in KEYS:
        csv = root / "tables" / f"{name}.csv"
        if csv.exists() and (not csv.is_file() or not _plain_file(csv)):
            raise ConfigError(f"{csv}: not a plain file (a folder, a pipe or a device)")
        try:
            tables[name] = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            why = "empty, not even a header" if isinstance(exc, pd.errors.EmptyDataError) else exc
            raise ConfigError(f"{csv}: not a readable table ({why})") from None
    ceilings_path = root / "device" / "ceilings.json"
    if ceilings_path.exists() and not _plain_file(ceilings_path):
        raise ConfigError(f"{ceilings_path}: not a plain file (a folder, a pipe or a device)")
    try:
        ceilings = json.loads(ceilings_path.read_text()) if ceilings_path.exists() else {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{ceilings_path}: not readable JSON ({exc})") from None
    if not isinstance(ceilings, dict):
        raise ConfigError(f"{ceilings_path}: not a JSON object (a {type(ceilings).__name__})")
    peaks = ceilings.get("matmul_tflops")
    if peaks is not None and not isinstance(peaks, dict):
        raise ConfigError(
            f"{ceilings_path}: matmul_tflops={peaks!r:.80}: not a mapping of dtype to TFLOP/s"
        )
    return Run(root, tables, ceilings)


def _plain_file(path: Path) -> bool:
    """Return whether a path is a regular file (a FIFO would block a read forever)."""
    import stat

    return stat.S_ISREG(path.stat().st_mode)


def check_out(out: str | Path, force: bool = False) -> None:
    """Raise ConfigError in one line when the --out folder cannot take the comparison
    (io.check_out_folder)."""
    check_out_folder(str(out), ("changes.csv", "summary.txt", "changes.png"), force)


def _key_text(value: object) -> str:
    """Return a key cell as stable text: whole floats as integers, NaN empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _with_key(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Return the frame with a `_key` label built from the key columns (repeats numbered)."""
    frame = frame.copy()
    label = frame[keys].apply(lambda r: " ".join(_key_text(v) for v in r), axis=1)
    repeat = label.groupby(label).cumcount()
    frame["_key"] = label.where(repeat == 0, label + " #" + (repeat + 1).astype(str))
    return frame


def _float(value: object) -> float:
    """Return value as a float, NaN when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# The widest p90 a timing's spread may have, as a multiple of its median (compare._spread).
SPREAD_MAX = 10.0


def _spread(row: pd.Series, metric: str, side: str) -> float:
    """Return p90 - p10 of a metric on one side, NaN when the run recorded no spread."""
    stem = metric[: -len("_ms")] if metric.endswith("_ms") else metric
    lo = _float(row.get(f"{stem}_p10_ms_{side}"))
    hi = _float(row.get(f"{stem}_p90_ms_{side}"))
    repeats = _float(row.get(f"repeats_{side}"))
    value = _float(row.get(f"{metric}_{side}"))
    # A spread that cannot be a timing's (negative, not around its own median, or its p90 more
    # than SPREAD_MAX times the median: a damaged record) is no spread: it must not hide a
    # change behind a huge noise band.
    plausible = 0 <= lo <= value <= hi <= SPREAD_MAX * value
    if not plausible or hi <= lo or (not math.isnan(repeats) and repeats < 2):
        return math.nan
    return hi - lo


def measure_change(a: float, b: float, noise_a: float, noise_b: float, threshold: float) -> tuple:
    """Return (beyond, basis): whether b differs from a beyond the noise, and by which rule; a
    time that cannot be one (negative or infinite) always differs, said so."""
    if math.isnan(a) or math.isnan(b):
        return (math.isnan(a) != math.isnan(b)), "presence"
    if not (0 <= a < math.inf and 0 <= b < math.inf):
        return True, "not a time (negative or infinite)"
    if not (math.isnan(noise_a) or math.isnan(noise_b)):
        return abs(b - a) > max(noise_a, noise_b), "spread"
    if a == 0:
        return b != 0, "threshold"
    return abs(b - a) / abs(a) > threshold, "threshold"


def error_change(a: float, b: float, dtype: object) -> tuple[bool, str]:
    """Return (beyond, basis) of two runs' relative errors against the reference: a value that
    is not a number (inf or NaN) where the other is, or the two on either side of the dtype's
    tolerance, changed; said so."""
    finite_a, finite_b = math.isfinite(a), math.isfinite(b)
    if finite_a != finite_b:
        return True, "relative error not a number (inf or NaN) in one run: wrong or damaged"
    if not finite_a:
        return False, "relative error not a number in both runs"
    tol = TOLERANCE.get(str(dtype), max(TOLERANCE.values()))
    return (a <= tol) != (b <= tol), f"relative error against the tolerance {tol:g}"


def _same(a: object, b: object) -> bool:
    """Return whether two cells hold the same value (NaN equals NaN, 1 equals 1.0)."""
    fa, fb = _float(a), _float(b)
    if not (math.isnan(fa) and math.isnan(fb)) and not (math.isnan(fa) or math.isnan(fb)):
        return fa == fb
    if _key_text(a) == "" and _key_text(b) == "":
        return True
    return _key_text(a) == _key_text(b)


def _schema_change(name: str, a: pd.DataFrame, b: pd.DataFrame) -> list[dict]:
    """Return one row (metric 'columns') when the runs' tables differ in the key, measured or
    exact columns compared, so that no column is passed over in silence; else none."""
    wanted = [*KEYS[name], *MEASURES.get(name, []), *EXACT.get(name, [])]
    only_a = [c for c in wanted if c in a.columns and c not in b.columns]
    only_b = [c for c in wanted if c in b.columns and c not in a.columns]
    if not only_a and not only_b:
        return []
    return [
        {
            "table": name,
            "label": "columns",
            "metric": "columns",
            "a": ", ".join(only_a) or "-",
            "b": ", ".join(only_b) or "-",
            "basis": "columns in one run only (not compared)",
            "beyond": True,
        }
    ]


def compare_table(name: str, a: pd.DataFrame, b: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Return one row per compared value of one table (see COLUMNS), rows only in one run too;
    a table with rows in one run only is one row (metric 'table')."""
    if a.empty != b.empty:
        side, rows = ("B", len(b)) if a.empty else ("A", len(a))
        only = {
            "table": name,
            "label": f"{rows} rows",
            "metric": "table",
            "a": "present" if side == "A" else "absent",
            "b": "present" if side == "B" else "absent",
            "basis": f"only in {side}",
            "beyond": True,
        }
        return pd.DataFrame([only], columns=COLUMNS)
    if a.empty and b.empty:
        return pd.DataFrame(columns=COLUMNS)
    schema = _schema_change(name, a, b)
    keys = [k for k in KEYS[name] if k in a.columns and k in b.columns]
    if not keys:
        return pd.DataFrame(schema, columns=COLUMNS)
    merged = _with_key(a, keys).merge(
        _with_key(b, keys), on="_key", how="outer", suffixes=("_a", "_b"), indicator=True
    )
    rows = list(schema)
    for _, row in merged.sort_values("_key").iterrows():
        label = row["_key"]
        if row["_merge"] != "both":
            side = "A" if row["_merge"] == "left_only" else "B"
            rows.append(
                {
                    "table": name,
                    "label": label,
                    "metric": "row",
                    "a": "present" if side == "A" else "absent",
                    "b": "present" if side == "B" else "absent",
                    "basis": f"only in {side}",
                    "beyond": True,
                }
            )
            continue
        for metric in MEASURES.get(name, []):
            if f"{metric}_a" not in row or f"{metric}_b" not in row:
                continue
            va, vb = _float(row[f"{metric}_a"]), _float(row[f"{metric}_b"])
            if math.isnan(va) and math.isnan(vb):
                continue
            na, nb = _spread(row, metric, "a"), _spread(row, metric, "b")
            beyond, basis = measure_change(va, vb, na, nb, threshold)
            rows.append(
                {
                    "table": name,
                    "label": label,
                    "metric": metric,
                    "a": va,
                    "b": vb,
                    "ratio": vb / va if va else math.nan,
                    "noise_a": na,
                    "noise_b": nb,
                    "basis": basis,
                    "beyond": beyond,
                }
            )
        for col in CHECKED.get(name, []):
            if f"{col}_a" not in row or f"{col}_b" not in row:
                continue
            va, vb = _float(row[f"{col}_a"]), _float(row[f"{col}_b"])
            raw_a, raw_b = _key_text(row[f"{col}_a"]), _key_text(row[f"{col}_b"])
            if raw_a == "" and raw_b == "":
                continue  # neither run checked this row (a failed launch)
            beyond, basis = error_change(va, vb, row.get("dtype_a", row.get("dtype")))
            rows.append(
                {
                    "table": name,
                    "label": label,
                    "metric": col,
                    "a": va,
                    "b": vb,
                    "ratio": vb / va if va and math.isfinite(va) else math.nan,
                    "basis": basis,
                    "beyond": beyond,
                }
            )
        for col in EXACT.get(name, []):
            if f"{col}_a" not in row or f"{col}_b" not in row:
                continue
            va, vb = row[f"{col}_a"], row[f"{col}_b"]
            numeric = not (math.isnan(_float(va)) or math.isnan(_float(vb)))
            rows.append(
                {
                    "table": name,
                    "label": label,
                    "metric": col,
                    "a": va,
                    "b": vb,
                    "ratio": _float(vb) / _float(va) if numeric and _float(va) else math.nan,
                    "basis": "exact",
                    "beyond": not _same(va, vb),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_ceilings(a: dict, b: dict, threshold: float) -> pd.DataFrame:
    """Return the measured copy bandwidth and matmul peaks of both runs, compared by threshold."""
    rows = []
    pairs = [("copy_gbs", a.get("copy_gbs"), b.get("copy_gbs"))]
    for dtype in sorted(set(a.get("matmul_tflops") or {}) | set(b.get("matmul_tflops") or {})):
        pairs.append(
            (
                f"matmul_tflops {dtype}",
                (a.get("matmul_tflops") or {}).get(dtype),
                (b.get("matmul_tflops") or {}).get(dtype),
            )
        )
    for metric, va, vb in pairs:
        va, vb = _float(va), _float(vb)
        if math.isnan(va) and math.isnan(vb):
            continue
        beyond, basis = measure_change(va, vb, math.nan, math.nan, threshold)
        rows.append(
            {
                "table": "device",
                "label": "ceilings",
                "metric": metric,
                "a": va,
                "b": vb,
                "ratio": vb / va if va else math.nan,
                "basis": basis,
                "beyond": beyond,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_runs(a: Run, b: Run, threshold: float = 0.10) -> pd.DataFrame:
    """Return every compared value of two runs (COLUMNS), beyond-noise flagged."""
    parts = [compare_ceilings(a.ceilings, b.ceilings, threshold)]
    parts += [compare_table(n, a.tables[n], b.tables[n], threshold) for n in KEYS]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


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
    """Return a value for the console: numbers to 4 significant figures, whole above 1,000."""
    if isinstance(value, str) or math.isnan(_float(value)):
        return _key_text(value)
    if math.isfinite(_float(value)) and abs(_float(value)) >= 1e15:
        return f"{_float(value):.4g}"  # not 300 digits for a damaged 1e308
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
            _size=beyond["ratio"].map(lambda r: abs(math.log(r)) if _float(r) > 0 else math.inf)
        ).sort_values("_size", ascending=False)
        for rec in order.head(limit).to_dict("records"):
            ratio = _float(rec["ratio"])
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
    # matplotlib (via report.compare_figure, report.plotting): drawn only here; compare loads
    # without it
    from tilesweep.report.compare_figure import compare_ratios
    from tilesweep.report.plotting import png

    out = Path(out)
    paths = [out / "changes.csv", out / "summary.txt", out / "changes.png"]
    write_table(paths[0], changes)
    write_text(paths[1], text)
    paths[2].write_bytes(png(compare_ratios(changes)))
    return paths
