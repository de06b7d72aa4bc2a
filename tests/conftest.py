"""Shared fixtures: the repo root, a composed config, and a tiny sweep run once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(
    workdir: Path, *args: str, overrides: list[str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run snakemake on the repo's Snakefile in workdir; return the finished process."""
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), *args]
    if overrides is not None:
        cmd += ["--config", "overrides=" + repr(overrides).replace("'", '"')]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# Fixtures that run a real sweep: every test that takes one is slow (make test-fast leaves it out).
SWEEP_FIXTURES = {"tiny_sweep", "second_sweep", "slurm_sweep"}


# Costly fixtures made once per worker, and the xdist group of the tests that take them: under
# `--dist loadgroup` (make test) one worker makes each and runs its tests, instead of every
# worker making it. The SLURM run is compared with the tiny sweep, so it joins that group.
SHARED_FIXTURE_GROUPS = {
    "tiny_sweep": "tiny_sweep",
    "slurm_sweep": "tiny_sweep",
    "compiled": "cutlass_compiled",  # test_cutlass_accounting: five CUTLASS cells through nvcc
    "corpus_engines": "corpus_engines",  # the cited engine figures, composed
}


# Marked as each test is collected, before any pytest_collection_modifyitems: xdist's worker
# reads the groups in its own hook of that name. The groups need pytest < 9.2 (pyproject.toml):
# on 9.2 xdist's loadgroup drops them silently (pytest-xdist#1386), and each worker made the tiny
# sweep and the compiled cells itself.
def pytest_itemcollected(item):
    """Mark slow a test that takes a fixture running a real sweep, and put a test that takes a
    costly shared fixture in that fixture's xdist group (SHARED_FIXTURE_GROUPS)."""
    names = set(getattr(item, "fixturenames", ()))
    if SWEEP_FIXTURES & names:
        item.add_marker(pytest.mark.slow)
    group = next((SHARED_FIXTURE_GROUPS[n] for n in SHARED_FIXTURE_GROUPS if n in names), None)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> Path:
    """Return a work folder holding one finished tiny sweep (experiment=tiny)."""
    work = tmp_path_factory.mktemp("tiny")
    snakemake(work, "--cores", "2", overrides=["experiment=tiny"])
    return work


@pytest.fixture
def copy_of(tmp_path):
    """Return a function that copies a finished sweep folder (with .snakemake) to a new place."""

    def _copy(src: Path) -> Path:
        dst = tmp_path / "copy"
        shutil.copytree(src, dst, symlinks=True)
        return dst

    return _copy


@pytest.fixture(scope="session")
def corpus_engines():
    """Return the engine check of the default config's cited figures, composed from the shipped
    fit as a CPU composes it (no measurement), once per test process."""
    import pandas as pd

    from tilesweep import engine_figures
    from tilesweep.config import compose_settings

    empty = pd.DataFrame()
    return engine_figures.engine_table(compose_settings([]), empty, empty, empty, {})


def stub_bin(tmp_path: Path, **bodies: str) -> Path:
    """Return tmp_path/bin holding one executable /bin/sh script per keyword, its body the value
    (a `_` in the name is a `-`: nvidia_smi="echo gpu" writes nvidia-smi); put it first on PATH
    to stand in for a machine's own commands."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, body in bodies.items():
        script = stubs / name.replace("_", "-")
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return stubs
