"""One sweep per results folder, by a POSIX lock (lockf: honoured across hosts on NFS) that the
kernel drops however the process ends: Snakemake's own lock outlives a SIGKILL and guards the
working folder (the profiles set its `nolock`)."""

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from tilesweep.errors import ConfigError

NAME = ".sweep.lock"
_held: dict[str, int] = {}  # results folder -> the open descriptor that holds its lock


def hold(results: str | os.PathLike) -> None:
    """Take the results folder's lock for this process, or raise ConfigError."""
    folder = Path(results)
    key = str(folder.resolve())
    if key in _held:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"results_dir={folder}: cannot write the sweep's lock there ({exc.strerror}); "
            "give a results_dir this user can write"
        ) from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        busy = _busy(folder, fd)
        os.close(fd)
        raise busy from None
    os.ftruncate(fd, 0)
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    os.pwrite(fd, json.dumps(record).encode(), 0)
    _held[key] = fd


def probe(results: str | os.PathLike) -> None:
    """Raise ConfigError as hold() does when the lock is held; write nothing (a dry run)."""
    path = Path(results) / NAME
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:  # no lock file: no run has held this folder (or it cannot be read)
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise _busy(Path(results), fd) from None
    finally:
        os.close(fd)  # closing drops a lock this process took: nothing is held, nothing written


def _busy(folder: Path, fd: int) -> ConfigError:
    """Return the one-line refusal naming who holds the folder's lock, as its holder wrote it."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(record["since"]))
        holder = f"pid {record['pid']} on {record['host']}, since {since}"
    except (ValueError, KeyError, TypeError):
        holder = "its holder wrote nothing readable"
    return ConfigError(
        f"{folder}: another sweep is running on this results folder ({holder}); wait for it to "
        "end, or give this one another results_dir"
    )
