"""Atomic writes: a file is either absent or whole, never half-written."""

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from tilesweep import package_data
from tilesweep.errors import CellError, ConfigError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are for everyone who may read
    try:
        yield Path(tmp)
        if path.is_dir() and not path.is_symlink():
            # A folder put where this file goes (an attack, a slip): the file is this job's
            # output, so the folder goes, or every rerun would fail to write it.
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: str | os.PathLike) -> object:
    """Return the parsed JSON in path, or raise CellError naming the file."""
    try:
        return json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CellError(f"{path}: not readable JSON ({exc})") from None


def write_table(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """Write a DataFrame as CSV (or Parquet for a .parquet path), atomically."""
    with atomic_path(path) as tmp:
        if str(path).endswith(".parquet"):
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write text, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def concat_tables(paths: list[str]) -> pd.DataFrame:
    """Return the concatenation of joined CSV tables; an empty or non-CSV one raises CellError."""
    frames = []
    for p in paths:
        try:
            frames.append(pd.read_csv(p))
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            why = "empty, not even a header" if isinstance(exc, pd.errors.EmptyDataError) else exc
            msg = f"{p}: not a readable table ({why}); rerun the step that writes it"
            raise CellError(msg) from None
        except OSError as exc:  # a folder where the table goes, a missing or unreadable file
            why = "a folder, not a table" if Path(p).is_dir() else exc.strerror or exc
            msg = f"{p}: not a readable table ({why}); rerun the step that writes it"
            raise CellError(msg) from None
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


PROJECT_ROOT = Path(__file__).resolve().parents[2]  # src/tilesweep/io.py -> the checkout
# The checkout's tracked folders: an --out inside one would overwrite kept files (docs/examples).
TRACKED_FOLDERS = package_data.column_lists("tilesweep.io")["TRACKED_FOLDERS"]
# The only tracked folder --force may write into: the kept examples (a rerendered example).
FORCE_FOLDER = PROJECT_ROOT / "docs" / "examples"


def _tracked_refusal(resolved: Path, flag: str, shown: str, force: bool, what: str) -> None:
    """Raise ConfigError where an output lies in the checkout's tracked files."""
    tracked = [PROJECT_ROOT / name for name in TRACKED_FOLDERS]
    inside = resolved == PROJECT_ROOT or any(resolved.is_relative_to(p) for p in tracked)
    if not inside and not _root_file(resolved):
        return
    if not force:
        raise ConfigError(
            f"{flag}={shown}: inside the checkout's tracked files ({resolved}); name another "
            f"{what}, or pass --force to overwrite a kept example (docs/examples)"
        )
    depth = 1 if what == "folder" else 2  # an example's folder, or a file inside one
    if (
        not resolved.is_relative_to(FORCE_FOLDER)
        or len(resolved.relative_to(FORCE_FOLDER).parts) < depth
    ):
        raise ConfigError(
            f"{flag}={shown}: inside the project's own tracked files ({resolved}), not a kept "
            "example; --force writes only under docs/examples/<example>; name another "
            f"{what}"
        )


def _root_file(resolved: Path) -> bool:
    """Return whether resolved is one of the checkout's own files at its root (README.md,
    Snakefile): tracked, as git says, or, where git cannot say, any file already there."""
    try:
        if resolved.parent != PROJECT_ROOT or not resolved.is_file():
            return False
    except OSError:  # a name too long for the file system: not a file there (named later)
        return False
    try:
        listed = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "ls-files", "--error-unmatch", "--", resolved.name],
            capture_output=True,
        )
    except OSError:  # no git here
        return True
    return listed.returncode == 0 or not (PROJECT_ROOT / ".git").exists()


def _shown(path: str, flag: str, name: str) -> str:
    """Return a path as an error message shows it (a long one cut, its length named); raise
    ConfigError for an empty one, asking to name one (`name`)."""
    if not str(path).strip():
        raise ConfigError(f"{flag}='': empty; name {name}")
    return path if len(path) <= 120 else f"{path[:60]}...({len(path)} chars)"


def check_out_folder(
    out: str, files: tuple[str, ...] = (), force: bool = False, flag: str = "--out"
) -> Path:
    """Return the output folder (`flag`: as the user gave it), made and writable, or ConfigError."""
    shown = _shown(str(out), flag, "a folder")
    folder = Path(out)
    resolved = folder.resolve()
    _tracked_refusal(resolved, flag, shown, force, "folder")
    try:
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{flag}={shown}: a file, not a folder")
        for name in files:
            if (folder / name).is_dir():
                raise ConfigError(
                    f"{flag}={shown}: {name} there is a folder, where a file goes; move it away"
                )
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".tilesweep-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{flag}={shown}: cannot write there ({exc.strerror})") from None
    return folder


def check_out_file(out: str, force: bool = False, flag: str = "--out") -> Path:
    """Return an output file's path, or raise ConfigError in one line before anything is written."""
    shown = _shown(str(out), flag, "a file")
    path = Path(out)
    try:
        resolved = path.resolve()
        if path.is_dir():
            raise ConfigError(f"{flag}={shown}: a folder, where a file goes")
        if not path.parent.is_dir():
            raise ConfigError(f"{flag}={shown}: its folder {path.parent} does not exist")
    except OSError as exc:
        raise ConfigError(f"{flag}={shown}: not a usable path ({exc.strerror})") from None
    _tracked_refusal(resolved, flag, shown, force, "file")
    return path


def check_results_dir(path: str) -> Path:
    """Return results_dir as a path, or raise ConfigError in one line."""
    shown = _shown(str(path), "results_dir", "a folder (results by default)")
    folder = Path(path)
    try:
        resolved = folder.resolve()
        tracked = [PROJECT_ROOT / name for name in TRACKED_FOLDERS]
        if resolved == resolved.parent or resolved in (Path.home(), PROJECT_ROOT.parent):
            raise ConfigError(
                f"results_dir={shown}: {resolved} is a file system's root or a home or parent "
                "folder, not a sweep's own; name a folder of its own (results by default)"
            )
        if resolved == PROJECT_ROOT or any(resolved.is_relative_to(p) for p in tracked):
            raise ConfigError(
                f"results_dir={shown}: the checkout or one of its tracked folders ({resolved}); "
                "a sweep writes there: name another folder (results by default)"
            )
        for above in [resolved, *resolved.parents]:
            if above.exists():
                if not above.is_dir():
                    what = "a file" if above == resolved else f"below the file {above}"
                    raise ConfigError(f"results_dir={shown}: {what}, not a folder")
                break
    except OSError as exc:  # a name too long for the file system, a loop of links
        raise ConfigError(f"results_dir={shown}: not a usable folder ({exc.strerror})") from None
    return folder


def results_at(path: str | Path, folders: tuple[str, ...], what: str, listed: str = "") -> Path:
    """Return the results folder at path, or path/results, that holds any of `folders`; else raise
    ConfigError: no `what` there (`listed`: the folders named)."""
    path = Path(path)
    for candidate in (path, path / "results"):
        if any((candidate / name).is_dir() for name in folders):
            return candidate
    raise ConfigError(
        f"{path}: no {what} here or in results/{listed}; give a sweep's results folder"
    )


def project_path(path: str) -> Path:
    """Return a config path, a relative one from the checkout."""
    given = Path(path)
    return given if given.is_absolute() else PROJECT_ROOT / given
