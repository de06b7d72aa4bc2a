"""Compare two sweeps' results: what changed beyond the noise (both runs' p10..p90 spread, else
a relative threshold; labels and launch shared memory on any change), and the comparison for
people: the console summary and the files of --out."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tilesweep import package_data
from tilesweep.cells import damage, summary_path
from tilesweep.columns import RUN_PROVENANCE_KEYS, SPLIT_COLUMNS, TABLE_KEYS, TOOLCHAIN_KEY
from tilesweep.errors import ConfigError
from tilesweep.io import results_at, write_table, write_text
from tilesweep.measure.gemm_case import TOLERANCE
from tilesweep.report.formatting import fmt_value

DATA_FILES = ("data/compare.yaml",)
# The tables compared, with the columns that identify a row (those present in both runs are used).
KEYS = TABLE_KEYS
# Per table, the values compared with their spread (or the relative threshold), the relative
# errors checked against the dtype's tolerance, and the values any change of which counts.
MEASURES, CHECKED, EXACT = (
    package_data.data_typed("tilesweep", DATA_FILES[0], kind, dict[str, list[str]])
    for kind in ("measure", "checked", "exact")
)
MEASURES["verdict"] += SPLIT_COLUMNS
COLUMNS = ["table", "label", "metric", "a", "b", "ratio", "noise_a", "noise_b", "basis", "beyond"]


@dataclass
class Run:
    """One sweep's results folder: its tables and measured device ceilings."""

    path: Path
    tables: dict[str, pd.DataFrame]
    ceilings: dict
    # Whether its tables carry no .sum records (a run from before tilesweep kept them, or a
    # folder made by hand): compared as they are, unchecked (compare says so).
    unrecorded: bool = False


def load_run(path: str | Path) -> Run:
    """Return the tables and ceilings of a results folder."""
    root = results_at(path, ("tables",), "tables/")
    tables = {}
    # a run whose tables carry .sum records: then each must match
    recorded = any(summary_path(root / "tables" / f"{n}.csv").exists() for n in KEYS)
    for name in KEYS:
        csv = _plain(root / "tables" / f"{name}.csv")
        if recorded:
            _check_record(csv)
        try:
            tables[name] = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            why = "empty, not even a header" if isinstance(exc, pd.errors.EmptyDataError) else exc
            raise ConfigError(f"{csv}: not a readable table ({why})") from None
    ceilings_path = _plain(root / "device" / "ceilings.json")
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
    return Run(root, tables, ceilings, unrecorded=not recorded)


def _plain(path: Path) -> Path:
    if path.exists() and not path.is_file():
        raise ConfigError(f"{path}: not a plain file (a folder, a pipe or a device)")
    return path


def _check_record(table: Path) -> None:
    """Raise ConfigError where a recorded run's table is not what its job wrote."""
    record = summary_path(table)
    if not (table.exists() or record.exists()):
        return  # a table this run never made
    try:
        why = damage(table)
    except OSError as exc:
        why = f"its {record.name} record is unreadable ({exc.strerror})"
    if why == "missing":
        why = f"missing, though its {record.name} record is there"
    elif not record.exists():
        why = (
            f"no {record.name} record beside it, though the run's other tables have theirs "
            "(replaced or edited after the run)"
        )
    if why:
        raise ConfigError(f"{table}: {why}; rerun that sweep to rebuild it, then compare")


def key_text(value: object) -> str:
    """Return a key cell as stable text: whole floats as integers, NaN empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _with_key(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    label = frame[keys].apply(lambda r: " ".join(key_text(v) for v in r), axis=1)
    repeat = label.groupby(label).cumcount()
    frame["_key"] = label.where(repeat == 0, label + " #" + (repeat + 1).astype(str))
    return frame


def as_float(value: object) -> float:
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
    lo = as_float(row.get(f"{stem}_p10_ms_{side}"))
    hi = as_float(row.get(f"{stem}_p90_ms_{side}"))
    repeats = as_float(row.get(f"repeats_{side}"))
    value = as_float(row.get(f"{metric}_{side}"))
    # A spread that cannot be a timing's (negative, not around its own median, or its p90 more
    # than SPREAD_MAX times the median: a damaged record) is no spread: it must not hide a
    # change behind a huge noise band.
    plausible = 0 <= lo <= value <= hi <= SPREAD_MAX * value
    if not plausible or hi <= lo or (not math.isnan(repeats) and repeats < 2):
        return math.nan
    return hi - lo


def measure_change(a: float, b: float, noise_a: float, noise_b: float, threshold: float) -> tuple:
    """Return (beyond, basis): whether b differs from a beyond the noise, and by which rule."""
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
    """Return (beyond, basis) of two runs' relative errors against the dtype's tolerance."""
    finite_a, finite_b = math.isfinite(a), math.isfinite(b)
    if finite_a != finite_b:
        return True, "relative error not a number (inf or NaN) in one run: wrong or damaged"
    if not finite_a:
        return False, "relative error not a number in both runs"
    tol = TOLERANCE.get(str(dtype), max(TOLERANCE.values()))
    return (a <= tol) != (b <= tol), f"relative error against the tolerance {tol:g}"


def _schema_change(name: str, a: pd.DataFrame, b: pd.DataFrame) -> list[dict]:
    """Return one row (metric 'columns') where the runs' tables differ in compared columns."""
    wanted = [*KEYS[name], *MEASURES.get(name, []), *EXACT.get(name, [])]
    only_a = [c for c in wanted if c in a.columns and c not in b.columns]
    only_b = [c for c in wanted if c in b.columns and c not in a.columns]
    if not only_a and not only_b:
        return []
    a, b = ", ".join(only_a) or "-", ", ".join(only_b) or "-"
    return [_row(name, "columns", "columns", a, b, "columns in one run only (not compared)", True)]


def _only(name: str, label: str, side: str, metric: str) -> dict:
    a, b = ("present", "absent") if side == "A" else ("absent", "present")
    return _row(name, label, metric, a, b, f"only in {side}", True)


def _row(table, label, metric, a, b, basis, beyond, ratio=math.nan, noise=(math.nan,) * 2) -> dict:
    values = (table, label, metric, a, b, ratio, *noise, basis, beyond)
    return dict(zip(COLUMNS, values, strict=True))


def _value_changes(name: str, label: str, row: pd.Series, threshold: float) -> list[dict]:
    """Return one row per measured, checked and exact value of a row in both runs."""
    out = []
    for kind, cols in (("measure", MEASURES), ("checked", CHECKED), ("exact", EXACT)):
        for col in (c for c in cols.get(name, []) if f"{c}_a" in row and f"{c}_b" in row):
            a, b = row[f"{col}_a"], row[f"{col}_b"]
            va, vb = as_float(a), as_float(b)
            # B/A where A is a number other than 0 (and, for a relative error, finite)
            ratio = vb / va if va and (kind != "checked" or math.isfinite(va)) else math.nan
            noise = (math.nan, math.nan)
            if kind == "measure":
                if math.isnan(va) and math.isnan(vb):
                    continue
                noise = (_spread(row, col, "a"), _spread(row, col, "b"))
                beyond, basis = measure_change(va, vb, *noise, threshold)
            elif kind == "checked":
                if key_text(a) == "" and key_text(b) == "":
                    continue  # neither run checked this row (a failed launch)
                beyond, basis = error_change(va, vb, row.get("dtype_a", row.get("dtype")))
            else:  # any change: as numbers where both are, else as text (NaN equals NaN)
                numbers = not (math.isnan(va) or math.isnan(vb))
                same = va == vb if numbers else key_text(a) == key_text(b)
                beyond, basis, va, vb = not same, "exact", a, b
            out.append(_row(name, label, col, va, vb, basis, beyond, ratio, noise))
    return out


def compare_table(name: str, a: pd.DataFrame, b: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Return one row per compared value of one table (COLUMNS), rows only in one run too."""
    if a.empty != b.empty:
        side, rows = ("B", len(b)) if a.empty else ("A", len(a))
        return pd.DataFrame([_only(name, f"{rows} rows", side, "table")], columns=COLUMNS)
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
        if row["_merge"] != "both":
            side = "A" if row["_merge"] == "left_only" else "B"
            rows.append(_only(name, row["_key"], side, "row"))
        else:
            rows += _value_changes(name, row["_key"], row, threshold)
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_ceilings(a: dict, b: dict, threshold: float) -> pd.DataFrame:
    """Return the measured copy bandwidth and matmul peaks of both runs, compared by threshold."""
    rows = []
    peaks_a, peaks_b = a.get("matmul_tflops") or {}, b.get("matmul_tflops") or {}
    pairs = [("copy_gbs", a.get("copy_gbs"), b.get("copy_gbs"))]
    pairs += [
        (f"matmul_tflops {d}", peaks_a.get(d), peaks_b.get(d)) for d in sorted({*peaks_a, *peaks_b})
    ]
    for metric, va, vb in pairs:
        va, vb = as_float(va), as_float(vb)
        if math.isnan(va) and math.isnan(vb):
            continue
        beyond, basis = measure_change(va, vb, math.nan, math.nan, threshold)
        ratio = vb / va if va else math.nan
        rows.append(_row("device", "ceilings", metric, va, vb, basis, beyond, ratio))
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_runs(a: Run, b: Run, threshold: float = 0.10) -> pd.DataFrame:
    """Return every compared value of two runs (COLUMNS), beyond-noise flagged."""
    parts = [compare_ceilings(a.ceilings, b.ceilings, threshold)]
    parts += [compare_table(n, a.tables[n], b.tables[n], threshold) for n in KEYS]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


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
