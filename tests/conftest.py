"""Shared fixtures: the repo root, a composed config, and a tiny sweep run once per session."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

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
# every file's bytes (a digest), and handed out as a deep copy, so an edited, added or removed
# file composes afresh and no caller sees another's changes. A failure is never kept: each
# refusal is composed, and said, every time. Subprocesses (snakemake, the CLI) compose as users do.
_KEPT: dict[tuple, object] = {}


def _files_signature(folder: Path) -> tuple | None:
    """Return every file under folder with a digest of its bytes (an edit that keeps the size and
    the mtime counts too); None where one is not a plain readable file (a dangling link, a pipe:
    the composition, not the memo, names it)."""
    out = []
    for where, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(where, name)
            try:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    return None
                with open(path, "rb") as handle:
                    digest = hashlib.blake2b(handle.read(), digest_size=16).digest()
            except OSError:
                return None
            out.append((where, name, digest))
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


# Hydra parses each YAML file of every composition afresh, with PyYAML in pure Python (about a
# quarter of a compose's CPU), and the tests compose the same files hundreds of times with other
# overrides. A parse is a pure function of the text and the loader: OmegaConf's loader's parse of
# a text is kept under that text and handed out as a deep copy. Hydra still opens and reads every
# file, merges and checks each composition; a file whose text fails to parse fails every time.
_PARSED: dict[tuple, object] = {}
_yaml_load = yaml.load


def _parsed_once(stream, Loader):
    """Return yaml.load(stream, Loader), kept per text where Loader is OmegaConf's."""
    if getattr(Loader, "__module__", "") != "omegaconf._utils":
        return _yaml_load(stream, Loader)
    text = stream.read() if hasattr(stream, "read") else stream
    key = (Loader.__qualname__, text)
    if key not in _PARSED:
        again = text  # a file is parsed as a file, so an error names it as Hydra's would
        if hasattr(stream, "read"):
            again = io.StringIO(text) if isinstance(text, str) else io.BytesIO(text)
            if hasattr(stream, "name"):
                again.name = stream.name
        _PARSED[key] = _yaml_load(again, Loader)
    return copy.deepcopy(_PARSED[key])


yaml.load = _parsed_once


# Fixtures that run a real sweep: every test that takes one is slow (make test-fast leaves it out).
SWEEP_FIXTURES = {"tiny_sweep", "resumed_sweep", "second_sweep", "slurm_sweep"}


# Costly fixtures made once per worker, and the xdist group of the tests that take them: under
# `--dist loadgroup` (make test) one worker makes each and runs its tests, instead of every
# worker making it. The SLURM run is compared with the tiny sweep, so it joins that group.
SHARED_FIXTURE_GROUPS = {
    "tiny_sweep": "tiny_sweep",
    "resumed_sweep": "tiny_sweep",
    "slurm_sweep": "tiny_sweep",
    "compiled": "cutlass_compiled",  # test_cutlass_accounting: five CUTLASS cells through nvcc
    "corpus_engines": "corpus_engines",  # the cited engine figures, composed
    "sglang_runs": "sglang_runs",  # test_sglang_kernel: SGLang's kernel under the interpreter
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


TINY = ["experiment=tiny"]


def _ctrl_c_as_a_terminal_gives_it() -> None:
    """Let SIGINT stop the sweep as Ctrl-C in a terminal does, even where pytest itself was
    started as a background job (a shell without job control starts those ignoring SIGINT, and
    a process inherits that: the sweep would then run on through the Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(work: Path) -> subprocess.Popen:
    """Start a tiny sweep in its own process group."""
    cmd = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", "2"]
    cmd += ["--config", 'overrides=["experiment=tiny"]']
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=work,
        preexec_fn=_ctrl_c_as_a_terminal_gives_it,
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


# Snakemake's log of a run: each job's block names its outputs (`output: a, b (update)`) and then
# its `jobid: N`; `Finished jobid: N (Rule: r)` (Snakemake 9; `Finished job N.` before) comes once
# its outputs are checked and recorded. A job the signal cut short never gets that line.
_OUTPUTS = re.compile(r"^\s+output: (.*)$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished job(?:id:)? (\d+)\b")


def _finished_outputs(log: str) -> set[str]:
    """Return the outputs (paths as the rules name them) of every job that a Snakemake run's log
    records as finished."""
    outputs, by_job, done = [], {}, set()
    for line in log.splitlines():
        if not line[:1].isspace():  # a new block: an error's block names its jobid first
            outputs = []
        if found := _OUTPUTS.match(line):
            outputs = [re.sub(r" \(.*\)$", "", f) for f in found[1].split(", ")]
        elif found := _JOBID.match(line):
            by_job[found[1]], outputs = outputs, []
        elif found := _FINISHED.match(line):
            done.add(found[1])
    return {f for job in done for f in by_job.get(job, ())}


def assert_whole(results: Path) -> None:
    """Assert every result file parses (no half-written output)."""
    import pandas as pd

    for path in results.rglob("*.json"):
        json.loads(path.read_text())
    for path in results.rglob("*.csv"):
        pd.read_csv(path)


def _interrupt(work: Path, sig: int, pattern: str) -> dict[Path, int]:
    """Start the tiny sweep (resuming what is there), send sig to it once a new file matches
    pattern, and return the result files its finished jobs wrote, with their mtimes, after
    checking that none is half-written."""
    before = frozenset(work.glob(pattern))
    logs = frozenset(work.glob(".snakemake/log/*.snakemake.log"))
    proc = _start(work)
    try:
        _wait_for(work, pattern, before)
        os.killpg(proc.pid, sig)
        proc.wait(timeout=300)  # Ctrl-C: snakemake first stops the jobs it runs
    finally:
        if proc.poll() is None:  # it hung: end it, so that the sweep can still be finished
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Finished: an output of a job this run's log records as finished before the signal. No
    # incomplete marker is not enough: when a job the Ctrl-C stopped is handled as failed,
    # Snakemake drops its markers and puts back the update() outputs it had saved (the verdict's,
    # newly written), and the plain rerun rightly redoes that job.
    (log,) = set(work.glob(".snakemake/log/*.snakemake.log")) - logs
    done = _finished_outputs(log.read_text())
    # (The Ctrl-C may come during the resumed run's first job: then it finished none.)
    finished = [p for p in (work / "results").rglob("*.json") if str(p.relative_to(work)) in done]
    if sig == signal.SIGINT:  # snakemake stops its jobs; make sure none lingers
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert_whole(work / "results")
    return {p: p.stat().st_mtime_ns for p in finished}


class ResumedSweep(NamedTuple):
    """The session's tiny sweep and what its stopped runs had finished."""

    work: Path  # the work folder: results/ and Snakemake's .snakemake/
    finished: dict[Path, int]  # each file a stopped run finished, with its mtime then
    after: dict[Path, int]  # the same files' mtimes once the sweep was done
    failure: BaseException | None  # what went wrong while stopping and resuming, if anything


@pytest.fixture(scope="session")
def resumed_sweep(tmp_path_factory) -> ResumedSweep:
    """Return the session's tiny sweep (experiment=tiny), run to the end as an impatient user
    might: killed with kill -9 once the first launch check is written, resumed and stopped with
    Ctrl-C once it has written a table of its own, then rerun plainly to the end.
    test_interrupt holds it to losing nothing finished; the rest read it as a finished sweep
    (one sweep serves both: a separate interrupted one cost a whole tiny sweep more)."""
    work = tmp_path_factory.mktemp("tiny")
    finished, failure = {}, None
    try:
        killed = _interrupt(work, signal.SIGKILL, "results/launch/triton/*/*.json")
        interrupted = _interrupt(work, signal.SIGINT, "results/*/*.csv")
        finished = {**interrupted, **killed}  # a file the killed run finished: its mtime then
    except Exception as exc:  # noqa: BLE001 - any of it is test_interrupt's failure
        failure = exc  # raised there; the rest still get the sweep the plain rerun finishes
    # A plain rerun: the results folder's lock died with the killed runs (sweep_lock.py), and
    # the profile next to the Snakefile redoes what was cut short.
    snakemake(work, "--cores", "2", overrides=TINY)
    after = {p: p.stat().st_mtime_ns for p in finished}
    return ResumedSweep(work, finished, after, failure)


@pytest.fixture(scope="session")
def tiny_sweep(resumed_sweep) -> Path:
    """Return a work folder holding one finished tiny sweep (experiment=tiny): the resumed one."""
    return resumed_sweep.work


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


def fast_sample(cases: list, every: int = 3) -> list:
    """Return a parametrize list of cases (a tuple of arguments, or one argument) where every
    `every`-th case, the first included, runs in the fast tier and the others are marked slow:
    a long walk of refusals, each a Hydra composition of its own, is sampled by make test-fast
    and run whole by make test (pyproject.toml's slow marker)."""
    return [
        pytest.param(
            *(case if isinstance(case, tuple) else (case,)),
            marks=() if i % every == 0 else pytest.mark.slow,
        )
        for i, case in enumerate(cases)
    ]
