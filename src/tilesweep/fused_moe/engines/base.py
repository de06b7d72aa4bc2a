"""An engine: its data (`<name>.yaml`, EngineData) and launch (`Engine`), by `@register`."""

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tilesweep.errors import ConfigError

FOLDER = Path(__file__).parent  # the engines shipped with the package: <name>.py + <name>.yaml
FORMATS = ("bf16", "fp8", "fp8_block")


class _Strict(BaseModel):
    """A frozen model that refuses unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Function(_Strict):
    """One top-level function of a module inside the engine's wheel."""

    module: str = Field(pattern=r"\.py$")  # its path inside the wheel
    function: str


class Tables(_Strict):
    """Where the wheel keeps its shipped fused-MoE config tables."""

    folder: str = Field(pattern=r"/$")  # inside the wheel
    # true: one folder per Triton version below it (triton_X_Y_Z/), the running Triton's first,
    # else the newest other that holds the name; false: the files directly in it
    per_triton: bool


class EngineData(_Strict):
    """An engine's `<name>.yaml`: the data its wheel is read with."""

    distribution: str  # its package registry name (pip download <distribution>==<version>)
    package: str  # its import name (where it is installed, its kernel may come from there)
    kernel: Function  # its fused-MoE Triton kernel
    # the functions that name a config file, in order, get_config_file_name last
    namers: list[Function] = Field(min_length=1)
    # {format: [dtype, block_shape]} as the engine passes them to get_config_file_name
    name_args: dict[Literal[FORMATS], tuple[str | None, list[int] | None]]
    tables: Tables
    # where a drop-in file goes below an export folder, of {engine} {version} {triton} {name}
    dropin: str
    platform_module: str | None = None  # the module its naming imports `current_platform` from
    # the kernel's arguments its launch passes as the same constants every time
    fixed: dict[str, bool | int | None] = Field(default_factory=dict)


@dataclass
class Launch:
    """One GEMM's launch: c[pair] = A[row(pair)] @ B[expert(pair)]^T, as the launchers share it."""

    a: Any
    b: Any
    c: Any
    sorted_ids: Any  # None: the engine's direct path (no alignment)
    expert_ids: Any
    post_pad: Any
    config: dict
    top_k: int
    topk_weights: Any = None  # the routing weights, multiplied in where given (the down GEMM)
    a_scale: Any = None
    b_scale: Any = None
    block_shape: list[int] | None = None

    @property
    def n(self) -> int:
        """Return the GEMM's N (the weights' rows)."""
        return self.b.shape[1]

    @property
    def k(self) -> int:
        """Return the GEMM's K (the weights' columns)."""
        return self.b.shape[2]


def swap_ab(config: dict, fp8: bool, sm90: bool) -> bool:
    """Return the engines' SWAP_AB rule: fp8 only, on SM90, BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N."""
    return fp8 and sm90 and config["BLOCK_SIZE_M"] < 64 and config["BLOCK_SIZE_N"] >= 64


class Engine:
    """A serving engine's fused-MoE kernel as that engine launches it (`blocks`, `arguments`)."""

    name: ClassVar[str]
    whole_moe_calls = None  # (problem, weights, batch, tuned, dtype) -> {label: call}, or None

    def __init__(self, data: EngineData):
        self.data = data

    def blocks(self, topk_ids, block_m: int, experts: int):
        """Return (sorted_ids or None, expert_ids, num_tokens_post_padded) as the engine does."""
        raise NotImplementedError

    def padded_rows(self, launch: Launch) -> int:
        """Return EM, the sorted rows the grid covers (ValueError on the direct path)."""
        if launch.sorted_ids is None:
            raise ValueError(f"{self.name}'s kernel always reads sorted_token_ids (no naive path)")
        return launch.sorted_ids.numel()

    def arguments(self, launch: Launch, em: int) -> tuple[tuple, dict]:
        """Return the kernel's (positional, keyword) arguments for a launch over EM rows."""
        raise NotImplementedError

    def launch(self, kernel, a, b, c, blocks, config: dict, **given):
        """Launch the engine's kernel for one GEMM over `blocks` (`given`: Launch's); return c."""
        import triton  # the GPU stack: this module loads without it

        launch = Launch(a, b, c, *blocks, config, **given)
        em = self.padded_rows(launch)
        bm, bn = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]
        tiles = triton.cdiv(em, bm) * triton.cdiv(launch.n, bn)
        args, kwargs = self.arguments(launch, em)
        kernel[(tiles,)](*args, **kwargs, **self.data.fixed)
        return c


_REGISTRY: dict[str, Engine] = {}


def load_data(path: Path) -> EngineData:
    """Return an engine's data file checked, or raise ConfigError in one line naming it."""
    try:
        return EngineData.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not readable YAML ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']}") from None


def register(cls: type[Engine]) -> type[Engine]:
    """Register an engine class with the data file beside its module (`<name>.yaml`)."""
    path = Path(sys.modules[cls.__module__].__file__).with_name(f"{cls.name}.yaml")
    _REGISTRY[cls.name] = cls(load_data(path))
    return cls


def unregister(name: str) -> None:
    """Forget a registered engine (tests that plug one in)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Return the engines known here: those shipped in this folder and any registered."""
    shipped = {p.stem for p in FOLDER.glob("*.yaml")}
    return tuple(sorted(shipped | set(_REGISTRY)))


def get(name: str) -> Engine:
    """Return a registered engine, importing its module on first use; LookupError if unknown."""
    if name not in _REGISTRY and (FOLDER / f"{name}.yaml").is_file():
        # the engine named by its data file: its module registers it (and imports triton)
        importlib.import_module(f"{__package__}.{name}")
    if name not in _REGISTRY:
        raise LookupError(f"no engine {name!r} (known: {', '.join(names())})")
    return _REGISTRY[name]


def data(name: str) -> EngineData:
    """Return an engine's data without importing its module; raise LookupError if unknown."""
    if name in _REGISTRY:
        return _REGISTRY[name].data
    if (FOLDER / f"{name}.yaml").is_file():
        return load_data(FOLDER / f"{name}.yaml")
    raise LookupError(f"no engine {name!r} (known: {', '.join(names())})")


def installed(name: str) -> bool:
    """Return whether an engine's package can be imported here."""
    return importlib.util.find_spec(data(name).package) is not None
