"""What an accounting compile needs (nvcc, headers, flags) and running it; no GPU: the host pass
gives the launcher's numbers (SharedStorageSize is read on the host)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from tilesweep.cutlass.cell_spec import ARCHS

COMPILE_TIMEOUT_S = 900
RUN_TIMEOUT_S = 60
BASE_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-w", "-DNDEBUG")


def cutlass_include_dir() -> Path | None:
    """Return the CUTLASS include dir: $CUTLASS_INCLUDE_DIR, else the nvidia-cutlass package's."""
    env = os.environ.get("CUTLASS_INCLUDE_DIR")
    if env and (Path(env) / "cutlass" / "version.h").is_file():
        return Path(env)
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        return None
    inc = Path(spec.origin).parent / "source" / "include"
    return inc if (inc / "cutlass" / "version.h").is_file() else None


def find_nvcc() -> str | None:
    """Return a usable nvcc path: $NVCC, PATH, /usr/local/cuda/bin/nvcc, then PyPI's, or None."""
    spec = importlib.util.find_spec("nvidia")  # the PyPI nvidia-cuda-nvcc packages
    roots = (spec.submodule_search_locations or []) if spec else []
    pypi = [str(c) for root in roots for c in sorted(Path(root).glob("*/bin/nvcc"))]
    for cand in [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", *pypi]:
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


@lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """Return nvcc's release and build lines as one string."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    lines = [ln.strip() for ln in out.splitlines() if "release" in ln or ln.startswith("Build")]
    return "; ".join(lines) or out.strip().splitlines()[-1]


def cutlass_version(include: Path) -> str:
    """Return MAJOR.MINOR.PATCH parsed from the headers' cutlass/version.h."""
    text = (include / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{n}\s+(\d+)", text) for n in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def compile_flags(arch: str, include: Path) -> list[str]:
    """Return the nvcc flags (without input/output) for a TU of one arch."""
    return [*BASE_FLAGS, f"-gencode={ARCHS[arch].gencode}", f"-I{include}"]


def compile_tu(nvcc: str, flags: list[str], src: str, build: Path) -> tuple[bool, str, Path]:
    """Compile src into build/tu; return (ok, compiler log, executable path)."""
    cu, exe = build / "tu.cu", build / "tu"
    cu.write_text(src)
    cmd = [nvcc, *flags, str(cu), "-o", str(exe)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=build
        )
    except subprocess.TimeoutExpired:
        return False, f"error: nvcc timed out after {COMPILE_TIMEOUT_S} s", exe
    return proc.returncode == 0 and exe.exists(), proc.stdout + proc.stderr, exe


def exit_description(returncode: int) -> str:
    """Return how a process ended: 'exit code N' or 'signal SIGSEGV (11)'."""
    import signal

    if returncode < 0:
        names = {s.value: s.name for s in signal.Signals}
        return f"signal {names.get(-returncode, 'unknown signal')} ({-returncode})"
    return f"exit code {returncode}"


def run_tu(exe: Path) -> tuple[dict[int, dict], str | None]:
    """Run a compiled TU; return its JSON lines by cell position and how it failed (None: clean)."""
    try:
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {RUN_TIMEOUT_S} s"
    except OSError as exc:
        return {}, f"could not start: {exc}"
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            rows[data["index"]] = data
    failure = None if proc.returncode == 0 else exit_description(proc.returncode)
    if failure and proc.stderr.strip():
        failure += f": {proc.stderr.strip().splitlines()[-1][:300]}"
    return rows, failure
