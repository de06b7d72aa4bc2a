"""The tiny grid run through a real single-node SLURM cluster equals the same grid run locally.

The fixture starts the cluster with profiles/slurm/local-cluster.sh and always stops it. It
installs nothing: `make bootstrap` installs Debian's slurm and munge packages (as root), and the
test skips, naming them, where they are missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SNAKEMAKE, snakemake

from tilesweep.cells import LEDGER

pytestmark = pytest.mark.slow

CLUSTER = ROOT / "profiles" / "slurm" / "local-cluster.sh"
TOOLS = ("munge", "munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
LOCK = Path(tempfile.gettempdir()) / "tilesweep-slurm-test.lock"
RUN_TIMEOUT_S = 420

# Columns that identify a row of each table; the rest are timings and measured numbers.
KEYS = {
    "decode": ["runner", "kernel", "dtype", "op", "n", "k", "routing", "tokens_per_expert"],
    "collective": ["layout", "backend", "world", "collective", "group", "bytes", "purpose"],
    "verdict": ["model", "hardware", "layout", "tp", "pp", "ep", "batch", "source"],
    "check": ["model", "layout", "tp", "pp", "ep", "batch", "held_out"],
}


def _free_port_pair() -> int:
    """Return a port p such that p and p + 1 are both free (slurmctld and slurmd)."""
    for port in range(6817, 7817, 2):
        with contextlib.ExitStack() as stack:
            try:
                for p in (port, port + 1):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("", p))
            except OSError:
                continue
            return port
    pytest.skip("no two consecutive free ports in 6817-7817 for slurmctld and slurmd")


def _missing_tools() -> list[str]:
    """Return the cluster tools not on PATH."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _require_installed() -> None:
    """Skip the test when the cluster tools are missing: the bootstrap installs them."""
    if _missing_tools():
        pytest.skip(
            f"SLURM tools missing ({', '.join(_missing_tools())}): `make bootstrap` installs "
            f"them as root on Debian, or run `{CLUSTER.relative_to(ROOT)} install`"
        )


@contextlib.contextmanager
def _exclusive(timeout_s: float = 600):
    """Hold a machine-wide lock: two test sessions cannot share /run/munge and /run/slurm."""
    with open(LOCK, "w") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.skip(f"another test session held {LOCK} for {timeout_s:.0f} s")
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def slurm_env():
    """Start a single-node SLURM cluster; yield the environment to submit to it; stop it."""
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install '.[dev]'")
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("a local SLURM cluster needs root (munged and slurmd)")
    _require_installed()
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("/etc/slurm/slurm.conf exists: this machine belongs to a real cluster")
    with _exclusive():
        if os.path.lexists("/run/slurm/conf"):
            pytest.skip("/run/slurm/conf exists: another slurmd runs on this machine")
        cpus = os.cpu_count() or 1
        folder = Path(tempfile.mkdtemp(prefix="tilesweep-slurm-"))
        folder.chmod(0o755)  # munged, as the munge user, reads its key below this folder
        env = {
            **os.environ,
            "TILESWEEP_SLURM_DIR": str(folder),
            "TILESWEEP_SLURM_PORT": str(_free_port_pair()),
            # Partition names other than the profile's defaults: the override must reach sbatch.
            "TILESWEEP_SLURM_CPU_PARTITION": "tsbuild",
            "TILESWEEP_SLURM_GPU_PARTITION": "tsgpu",
            "TILESWEEP_SLURM_NODE_GPUS": str(min(cpus, 2)),
            "SLURM_CONF": str(folder / "slurm.conf"),
            "PYTHONUNBUFFERED": "1",
        }
        try:
            start = subprocess.run([CLUSTER, "start"], capture_output=True, text=True, env=env)
            assert start.returncode == 0, f"cluster did not start:\n{start.stdout}{start.stderr}"
            yield env
        finally:
            subprocess.run([CLUSTER, "stop"], capture_output=True, text=True, env=env)
            shutil.rmtree(folder, ignore_errors=True)


def _slurm_command(work: Path) -> list[str]:
    """Return the command that runs the tiny grid as a user would, plus this cluster's settings."""
    return [
        SNAKEMAKE,
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--executor",
        "slurm",
        "--profile",
        str(ROOT / "profiles" / "slurm"),
        "--cores",
        str(os.cpu_count() or 1),  # no job may ask for more CPUs than the one node has
        "--slurm-status-command",
        "squeue",  # no accounting database, so no sacct
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--config",
        'overrides=["experiment=tiny"]',
        # This test cluster's "GPU" node is this CPU machine (fake gres): plan what it can run,
        # as the local run it is compared with does (the profile's device.yaml names h200x8).
        "device=cpu",
    ]


def _table(work: Path, name: str) -> pd.DataFrame:
    """Return one aggregate table read as text, so that cells compare exactly."""
    return pd.read_csv(work / "results" / "tables" / f"{name}.csv", dtype=str).fillna("")


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """Return the sorted rows of the given columns."""
    return sorted(frame[columns].itertuples(index=False, name=None))


def _result_files(work: Path) -> set[str]:
    """Return the result files of a run, apart from logs and the rebuild ledger: the local run
    (conftest's resumed sweep) writes the ledger only where its kill happened to cut a cell short,
    which depends on timing, so its presence says nothing of what SLURM wrote."""
    results = work / "results"
    return {
        str(p.relative_to(results))
        for p in results.rglob("*")
        if p.is_file() and p.parts[len(results.parts)] != "logs" and p.name != LEDGER
    }


@pytest.fixture(scope="module")
def slurm_sweep(slurm_env, tmp_path_factory, request) -> Path:
    """Return a work folder holding the tiny grid as run through SLURM."""
    work = tmp_path_factory.mktemp("slurm-sweep")
    log = work / "snakemake.out"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            _slurm_command(work), stdout=out, stderr=subprocess.STDOUT, env=slurm_env, cwd=work
        )
        try:
            request.getfixturevalue("tiny_sweep")  # the local run, meanwhile, if not done yet
            returncode = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    if returncode != 0:
        why = f"took over {RUN_TIMEOUT_S} s" if returncode is None else f"failed ({returncode})"
        logs = sorted((work / ".snakemake" / "slurm_logs").rglob("*.log"))
        tails = "".join(f"\n--- {p}\n{p.read_text()[-2000:]}" for p in logs[-3:])
        pytest.fail(f"SLURM run {why}:\n{log.read_text()[-6000:]}{tails}")
    # What each job asked for, while SLURM still lists finished jobs (MinJobAge).
    fields = "JobID:12,Partition:30,tres-per-job:30,State:14,Comment:300"
    queue = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--Format", fields],
        capture_output=True,
        text=True,
        env=slurm_env,
        check=True,
    )
    (work / "squeue.txt").write_text(queue.stdout)
    return work


def test_slurm_runs_every_job_through_sbatch(slurm_sweep):
    """The run submitted SLURM jobs, batched the builds into a group job and finished."""
    log = max((slurm_sweep / ".snakemake" / "log").glob("*.snakemake.log")).read_text()
    assert "has been submitted with SLURM jobid" in log
    assert "Group job cpu_batch" in log
    assert "Finished jobid: 0 (Rule: all)" in log


def test_slurm_jobs_ask_for_the_profiles_partitions_and_gpus(slurm_sweep, slurm_env):
    """CPU jobs go to the CPU partition without GPUs; GPU benchmarks get one GPU or the node's."""
    node_gpus = slurm_env["TILESWEEP_SLURM_NODE_GPUS"]
    want = {
        "cpu_batch": ("tsbuild", "N/A"),
        "tables": ("tsbuild", "N/A"),
        "verdict": ("tsbuild", "N/A"),
        "check_steps": ("tsbuild", "N/A"),
        "figures": ("tsbuild", "N/A"),
        "report": ("tsbuild", "N/A"),
        "tune_configs": ("tsgpu", "gres:gpu:1"),
        "tune_engine": ("tsgpu", "gres:gpu:1"),
        "measure_device": ("tsgpu", "gres:gpu:1"),
        "bench_decode": ("tsgpu", "gres:gpu:1"),
        "bench_collective": ("tsgpu", f"gres:gpu:{node_gpus}"),
        "bench_layout": ("tsgpu", f"gres:gpu:{node_gpus}"),
        "measure_power": ("tsgpu", f"gres:gpu:{node_gpus}"),
    }
    seen = []
    for line in (slurm_sweep / "squeue.txt").read_text().splitlines():
        _, partition, tres, state, comment = line.split()
        rule = next(name for name in want if comment.startswith(f"rule_{name}"))
        assert (partition, tres, state) == (*want[rule], "COMPLETED"), line
        seen.append(rule)
    tiny_grid = set(want) - {"tune_configs", "tune_engine"}  # they need a GPU here
    assert set(seen) >= tiny_grid
    assert seen.count("cpu_batch") == 1  # every build and launch check in one SLURM job


def test_slurm_produces_the_same_files(slurm_sweep, tiny_sweep):
    """The SLURM run writes the same result files as the local run."""
    assert _result_files(slurm_sweep) == _result_files(tiny_sweep)


def test_slurm_launch_table_equals_local(slurm_sweep, tiny_sweep):
    """launch.csv holds no timings: it is the same cell for cell."""
    slurm, local = _table(slurm_sweep, "launch"), _table(tiny_sweep, "launch")
    assert list(slurm.columns) == list(local.columns)
    columns = list(local.columns)
    assert _rows(slurm, columns) == _rows(local, columns)


@pytest.mark.parametrize("name", sorted(KEYS))
def test_slurm_tables_match_local_by_key_and_status(slurm_sweep, tiny_sweep, name):
    """Measured tables hold the same rows (keys) with the same status and failure reasons."""
    slurm, local = _table(slurm_sweep, name), _table(tiny_sweep, name)
    assert list(slurm.columns) == list(local.columns)
    columns = KEYS[name] + [c for c in ("status",) if c in local.columns]
    assert len(local) > 0
    assert _rows(slurm, columns) == _rows(local, columns)
    if "reason" in local.columns:
        failed = columns + ["reason"]
        not_ok = _rows(slurm[slurm.status != "ok"], failed)
        assert not_ok == _rows(local[local.status != "ok"], failed)


def test_local_profile_runs_without_a_gpu(tmp_path):
    """The one-machine profile runs a GPU rule on a machine with no GPU, even with gpu=0 free."""
    profile = str(ROOT / "profiles" / "default")
    proc = snakemake(
        tmp_path,
        "results/device/ceilings.json",
        "--cores",
        "1",
        "--workflow-profile",
        profile,
        "--resources",
        "gpu=0",
        overrides=["experiment=tiny"],
    )
    assert "workflow specific profile" in proc.stderr
    assert (tmp_path / "results" / "device" / "ceilings.json").is_file()
