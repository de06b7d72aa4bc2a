"""Per-cell outputs with a `<file>.sum` record (bytes, SHA-256, columns, rows), checked when read
and before the DAG is built: Snakemake reruns a job for a missing or older output, not one emptied
or cut short after its job ended."""

import hashlib
import io
import json
import os
from pathlib import Path

import pandas as pd

from tilesweep.errors import CellError, ConfigError
from tilesweep.io import atomic_path

SUFFIX = ".sum"
# Per results folder: how many times each cell was found damaged and rebuilt (a job param).
LEDGER = ".rebuilds.json"


def summary_path(path: str | os.PathLike) -> Path:
    """Return where a cell's record of what it holds lies."""
    return Path(f"{path}{SUFFIX}")


def _write(
    path: str | os.PathLike,
    data: bytes,
    columns: list[str],
    rows: int,
    inputs: str | None = None,
    files: dict[str, str] | None = None,
) -> None:
    """Write a cell's bytes, then its record, each atomically (a kill between them: rebuilt)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    record = {
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "columns": columns,
        "rows": rows,
    }
    if inputs is not None:
        record["inputs"] = inputs
    if files:
        record["files"] = files
    with atomic_path(summary_path(path)) as tmp:
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")


def write_cell_table(
    path: str | os.PathLike, frame: pd.DataFrame, inputs: str | None = None
) -> None:
    """Write one cell's table as CSV (a header even with no row), with its record."""
    data = frame.to_csv(index=False).encode()
    _write(path, data, [str(c) for c in frame.columns], len(frame), inputs)


def write_cell_parquet(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """Write one joined table as Parquet, with its record (a later step, or a user, reads it)."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    _write(path, buf.getvalue(), [str(c) for c in frame.columns], len(frame))


def write_cell_bytes(path: str | os.PathLike, data: bytes, inputs: str | None = None) -> None:
    """Write one output of opaque bytes, with its record."""
    _write(path, data, [], 1, inputs)


def read_cell_bytes(path: str | os.PathLike) -> bytes:
    """Return one output's bytes, checked against its record; else raise CellError naming it."""
    return _checked_bytes(path)[0]


def write_cell_json(
    path: str | os.PathLike, record: dict, inputs: str | None = None, files: list[str] = ()
) -> None:
    """Write one cell's JSON with its record (and SHA-256 of `files` beside it)."""
    data = (json.dumps(record, indent=2, sort_keys=True, default=str) + "\n").encode()
    folder = Path(path).parent
    sums = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in files}
    _write(path, data, sorted(str(k) for k in record), 1, inputs, sums)


def damage(path: str | os.PathLike) -> str | None:
    """Return what is wrong with a cell, None when nothing is."""
    path = Path(path)
    if not path.exists():
        return "missing"
    if not path.is_file():  # a read of a pipe or a device would block, or never end
        return "not a plain file (a folder, a pipe or a device)"
    if summary_path(path).exists() and not summary_path(path).is_file():
        return f"its {SUFFIX} record is unreadable (not a plain file)"
    try:
        record = json.loads(summary_path(path).read_text())
        size, digest = int(record["bytes"]), record["sha256"]
    except FileNotFoundError:
        return f"no {SUFFIX} record beside it (written by an older tilesweep, or cut short)"
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return f"its {SUFFIX} record is unreadable"  # (1e400 bytes: inf, no integer)
    have = path.stat().st_size
    if have != size:
        return f"{have} bytes where its job wrote {size}"
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        return "its content differs from what its job wrote (SHA-256)"
    return _companion_damage(path, record.get("files"))


def _companion_damage(path: Path, files: object) -> str | None:
    """Return what is wrong with the files a cell's job wrote beside it (None when nothing)."""
    if not files:
        return None
    if not isinstance(files, dict):
        return f"its {SUFFIX} record is unreadable"
    for name, digest in sorted(files.items()):
        beside = path.parent / str(name)
        if not beside.is_file():
            return f"{name} beside it is missing"
        if hashlib.sha256(beside.read_bytes()).hexdigest() != digest:
            return f"{name} beside it differs from what its job wrote (SHA-256)"
    return None


def _checked_bytes(path: str | os.PathLike) -> tuple[bytes, dict | None]:
    """Return a cell's bytes and record, or raise CellError naming the fault."""
    if Path(path).exists() and not Path(path).is_file():
        raise CellError(f"{path}: not a plain file (a folder, a pipe or a device)")
    if Path(path).exists() and not summary_path(path).exists():
        return Path(path).read_bytes(), None
    why = damage(path)
    if why is not None:
        raise CellError(f"{path}: {why}; the next run reruns its job")
    return Path(path).read_bytes(), json.loads(summary_path(path).read_text())


def read_cell_table(path: str | os.PathLike) -> pd.DataFrame:
    """Return one cell's table checked against its record; else raise CellError naming the file."""
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


def content_key(paths: list[str] | dict[str, list[str]]) -> str:
    """Return a key of the files' contents (record SHA-256, else the file's own); `paths` may be
    a step's named inputs (every file of every name)."""
    if isinstance(paths, dict):
        paths = [p for named in paths.values() for p in named]
    digest = hashlib.sha256()
    for path in sorted(os.path.normpath(p) for p in paths):
        try:
            sha = json.loads(summary_path(path).read_text())["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            try:
                sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                sha = "missing"
        digest.update(f"{path}\0{sha}\n".encode())
    return digest.hexdigest()


def stale_join(output: str | os.PathLike, paths: list[str]) -> tuple[str, str] | None:
    """Return (output, why) when a join's recorded inputs key differs from now's."""
    if damage(output) is not None:
        return None
    try:
        joined = json.loads(summary_path(output).read_text()).get("inputs")
    except (OSError, ValueError, AttributeError):
        return None
    if joined is None or joined == content_key(paths):
        return None
    return str(output), "joined from other contents than its inputs hold now"


def rebuild_lines(found: list[tuple[str, str]], named: int = 5) -> list[str]:
    """Return lines naming every output to rebuild, past `named` grouped by fault."""
    lines = [f"{path}: {why}; its job reruns" for path, why in found[:named]]
    rest: dict[str, list[str]] = {}
    for path, why in found[named:]:
        rest.setdefault(why, []).append(path)
    for why, paths in rest.items():
        lines.append(f"{len(paths)} more rerun, each {why}: {', '.join(paths)}")
    return lines


def damaged(paths: list[str], joined_exist: bool) -> list[tuple[str, str]]:
    """Return (path, fault) of each planned cell to rebuild."""
    found = [(path, damage(path)) for path in paths]
    return [(path, why) for path, why in found if why and (why != "missing" or joined_exist)]


def rebuilds(results: str | os.PathLike) -> dict[str, int]:
    """Return the results folder's rebuild counts by cell path ({} when none)."""
    ledger = Path(results, LEDGER)
    if ledger.exists() and not ledger.is_file():  # a pipe would block the plan's read
        raise ConfigError(f"{ledger}: not a plain file (a folder, a pipe or a device); delete it")
    try:
        return {str(k): int(v) for k, v in json.loads(Path(results, LEDGER).read_text()).items()}
    except FileNotFoundError:
        return {}
    except (ValueError, AttributeError, TypeError, OverflowError, RecursionError):
        raise ConfigError(f"{Path(results, LEDGER)}: unreadable; delete it") from None


def mark_rebuilds(
    results: str | os.PathLike, found: list[tuple[str, str]], counts: dict, write: bool = True
) -> None:
    """Count one more rebuild per damaged cell in counts; write the ledger unless `write` is off."""
    for path, _ in found:
        counts[path] = counts.get(path, 0) + 1
    if found and write:
        Path(results).mkdir(parents=True, exist_ok=True)
        with atomic_path(Path(results, LEDGER)) as tmp:
            tmp.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n")


def rebuilds_of(counts: dict, paths: list[str]) -> dict[str, int]:
    """Return the rebuild counts of these paths alone."""
    keep = {os.path.normpath(p) for p in paths}
    return {k: v for k, v in counts.items() if os.path.normpath(k) in keep}


def rebuild_param(pattern: str, counts: dict):
    """Return a cell rule's param: its job's rebuild count, from its wildcards."""
    return lambda w: counts.get(pattern.format(**dict(w.items())), 0)
