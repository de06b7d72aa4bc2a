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


def _wait_for(work: Path, pattern: str, timeout: float = 240) -> list[Path]:
    """Return the files matching pattern once at least one exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(work.glob(pattern))
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {pattern} after {timeout} s")


def _marker_name(rel: Path) -> str:
    """Return the name Snakemake gives the incomplete marker of an output."""
    return base64.b64encode(str(rel).encode()).decode().replace("/", "@")


def _assert_whole(results: Path) -> None:
    """Assert every result file parses (no half-written output)."""
    for path in results.rglob("*.json"):
        json.loads(path.read_text())
    for path in results.rglob("*.csv"):
        pd.read_csv(path)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_sweep_resumes_keeping_finished_cells(tmp_path, sig):
    proc = _start(tmp_path)
    _wait_for(tmp_path, "results/launch/triton/*/*.json")
    os.killpg(proc.pid, sig)
    proc.wait(timeout=120)
    # Finished: written, and not marked incomplete by Snakemake when the kill came.
    marked = {p.name for p in (tmp_path / ".snakemake" / "incomplete").rglob("*") if p.is_file()}
    finished = [
        p
        for p in (tmp_path / "results").rglob("*.json")
        if _marker_name(p.relative_to(tmp_path)) not in marked
    ]
    assert finished
    kept = {p: p.stat().st_mtime_ns for p in finished}
    if sig == signal.SIGINT:  # snakemake stops its jobs; make sure none lingers
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    _assert_whole(tmp_path / "results")
    # A plain rerun, after a SIGKILL too: the results folder's lock died with the killed run
    # (sweep_lock.py), and the profile next to the Snakefile redoes what was cut short.
    snakemake(tmp_path, "--cores", "2", overrides=TINY)
    for path, mtime in kept.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rebuilt"
    assert (tmp_path / "results" / "report.md").exists()
    _assert_whole(tmp_path / "results")
    assert "Nothing to be done" in snakemake(tmp_path, "-n", overrides=TINY).stdout
