"""The README's commands for a GPU machine without a registry work as written: the wheels
command from any python (no traceback), the GPU entry point's sweep with no override."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import stub_bin

ROOT = Path(__file__).resolve().parents[1]


def _copy_tools(tmp_path: Path) -> Path:
    """Return a folder holding a copy of tools/, the Snakefile and conf/ (as a fresh checkout has
    them: tools/gpu.sh runs from a checkout's root)."""
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    shutil.copy(ROOT / "Snakefile", tmp_path / "Snakefile")
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    return tmp_path


def base_python() -> str:
    """Return a python outside the project's environment (the one it was made from)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


def test_fetch_wheels_outside_the_venv_reruns_in_it_or_says_what_to_do(tmp_path):
    repo = _copy_tools(tmp_path)
    cmd = [base_python(), "tools/fetch_wheels.py", "--list", ".whl"]
    alone = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=120)
    if alone.returncode != 0:  # this python lacks the pipeline: one line, no traceback
        assert "Traceback" not in alone.stderr and "make bootstrap" in alone.stderr
    (repo / ".venv").symlink_to(Path(sys.prefix))
    ran = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    listed = ran.stdout.split()
    assert any(x.startswith("snakemake==") for x in listed)
    assert any(x.startswith("nvidia-cutlass==") for x in listed)
    assert not (repo / ".whl").exists()  # --list fetches nothing


def test_fetch_wheels_refuses_an_unknown_option_before_making_a_folder(tmp_path):
    """`--nosuch DEST` was taken as the folder `--nosuch` (created, filled with wheels)."""
    for args in (["--nosuch", "/nonexistent"], ["--list", "a", "b"], ["tools/fetch_wheels.py"]):
        ran = subprocess.run(
            [sys.executable, str(ROOT / "tools/fetch_wheels.py"), *args],
            cwd=tmp_path if args[0] != "tools/fetch_wheels.py" else ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
        assert ran.stderr.strip().splitlines()[-1].startswith("fetch_wheels.py: error:")
    assert not any(tmp_path.iterdir())


def test_the_gpu_sweep_with_no_override_passes_no_config(tmp_path):
    repo = _copy_tools(tmp_path)
    stubs = stub_bin(tmp_path, python3='echo "ARGS: $*"', nvidia_smi="echo gpu")
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}")
    for args, expected in (
        ([], "ARGS: -m snakemake --cores all --keep-going\n"),
        (["device=auto"], '--keep-going --config overrides=["device=auto"]\n'),
    ):
        out = tmp_path / f"out{len(args)}"
        proc = subprocess.run(
            ["bash", "tools/gpu.sh", "sweep", str(out), *args],
            cwd=repo, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        log = (out / "snakemake.log").read_text()
        assert log.splitlines()[0] + "\n" == expected or expected in log, log
        assert 'overrides=[""]' not in log
