"""Per-cell outputs that say what they hold. A job that writes one (a build record, a launch
check, the device's ceilings, a decode, collective, layout, power or tune table) writes beside
it `<file>.sum`: its bytes, SHA-256, columns and rows. A step that reads a cell checks the file
against that record; before the DAG is built the Snakefile checks every planned cell by its
size, so a cell that was emptied, cut short or deleted is rebuilt by the next run (Snakemake's
own --forcerun on that file; a dry run only shows it) and never joined as it is."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pandas as pd

from tilesweep.errors import CellError
from tilesweep.io import atomic_path

SUFFIX = ".sum"
# Per results folder: how many times each cell was found damaged and rebuilt (a job param).
LEDGER = ".rebuilds.json"


def summary_path(path: str | os.PathLike) -> Path:
    """Return where a cell's record of what it holds lies."""
    return Path(f"{path}{SUFFIX}")


def _write(path: str | os.PathLike, data: bytes, columns: list[str], rows: int) -> None:
    """Write a cell's bytes, then its record, each atomically (a kill between the two leaves a
    record that no longer matches: the cell is rebuilt)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    record = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "columns": columns,
        "rows": rows,
    }
    with atomic_path(summary_path(path)) as tmp:
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")


def write_cell_table(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """Write one cell's table as CSV (a header even when it has no row), with its record."""
    data = frame.to_csv(index=False).encode()
    _write(path, data, [str(c) for c in frame.columns], len(frame))


def write_cell_json(path: str | os.PathLike, record: dict) -> None:
    """Write one cell's JSON record (indented, keys sorted), with its record."""
    data = (json.dumps(record, indent=2, sort_keys=True, default=str) + "\n").encode()
    _write(path, data, sorted(str(k) for k in record), 1)


def damage(path: str | os.PathLike) -> str | None:
    """Return what is wrong with a cell (None when nothing is): missing, no record beside it,
    another size or content than its job wrote."""
    path = Path(path)
    if not path.exists():
        return "missing"
    try:
        record = json.loads(summary_path(path).read_text())
        size, digest = int(record["bytes"]), record["sha256"]
    except FileNotFoundError:
        return f"no {SUFFIX} record beside it (written by an older tilesweep, or cut short)"
    except (ValueError, KeyError, TypeError):
        return f"its {SUFFIX} record is unreadable"
    have = path.stat().st_size
    if have != size:
        return f"{have} bytes where its job wrote {size}"
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        return "its content differs from what its job wrote (SHA-256)"
    return None


def _checked_bytes(path: str | os.PathLike) -> tuple[bytes, dict | None]:
    """Return a cell's bytes and record (None for a file written outside a sweep, with no
    record: it is only parsed), or raise CellError naming the file and the fault. Inside a
    sweep the Snakefile has already rebuilt any cell whose record is missing."""
    if Path(path).exists() and not summary_path(path).exists():
        return Path(path).read_bytes(), None
    why = damage(path)
    if why is not None:
        raise CellError(f"{path}: {why}; the next run reruns its job")
    return Path(path).read_bytes(), json.loads(summary_path(path).read_text())


def read_cell_table(path: str | os.PathLike) -> pd.DataFrame:
    """Return one cell's table, checked: the bytes its job wrote, the columns and rows it
    declared; else raise CellError naming the file."""
    data, record = _checked_bytes(path)
    try:
        frame = pd.read_csv(io.BytesIO(data))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise CellError(f"{path}: not a readable CSV ({exc})") from None
    if record is None:
        return frame
    if [str(c) for c in frame.columns] != record.get("columns") or len(frame) != record.get("rows"):
        raise CellError(
            f"{path}: {len(frame)} rows of {list(frame.columns)}, where its job wrote "
            f"{record.get('rows')} rows of {record.get('columns')}"
        )
    return frame


def read_cell_json(path: str | os.PathLike) -> dict:
    """Return one cell's JSON record, checked as read_cell_table checks a table."""
    data, _ = _checked_bytes(path)
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CellError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(record, dict):
        raise CellError(f"{path}: not a JSON object")
    return record


def concat_cells(paths: list[str]) -> pd.DataFrame:
    """Return the concatenation of checked per-cell tables (a cell with no row adds none)."""
    frames = [f for f in (read_cell_table(p) for p in paths) if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def damaged(paths: list[str], joined_exist: bool) -> list[tuple[str, str]]:
    """Return (path, what is wrong) for every planned cell to rebuild: damaged ones, and missing
    ones once the joined tables exist (a run would otherwise keep the tables without them)."""
    out = []
    for path in paths:
        why = damage(path)
        if why and (why != "missing" or joined_exist):
            out.append((path, why))
    return out


def rebuilds(results: str | os.PathLike) -> dict[str, int]:
    """Return the results folder's rebuild counts by cell path ({} when none)."""
    try:
        return {str(k): int(v) for k, v in json.loads(Path(results, LEDGER).read_text()).items()}
    except FileNotFoundError:
        return {}
    except (ValueError, AttributeError, TypeError):
        from tilesweep.errors import ConfigError

        raise ConfigError(f"{Path(results, LEDGER)}: unreadable; delete it") from None


def mark_rebuilds(results: str | os.PathLike, found: list[tuple[str, str]], counts: dict) -> None:
    """Count one more rebuild for each damaged cell in counts (the ledger as read), and write
    the ledger."""
    if found:
        for path, _ in found:
            counts[path] = counts.get(path, 0) + 1
        Path(results).mkdir(parents=True, exist_ok=True)
        with atomic_path(Path(results, LEDGER)) as tmp:
            tmp.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n")


def rebuild_param(pattern: str, counts: dict):
    """Return a cell rule's param: its job's rebuild count, from its wildcards alone (pattern
    is the rule's output with {wildcards}), so that Snakemake's params trigger compares it."""
    return lambda w: counts.get(pattern.format(**dict(w.items())), 0)
