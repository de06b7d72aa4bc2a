"""Clear what a killed Snakemake run leaves behind (locks, incomplete markers), so a plain rerun
resumes: no --unlock or --rerun-incomplete for the user to know."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path


def _ancestors() -> set[int]:
    """Return this process's pid and its ancestors' pids."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def other_snakemakes(workdir: Path) -> list[int]:
    """Return pids of other snakemake processes whose working directory is workdir."""
    found, mine, workdir = [], _ancestors(), Path(workdir).resolve()
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid in mine:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            cwd = (proc / "cwd").resolve()
        except OSError:
            continue
        if b"snakemake" in cmdline and cwd == workdir:
            found.append(pid)
    return found


def _marked_output(workdir: Path, marker: Path) -> Path | None:
    """Return the output an incomplete marker names, or None if the name does not decode."""
    try:
        return workdir / base64.b64decode(marker.name.replace("@", "/")).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def release_stale_state(workdir: Path) -> list[Path]:
    """When no other snakemake runs in workdir, remove its lock files and every output a killed
    job left marked incomplete (with the marker), so those jobs simply run again.

    Returns the lock files and outputs removed.
    """
    workdir = Path(workdir)
    state = workdir / ".snakemake"
    locks = [p for p in (state / "locks").glob("*") if p.is_file()]
    markers = [p for p in (state / "incomplete").rglob("*") if p.is_file()]
    if not (locks or markers) or not Path("/proc/self").exists() or other_snakemakes(workdir):
        return []
    removed = []
    for path in locks:
        path.unlink(missing_ok=True)
        removed.append(path)
    for marker in markers:
        output = _marked_output(workdir, marker)
        if output is not None and output.exists() and output.is_file():
            output.unlink()
            removed.append(output)
        marker.unlink(missing_ok=True)
    return removed
