"""Killing a real sweep at any moment loses nothing finished and leaves nothing half-written."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SNAKEMAKE, snakemake

TINY = ["experiment=tiny"]


def _start(work: Path) -> subprocess.Popen:
    """Start a tiny sweep in its own process group."""
    cmd = [
        SNAKEMAKE,
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--config",
        'overrides=["experiment=tiny"]',
    ]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=work
    )


def _wait_for(work: Path, pattern: str, before: frozenset = frozenset(), timeout: float = 240):
    """Return the files matching pattern once one exists that was not among `before`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(work.glob(pattern))
        if set(found) - before:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no new {pattern} after {timeout} s")


def _marker_name(rel: Path) -> str:
    """Return the name Snakemake gives the incomplete marker of an output."""
    return base64.b64encode(str(rel).encode()).decode().replace("/", "@")


def _assert_whole(results: Path) -> None:
    """Assert every result file parses (no half-written output)."""
    for path in results.rglob("*.json"):
        json.loads(path.read_text())
    for path in results.rglob("*.csv"):
        pd.read_csv(path)


def _interrupt(work: Path, sig: int, pattern: str) -> dict[Path, int]:
    """Start the tiny sweep (resuming what is there), send sig to it once a new file matches
    pattern, and return the result files it left finished, with their mtimes, after checking
    that none is half-written."""
    before = frozenset(work.glob(pattern))
    proc = _start(work)
    _wait_for(work, pattern, before)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=120)
    # Finished: written, and not marked incomplete by Snakemake when the kill came.
    marked = {p.name for p in (work / ".snakemake" / "incomplete").rglob("*") if p.is_file()}
    finished = [
        p
        for p in (work / "results").rglob("*.json")
        if _marker_name(p.relative_to(work)) not in marked
    ]
    assert finished
    if sig == signal.SIGINT:  # snakemake stops its jobs; make sure none lingers
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    _assert_whole(work / "results")
    return {p: p.stat().st_mtime_ns for p in finished}


@pytest.mark.slow
def test_a_killed_then_interrupted_sweep_resumes_keeping_finished_cells(tmp_path):
    # kill -9 once the first launch check is written, then Ctrl-C the resumed run once it has
    # written a table of its own: neither rebuilds what the one before finished.
    killed = _interrupt(tmp_path, signal.SIGKILL, "results/launch/triton/*/*.json")
    interrupted = _interrupt(tmp_path, signal.SIGINT, "results/*/*.csv")
    for path, mtime in killed.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rebuilt by the resumed run"
    # A plain rerun: the results folder's lock died with the killed runs (sweep_lock.py), and
    # the profile next to the Snakefile redoes what was cut short.
    snakemake(tmp_path, "--cores", "2", overrides=TINY)
    for path, mtime in {**killed, **interrupted}.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rebuilt"
    assert (tmp_path / "results" / "report.md").exists()
    _assert_whole(tmp_path / "results")
    assert "Nothing to be done" in snakemake(tmp_path, "-n", overrides=TINY).stdout
