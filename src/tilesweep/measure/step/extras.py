"""An engine's small kernels in the whole step (`quant`: fp8 quantisation; others: a copy)."""

import math

from tilesweep.plan.engine_profile import EXTRA_COLUMNS as COLUMNS
from tilesweep.plan.engine_profile import LEAN, extra_kernels
from tilesweep.settings import ModelSettings
from tilesweep.settings.engine_spec import EngineSettings, Kernel

QUANT, COPY = "quant", "copy"
LAYER_PART, STEP_PART = "engine_extra", "engine_extra_step"
# The parts of a step outside its layers: per step, not per layer (kernels_per_layer). `unnamed`
# is the hand-back of the picked tokens after the LM head.
STEP_PARTS = ("embedding", "lm_head", "lm_head_gather", "unnamed", STEP_PART)
# The kernel lists (bench.step_kernel_list): the project's own step, and the engine's beside it.
ENGINE = "engine"


def half_up(x: float) -> int:
    """Return the nearest whole number to x >= 0, halves up."""
    return math.floor(x + 0.5)


def spread(count: float, layers: int) -> list[int]:
    """Return kernels per layer for a count per layer, the remainder on the first layers."""
    base = math.floor(count)
    more = half_up(count * layers) - base * layers
    return [base + (1 if i < more else 0) for i in range(layers)]


def standin(kernel: Kernel) -> str:
    """Return the stand-in a listed kernel runs as: QUANT for a quantisation, else COPY."""
    return QUANT if "quant" in kernel.name.lower() else COPY


def short_version(engine: dict) -> str:
    """Return an engine's version without its parenthesised provenance (`0.5.23`)."""
    return engine["version"].split(" (")[0].strip()


def expand(
    engine: dict, model: dict, weight_dtype: str, dense: int, moe: int, arch: str | None = None
) -> dict:
    """Return the engine's extra kernels for `dense` then `moe` layers on `arch` (the GPU at hand:
    its only_arch entries; None, arch-free ones only); raise if none."""
    # The spec's engine and model are JSON (its rerun key): validated again to be read typed.
    typed = EngineSettings.model_validate(engine) if engine else None
    kernels = extra_kernels(typed, ModelSettings.model_validate(model), weight_dtype, arch)
    layers = [{QUANT: 0, COPY: 0} for _ in range(dense + moe)]
    where_layers = {
        "per_layer": range(dense + moe),
        "per_dense_layer": range(dense),
        "per_moe_layer": range(dense, dense + moe),
    }
    run = {}
    for where, at in where_layers.items():
        total = 0
        for kind in (QUANT, COPY):
            count = sum(k.count for k in kernels[where] if standin(k) == kind)
            for i, n in zip(at, spread(count, len(at)), strict=True):
                layers[i][kind] += n
                total += n
        run[where] = total / len(at) if len(at) else 0.0
    step = {
        kind: half_up(sum(k.count for k in kernels["per_step"] if standin(k) == kind))
        for kind in (QUANT, COPY)
    }
    run["per_step"] = float(sum(step.values()))
    listed = f"{engine['name']} {short_version(engine)} kernel list"
    return {
        "label": f"engine-faithful ({listed})",
        "list": listed,
        "layers": layers,
        "step": step,
        "listed": {where: float(sum(k.count for k in ks)) for where, ks in kernels.items()},
        "run": run,
    }


def lean_columns() -> dict:
    """Return the kernel-list columns of a lean row: no extra kernels."""
    return {"kernel_list": LEAN, **{col: 0.0 for col in COLUMNS.values()}}


def row_columns(expanded: dict) -> dict:
    """Return the kernel-list columns of an engine row: its label and its extras as run."""
    return {
        "kernel_list": expanded["label"],
        **{col: expanded["run"][where] for where, col in COLUMNS.items()},
    }


def kernels_per_layer(launches: dict[str, int], layers: int, micro_batches: int) -> float:
    """Return the mean kernels one layer launches in a step (STEP_PARTS excluded)."""
    if not layers or not micro_batches:
        return math.nan
    inside = sum(n for part, n in launches.items() if part not in STEP_PARTS)
    return inside / (layers * micro_batches)


def launch(rank, x, counts: dict, clock, part: str) -> None:
    """Launch the stand-ins of `counts` on x, timed as `part`; outputs dropped."""
    torch = rank.torch
    if not counts[QUANT] and not counts[COPY]:
        return
    # triton (via kernels.token_group_quant): this module loads without it
    from tilesweep.kernels.token_group_quant import token_group_quant

    with clock.part(part):
        for _ in range(counts[QUANT]):
            token_group_quant(torch, x)
            clock.add_launches(1)
        for _ in range(counts[COPY]):
            torch.empty_like(x).copy_(x)
