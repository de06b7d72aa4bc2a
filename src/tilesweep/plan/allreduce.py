"""An all-reduce as the engine runs it inside its CUDA graph: the engine file's steps say which
algorithm takes a message of a size (conf/engine `allreduce`, per architecture and GPU count; NCCL
past the last), the hardware file's `all_reduce.in_graph` series what it costs there.

An algorithm without a cited series at that GPU count, or a message past its last size, takes the
next slower algorithm's series (one_shot or symm_mem, then two_shot, then NCCL, whose model stands
past its cited sizes), labelled so; below a series' first size its first time stands."""

from __future__ import annotations

from tilesweep import package_data
from tilesweep.plan.messages import interpolated_us
from tilesweep.settings import HardwareSpec
from tilesweep.settings.engine_spec import AllReduceStep, EngineSettings
from tilesweep.settings.hardware_spec import AllReduce, Collective, InGraph

DATA_FILES = ("data/plan.yaml",)
# What an algorithm with no cited figure takes instead: the next slower, in order.
FALLBACK = package_data.data_typed(
    "tilesweep", DATA_FILES[0], "allreduce_fallback", dict[str, tuple[str, ...]]
)


def engine_steps(engine: EngineSettings, arch: str | None) -> dict[int, list[AllReduceStep]]:
    """Return {GPU count: steps} the engine file lists for an architecture ({} where none)."""
    for key, steps in engine.allreduce.items():
        if key.removesuffix("a") == str(arch or "").removesuffix("a"):  # sm_90a is sm_90
            return dict(steps.by_gpus)
    return {}


def algorithm_at(
    steps: list[AllReduceStep], nbytes: float, token_bytes: float | None = None
) -> tuple[str, AllReduceStep | None]:
    """Return (the engine's algorithm for nbytes, its step; None past the last, where NCCL runs);
    a step that picks by tokens reads nbytes as nbytes / token_bytes tokens (ValueError without)."""
    for step in steps:
        if nbytes > step.max_bytes:
            continue
        if step.max_tokens is not None:
            if not token_bytes:
                raise ValueError(
                    f"the {step.algorithm} step to {step.max_tokens} tokens needs the model's "
                    "bytes per token"
                )
            if nbytes > step.max_tokens * token_bytes:
                continue
        return step.algorithm, step
    return "nccl", None


def _reach(step: AllReduceStep) -> str:
    """Return how far a step takes messages, in words (to 127 tokens, at most 7.63 MiB)."""
    if step.max_tokens is None:
        return f"to {_size(step.max_bytes)}"
    return f"to {step.max_tokens} tokens, at most {_size(step.max_bytes)}"


class EngineAllReduce(AllReduce):
    """An all_reduce block as the engine runs it: the hardware file's figures and engine's steps."""

    engine: str = None
    arch: str = None
    steps: dict[int, list[AllReduceStep]] = {}
    token_bytes: float | None = None  # one token's hidden state (steps that pick by tokens)

    @classmethod
    def of(
        cls, block: AllReduce, engine: EngineSettings, arch: str, token_bytes: float | None = None
    ) -> EngineAllReduce:
        """Return the block with the engine's steps for `arch` (and the model's bytes per token,
        for steps that pick by tokens) attached."""
        given = {key: getattr(block, key) for key in block.model_fields_set}
        given |= {"engine": engine.name, "arch": arch, "steps": engine_steps(engine, arch)}
        return cls.model_construct(**given, token_bytes=token_bytes)


def series_us(in_graph: InGraph | None, algorithm: str, n: int, nbytes: float):
    """Return (us of one all-reduce on the algorithm's series at n GPUs, key), or (None, why)."""
    cited = getattr(in_graph, algorithm) if in_graph else None
    series = cited.by_gpus.get(n) if cited else None
    if series is None:
        return None, f"no cited {algorithm} figure at {n} GPUs"
    last = series.points[-1][0]
    if nbytes > last:
        return None, f"{nbytes:.0f} B is past the cited {algorithm} sizes (to {last:g} B)"
    return interpolated_us(series.points, nbytes), series.source


def engine_time(block: Collective, n: int, nbytes: float, nccl_ms: float):
    """Return (ms of one all-reduce as the engine runs it, label), None without an engine table."""
    if not isinstance(block, EngineAllReduce):
        return None
    name = block.engine
    steps = block.steps.get(n)
    if not steps:
        why = f"{name} lists no all-reduce algorithm for {block.arch} at {n} GPUs"
        return nccl_ms, f"NCCL's model ({why})"
    algorithm, step = algorithm_at(steps, nbytes, block.token_bytes)
    reach = " (past its steps)" if step is None else f" to {step.max_bytes} B"
    if step is not None and step.max_tokens is not None:
        reach = f" to {step.max_tokens} tokens"
    picked = f"{name}: {algorithm}{reach}"
    missing = []
    for taken in FALLBACK[algorithm]:
        us, source = series_us(block.in_graph, taken, n, nbytes)
        if us is None:
            missing.append(source)
            continue
        instead = f", timed as {taken} ({'; '.join(missing)})" if taken != algorithm else ""
        return us * 1e-3, f"{picked}{instead}: in-graph [{source}]"
    return nccl_ms, f"{picked}, timed as NCCL's model ({'; '.join(missing)})"


def describe(target: HardwareSpec) -> str:
    """Return the all-reduce in words: the engine's steps, and who timed each algorithm."""
    block = target.interconnect_model
    top = block.topologies.get(block.default) if block else None
    ar = top.all_reduce if top else None
    if not isinstance(ar, EngineAllReduce):
        if ar and ar.one_shot and ar.one_shot.enabled:
            return (
                f"the engine's one-shot custom all-reduce up to its max_bytes (hardware"
                f"[{target.name}] one_shot figures, cited), NCCL above"
            )
        return "NCCL (the hardware file's figures)"
    counts = []
    for n, steps in sorted(ar.steps.items()):
        parts = [f"{s.algorithm} {_reach(s)}" for s in steps]
        counts.append(f"{n} GPUs {', '.join(parts)}, NCCL above")
    timed = []
    for algorithm in FALLBACK:
        cited = getattr(ar.in_graph, algorithm) if ar.in_graph else None
        for n, series in sorted(cited.by_gpus.items() if cited else ()):
            src = ar.in_graph.sources.get(series.source)
            machine = (src.machine if src else "?").split(" (")[0]
            timed.append(f"{algorithm} {n} GPUs [{series.source}] {machine}")
    timed_by = "; ".join(timed) or "none cited (NCCL's model throughout)"
    return (
        f"{ar.engine}'s all-reduce on {ar.arch} by message size "
        f"({'; '.join(counts) or 'no steps for this arch: NCCL'}); hardware[{target.name}] "
        f"in-graph figures: {timed_by}; an algorithm "
        "without a cited figure at a size takes the next slower one's (one_shot, two_shot, NCCL)"
    )


def _size(nbytes: int) -> str:
    """Return a byte count in words (128 KiB, 2.6 MiB)."""
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.3g} MiB"
    return f"{nbytes / (1 << 10):.3g} KiB" if nbytes >= 1 << 10 else f"{nbytes} B"
