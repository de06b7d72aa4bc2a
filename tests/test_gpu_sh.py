"""tools/gpu.sh, the GPU machine's one entry point, without a GPU: its help lists every task,
a bad task or a missing OUT_DIR is one line and touches nothing, and a task that runs sweeps
reaches them through the sweep task (python3 and nvidia-smi stubbed)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import stub_bin

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["sweep", "answer-time", "engine-step", "example", "layouts", "step",
         "engine-tables", "engine-tune", "engine-check"]  # fmt: skip


def gpu_sh(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """Return tools/gpu.sh's finished process for these arguments."""
    return subprocess.run(["bash", str(ROOT / "tools/gpu.sh"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_help_lists_every_task_one_line_each():
    proc = gpu_sh("--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: tools/gpu.sh TASK OUT_DIR")
    listed = [line.split()[0] for line in lines[2:]]
    assert listed == TASKS
    assert not any("h200" in task for task in listed)  # tasks are not named for a GPU kind
    bare = gpu_sh()  # no arguments: the same list, as a usage error
    assert bare.returncode == 2 and bare.stdout == "" and bare.stderr == proc.stdout


def test_an_unknown_task_is_refused_in_one_line(tmp_path):
    proc = gpu_sh("h200_layouts", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "unknown task 'h200_layouts'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", TASKS)
def test_a_usage_error_is_one_line_and_creates_nothing(task, tmp_path):
    for args in ([task], [task, "--format"]):  # no OUT_DIR; an option where OUT_DIR goes
        proc = gpu_sh(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1
        assert proc.stderr.startswith(f"usage: tools/gpu.sh {task} OUT_DIR"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_task_without_arguments_refuses_extra_ones(tmp_path):
    proc = gpu_sh("engine-check", str(tmp_path / "out"), "--engine", "vllm", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: tools/gpu.sh engine-check OUT_DIR")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["layouts", "step"])
def test_a_task_that_clears_results_refuses_a_checkout_holding_them(task, tmp_path):
    (tmp_path / "results").mkdir()
    proc = gpu_sh(task, str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2 and "results/ exists here" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_layouts_runs_its_sweeps_through_the_sweep_task(tmp_path):
    stubs = stub_bin(tmp_path, python3='echo "ARGS: $*"', nvidia_smi="echo gpu")
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", LAYOUT_MODELS="dsv3")
    (tmp_path / "Snakefile").touch()  # a checkout's root, as the task asks for
    (tmp_path / "conf").mkdir()
    proc = gpu_sh("layouts", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_tests.log", "runs.tgz"]
    with tarfile.open(tmp_path / "out/runs.tgz") as tgz:
        log = tgz.extractfile("dsv3/snakemake.log").read().decode()
        assert "glm5/snakemake.log" not in tgz.getnames()  # LAYOUT_MODELS left it out
    assert "results/device/ceilings.json results/layout/tp1-pp1-ep1.csv --cores all" in log
    assert '"experiment=h200_step","model=deepseek_v3"' in log


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["engine-tables", "OUT", "--bogus"], "(unknown option: --bogus)"),
        (["engine-tables", "OUT", "--out=elsewhere"], "(unknown option: --out)"),
        (["engine-tables", "OUT", "--engine"], "(--engine needs a value)"),
        (["engine-tune", "OUT", "--keys"], "(--keys needs a value)"),
        (["engine-tune", "OUT", "-x"], "(unknown option: -x)"),
        (["sweep", "OUT", "experiment"], "(not a Hydra override, KEY=VALUE: experiment)"),
        (["answer-time", "OUT", "--cores", "4"], "(unknown option: --cores)"),
        (["engine-step", "OUT", "--layuot=tp8-pp1-ep1"], "(unknown option: --layuot)"),
    ],
)
def test_an_argument_a_task_does_not_take_is_refused_before_anything_runs(args, why, tmp_path):
    """N058: a bad argument after OUT_DIR is one line naming it, exit 2, before pip or any
    folder (off a GPU machine pip's own error once came first and named neither)."""
    proc = gpu_sh(*(a.replace("OUT", str(tmp_path / "out")) for a in args), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"usage: tools/gpu.sh {args[0]} OUT_DIR") and why in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_task_off_a_gpu_machine_or_without_wheels_is_one_line_and_creates_nothing(tmp_path):
    stubs = stub_bin(tmp_path)
    env = dict(os.environ, PATH=f"{stubs}:/usr/bin:/bin")  # the machine's own: no nvidia-smi
    proc = gpu_sh("engine-tables", "out", "--engine", "vllm", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no nvidia-smi here: run it on the GPU machine" in proc.stderr
    stub_bin(tmp_path, nvidia_smi="echo gpu", python3="exit 1")  # no snakemake, no hydra
    proc = gpu_sh("sweep", "out", "experiment=tiny", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no carried wheels in .whl/" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_an_out_dir_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path):
    """G14/G15/G22 (issue 50, round five): an OUT_DIR that is a file, or under a folder that
    cannot be written, is refused in one line before anything is made."""
    (tmp_path / "afile").write_text("mine")
    proc_why = "cannot be written (/proc is not a writable folder)"
    for out, why in ((tmp_path / "afile", "is a file, not a folder"), (Path("/proc/x"), proc_why)):
        proc = gpu_sh("sweep", str(out), cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and why in proc.stderr
    assert (tmp_path / "afile").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_task_away_from_the_repository_root_is_one_line_and_creates_nothing(tmp_path):
    """G17 (issue 50, round five): where python3 has Snakemake and Hydra, a task run away from
    the repository root says so in one line, before Snakemake's 'No Snakefile found'."""
    stubs = stub_bin(tmp_path, python3="exit 0", nvidia_smi="echo gpu")
    env = dict(os.environ, PATH=f"{stubs}:/usr/bin:/bin")
    proc = gpu_sh("sweep", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "run it from the repository root" in proc.stderr and not proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]
