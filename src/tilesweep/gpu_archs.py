"""GPU architectures as data (conf/architectures.yaml): each one's compute capability and the
operand types its tensor cores run, read by every backend that decides what to build where.

An architecture the table does not list (a hardware file may name one) runs what the newest
listed architecture at or below its compute capability runs: an unlisted sm_110 builds as sm_100.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TABLE_FILE = Path(__file__).resolve().parents[2] / "conf" / "architectures.yaml"


@dataclass(frozen=True)
class Architecture:
    """One GPU architecture: its compute capability and its tensor cores' operand types."""

    cc: int
    tensor_dtypes: tuple[str, ...]


def load(path: Path = TABLE_FILE) -> dict[str, Architecture]:
    """Return {arch: Architecture} read from the table file; raise ValueError naming
    the row and key where a row is not {cc: int, tensor_dtypes: list}."""
    from omegaconf import OmegaConf

    rows = OmegaConf.to_container(OmegaConf.load(path))
    out = {}
    for arch, row in rows.items():
        if not isinstance(row, dict) or set(row) != {"cc", "tensor_dtypes"}:
            raise ValueError(f"{path.name}: {arch}: must have exactly cc and tensor_dtypes")
        if not isinstance(row["cc"], int) or not isinstance(row["tensor_dtypes"], list):
            raise ValueError(f"{path.name}: {arch}: cc must be an int, tensor_dtypes a list")
        out[arch] = Architecture(row["cc"], tuple(row["tensor_dtypes"]))
    return out


ARCHITECTURES = load()


def tensor_dtypes(arch: str, cc: int) -> tuple[str, ...]:
    """Return the operand types the tensor cores of `arch` (compute capability `cc`) run: its row's,
    else the newest listed architecture's at or below `cc` (none below the oldest)."""
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch].tensor_dtypes
    below = [a for a in ARCHITECTURES.values() if a.cc <= cc]
    return max(below, key=lambda a: a.cc).tensor_dtypes if below else ()


def first(dtype: str) -> tuple[str, int]:
    """Return (arch, compute capability) of the oldest listed architecture whose tensor cores run
    `dtype`; raise LookupError where none does."""
    runs = [(spec.cc, arch) for arch, spec in ARCHITECTURES.items() if dtype in spec.tensor_dtypes]
    if not runs:
        raise LookupError(f"no architecture in {TABLE_FILE.name} runs {dtype} on its tensor cores")
    cc, arch = min(runs)
    return arch, cc
