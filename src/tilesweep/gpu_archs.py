"""GPU architectures as data (conf/architectures.yaml); an unlisted one runs what the newest listed
one at or below its compute capability runs."""

import functools
from dataclasses import dataclass
from pathlib import Path

from tilesweep.errors import ConfigError

TABLE_FILE = Path(__file__).resolve().parents[2] / "conf" / "architectures.yaml"


# The operand types a tensor core row may name (the weight and math dtypes the kernels know).
TENSOR_DTYPES = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4")


@dataclass(frozen=True)
class Architecture:
    """One GPU architecture: its compute capability and its tensor cores' operand types."""

    cc: int
    tensor_dtypes: tuple[str, ...]


def load(path: Path = TABLE_FILE) -> dict[str, Architecture]:
    """Return {arch: Architecture} from the table file; raise ConfigError if bad."""
    from omegaconf import OmegaConf

    where = f"conf/{path.name}"
    try:
        rows = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as exc:  # noqa: BLE001 - not YAML, unreadable: one line either way
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where}: not a readable YAML table ({first})") from None
    if not isinstance(rows, dict) or not rows:
        raise ConfigError(
            f"{where}: must map each architecture (sm_90, ...) to cc and tensor_dtypes"
        )
    out = {}
    for arch, row in rows.items():
        if not isinstance(row, dict) or set(row) != {"cc", "tensor_dtypes"}:
            raise ConfigError(f"{where}: {arch}: must have exactly cc and tensor_dtypes")
        dtypes = row["tensor_dtypes"]
        names = isinstance(dtypes, list) and all(isinstance(d, str) for d in dtypes)
        if type(row["cc"]) is not int or not names:  # a bool is no compute capability
            raise ConfigError(f"{where}: {arch}: cc must be an int, tensor_dtypes a list of names")
        unknown = [d for d in dtypes if d not in TENSOR_DTYPES]
        if unknown:
            raise ConfigError(
                f"{where}: {arch}: tensor_dtypes {unknown[0]!r} is not one of "
                f"{', '.join(TENSOR_DTYPES)}"
            )
        out[arch] = Architecture(row["cc"], tuple(dtypes))
    return out


@functools.cache
def architectures() -> dict[str, Architecture]:
    """Return the table, read once."""
    return load()


def tensor_dtypes(arch: str, cc: int) -> tuple[str, ...]:
    """Return the operand types the tensor cores of `arch` (cc `cc`) run."""
    table = architectures()
    if arch in table:
        return table[arch].tensor_dtypes
    below = [a for a in table.values() if a.cc <= cc]
    return max(below, key=lambda a: a.cc).tensor_dtypes if below else ()


def first(dtype: str) -> tuple[str, int]:
    """Return (arch, cc) of the oldest listed architecture running `dtype`."""
    runs = [(spec.cc, a) for a, spec in architectures().items() if dtype in spec.tensor_dtypes]
    if not runs:
        raise LookupError(f"no architecture in {TABLE_FILE.name} runs {dtype} on its tensor cores")
    cc, arch = min(runs)
    return arch, cc
