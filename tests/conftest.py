"""Shared fixtures: the repo root, a composed config, and a tiny sweep run once per session."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilesweep import config

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


# The same composition, composed once per test process. Hydra's composition of conf/ (about 0.4 s
# of CPU) and the hardware catalog's parse (0.17 s) are most of every compose, and the tests
# compose the same overrides and read the same hardware files again and again. Both are pure
# functions of their arguments and the files under conf_dir: each is kept under its arguments and
# every file's (size, mtime, inode), and handed out as a deep copy, so an edited, added or removed
# file composes afresh and no caller sees another's changes. A failure is never kept: each
# refusal is composed, and said, every time. Subprocesses (snakemake, the CLI) compose as users do.
_KEPT: dict[tuple, object] = {}


def _files_signature(folder: Path) -> tuple | None:
    """Return every file under folder with its size, mtime and inode; None where one cannot be
    read (a dangling link: the composition, not the memo, names it)."""
    out = []
    for where, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            try:
                st = os.stat(os.path.join(where, name))
            except OSError:
                return None
            out.append((where, name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode))
    return tuple(out)


def _kept(function, key_of):
    """Return function kept per key_of(arguments) (its arguments and the folder whose files it
    reads) and those files' signature, handed out as a deep copy."""

    def once(*args):
        arguments, folder = key_of(*args)
        files = _files_signature(Path(folder))
        if files is None:
            return function(*args)
        key = (function.__name__, arguments, str(folder), files)
        if key not in _KEPT:
            _KEPT[key] = function(*args)
        return copy.deepcopy(_KEPT[key])

    once.__wrapped__ = function
    return once


config._compose_raw = _kept(
    config._compose_raw, lambda overrides, conf_dir: (tuple(map(str, overrides)), conf_dir)
)
config.load_catalog = _kept(config.load_catalog, lambda conf_dir: ((), Path(conf_dir) / "hardware"))


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
