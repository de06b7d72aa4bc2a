"""Where every number came from: device, driver, toolchain versions, commit."""

import functools
import platform
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def package_version(name: str) -> str:
    """Return an installed package's version, or 'absent'."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def _git(where: str, *args: str) -> str:
    """Return the stripped output of `git -C where args...`; raise if git fails."""
    return subprocess.run(
        ["git", "-C", where, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@functools.cache
def git_commit(where: str = str(Path(__file__).resolve().parent)) -> str:
    """Return the git commit of the checkout holding `where`, with '+dirty' if it has changes."""
    try:
        head = _git(where, "rev-parse", "--short=12", "HEAD")
        dirty = _git(where, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# How long nvidia-smi may take to list the GPUs before the query is an error.
SMI_TIMEOUT_S = 30


class GpuQueryError(RuntimeError):
    """nvidia-smi is present but did not say which GPUs the machine has."""


@functools.cache
def query_gpus() -> tuple[tuple[str, str], ...]:
    """Return (name, driver) per local GPU from nvidia-smi; GpuQueryError if it fails or hangs."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except subprocess.TimeoutExpired:
        raise GpuQueryError(f"nvidia-smi did not answer within {SMI_TIMEOUT_S} s") from None
    except subprocess.CalledProcessError as err:
        said = (err.stderr or err.stdout or "").strip().splitlines()
        why = f": {said[0]}" if said else ""
        raise GpuQueryError(f"nvidia-smi failed (exit {err.returncode}){why}") from None
    except OSError as err:
        raise GpuQueryError(f"nvidia-smi could not run: {err}") from None
    rows = [tuple(p.strip() for p in line.split(",", 1)) for line in out.splitlines() if line]
    return tuple(r for r in rows if len(r) == 2)


def gpu_names() -> tuple[str, ...]:
    """Return the names of local NVIDIA GPUs as a job sees them (none where the query fails)."""
    try:
        return tuple(name for name, _ in query_gpus())
    except GpuQueryError:
        return ()


def toolchain_key(drivers: tuple[str, ...] = ()) -> str:
    """Return the versions that make a measurement stale when they change (a rule param)."""
    parts = [f"{p} {package_version(p)}" for p in ("torch", "triton", "nvidia-cutlass")]
    return ", ".join([*parts, f"driver {'/'.join(sorted(drivers)) or 'none'}"])


def toolchain() -> dict:
    """Return the versions of every tool that shapes a result."""
    import torch

    cuda = torch.version.cuda or "none"
    return {
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "cuda_runtime": cuda,
        "cutlass": package_version("nvidia-cutlass"),
        "python": platform.python_version(),
    }


def cpu_device() -> dict:
    """Return the host CPU as a benchmark device (for work that runs on it beside any GPU)."""
    import torch

    return {
        "device": f"cpu ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads)",
        "device_kind": "cpu",
        "driver": "none",
        "device_count": 0,
    }


def device_info() -> dict:
    """Return the benchmark device's name, driver and kind, read through torch."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        driver = "unknown"
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # NVML is optional: the driver then stays unknown
            pass
        return {
            "device": props.name,
            "device_kind": "cuda",
            "driver": driver,
            "device_count": torch.cuda.device_count(),
        }
    return cpu_device()


HOST_DEVICE = "none: compiled on the host, checked against the target's table"


def build_stamp(toolchain: str) -> dict:
    """Return provenance columns for a build or launch record, taken when it is written."""
    return {"device": HOST_DEVICE, "toolchain": toolchain, "commit": git_commit()}


def cell_hash(cell_json: str) -> str:
    """Return a short hash of a cell's canonical JSON: the identity a result row records."""
    import hashlib

    return hashlib.sha256(cell_json.encode()).hexdigest()[:12]


def stamp(repo: str | Path | None = None) -> dict:
    """Return provenance columns for a measured row."""
    return {
        **device_info(),
        **toolchain(),
        "commit": git_commit(str(repo)) if repo is not None else git_commit(),
        "source": "measured",
    }
