"""Find the per-cell result files that hold failed rows, so just those can be rerun."""

import json
from pathlib import Path

import pandas as pd

from tilesweep.cells import SUFFIX, damage, summary_path
from tilesweep.columns import SETTLED, Status, status_of

# Where per-cell outputs with rows lie (a launch check that does not fit is a result, not a
# failure; tune/.work holds the tuner's own journal, not outputs).
STAGES = ("build", "decode", "collective", "layout", "power", "tune")
# Where records are checked for damage only: a launch row that does not fit is the answer.
DAMAGE_ONLY = ("launch",)
FAILED_ROW_COLUMNS = ["path", "status", "reason"]


def _records(path: Path) -> list[tuple[str, str]]:
    """Return (status, reason) per row of one per-cell result file; odd statuses say so."""
    if path.suffix == ".json":
        try:
            record = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError, RecursionError):
            return [(Status.MISSING, "the file is not readable JSON")]
        if not isinstance(record, dict):
            return [
                (Status.MISSING, f"the file holds a JSON {type(record).__name__}, not a record")
            ]
        cells = record.get("cells", [record])
        rows = list(cells.values()) if isinstance(cells, dict) else cells
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            return [(Status.MISSING, "its cells are not records")]
    else:
        try:
            frame = pd.read_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
            return [(Status.MISSING, "the file is empty or not a readable CSV")]
        if "status" not in frame:
            return [(Status.MISSING, "the file has no status column")]
        if frame.empty and not summary_path(path).exists():
            why = "a header and no rows, and no .sum record that its job wrote none"
            return [(Status.MISSING, why)]
        rows = frame.to_dict("records")
    out = []
    for row in rows:
        reason = row.get("reason")
        reason = "" if reason is None or reason != reason else str(reason)
        try:
            status = status_of(row.get("status"))
        except ValueError:
            status, reason = str(row["status"]), f"not a known status; {reason}".rstrip("; ")
        if status == Status.MISSING:
            reason = "no status recorded"
        out.append((str(status), reason))
    return out


def _not_a_record(path: Path) -> str | None:
    """Return why a record path cannot be read (never opened), else None."""
    if path.is_dir():
        return "a folder where the record goes"
    if path.is_symlink() and not path.exists():
        return "a link to nothing where the record goes"
    if not path.is_file():
        return "not a plain file where the record goes"
    return None


def _file_rows(
    path: Path, recorded: bool, statuses: set[str] | None, rows: bool = True
) -> list[dict]:
    """Return the failed rows (path, status, reason) of one per-cell output (its damage only
    where rows is False)."""
    why = damage(path) if summary_path(path).exists() else None
    # (a row that failed, or a header and no rows, says more than the missing record)
    unrecorded = recorded and not summary_path(path).exists()
    if unrecorded and all(status in SETTLED for status, _ in _records(path)):
        why = f"no {SUFFIX} record beside it, though the run's other outputs have theirs"
    if why is not None:  # cut to its header, emptied, edited: not what its job wrote
        return [{"path": path, "status": str(Status.MISSING), "reason": f"damaged: {why}"}]
    if not rows:
        return []
    return [
        {"path": path, "status": status, "reason": reason}
        for status, reason in _records(path)
        if status not in SETTLED and (statuses is None or status in statuses)
    ]


def failed_rows(results: Path, statuses: set[str] | None = None) -> pd.DataFrame:
    """Return (path, status, reason) per failed row of the per-cell outputs."""
    results = Path(results)
    # A run whose outputs carry .sum records (a sweep's since tilesweep keeps them): one of its
    # outputs without its record was replaced or cut short after its job (the plan reruns it).
    recorded = any(
        next((results / stage).rglob(f"*{SUFFIX}"), None) is not None
        for stage in STAGES
        if (results / stage).is_dir()
    )
    found = []
    for stage in STAGES + DAMAGE_ONLY:
        folder = results / stage
        if folder.exists() and not folder.is_dir():  # a stage's folder replaced by a file
            why = "a file where the stage's folder goes"
            found.append({"path": folder, "status": str(Status.MISSING), "reason": why})
            continue
        for path in sorted(folder.rglob("*")):
            hidden = any(p.startswith(".") for p in path.relative_to(results).parts)
            if path.suffix not in (".json", ".csv") or hidden:
                continue
            why = _not_a_record(path)
            if why is not None:
                found.append({"path": path, "status": str(Status.MISSING), "reason": why})
                continue
            found += _file_rows(path, recorded, statuses, rows=stage not in DAMAGE_ONLY)
    return pd.DataFrame(found, columns=FAILED_ROW_COLUMNS)


def failed_outputs(results: Path, statuses: set[str] | None = None) -> list[Path]:
    """Return the per-cell outputs under results with a failed row (see failed_rows)."""
    return list(dict.fromkeys(failed_rows(results, statuses)["path"]))
