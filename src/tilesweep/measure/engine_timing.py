"""Both expert GEMMs of one problem timed in an engine's own fused-MoE kernel, launched as that
engine launches it (measure/vllm_kernel.py, measure/sglang_kernel.py), in one weight format
(measure/engine_case.py): CUDA-graph replays of up to 10 back-to-back calls, as the engines'
tuners time them, each checked against an fp32 reference first.

Compiling is the slow part of trying a config in a kernel whose tile sizes are compile-time
constants; `warm` compiles a list of (config, M) in parallel processes into Triton's on-disk
cache, each on a copy of the problem with top_k experts laid out for the real expert count (the
kernel's integer arguments, hence Triton's specialisation, are those of the real problem), so
the timing process only loads them.
"""

from __future__ import annotations

import importlib
import math

from tilesweep.errors import last_line
from tilesweep.plan import fused_moe_space as space

LAUNCHERS = {"vllm": "tilesweep.measure.vllm_kernel", "sglang": "tilesweep.measure.sglang_kernel"}
GEMMS = ("gate_up", "down")


def launcher(engine: str):
    """Return the module that lays out and launches an engine's kernel."""
    if engine not in LAUNCHERS:
        raise LookupError(f"no launcher for engine {engine!r} (known: {', '.join(LAUNCHERS)})")
    return importlib.import_module(LAUNCHERS[engine])


def effective(config: dict, fmt: str) -> dict:
    """Return the config as it is tried: for fp8_block, BLOCK_SIZE_K cut to the scale block
    (vLLM cuts it so; SGLang does not, and a wider step would sum across scale groups, so its
    candidates are taken at the block), so two configs that run the same are one."""
    from tilesweep.measure.engine_case import BLOCK

    if fmt == "fp8_block" and config["BLOCK_SIZE_K"] > BLOCK:
        return {**config, "BLOCK_SIZE_K": BLOCK}
    return dict(config)


def _gemm_call(kernel, lx, problem, weights, batch, blocks, config, gemm, fmt):
    """Return a call that runs one GEMM of a batch in the engine's kernel."""
    from tilesweep.measure.engine_case import block_shape

    top_k = problem["top_k"] if gemm == "gate_up" else 1
    topw = None if gemm == "gate_up" else batch.topk_weights

    def call():
        return lx.launch(kernel, batch.a[gemm], weights.w[gemm], batch.c[gemm], blocks, config,
                         top_k=top_k, topk_weights=topw, a_scale=batch.a_scale[gemm],
                         b_scale=weights.scale[gemm], block_shape=block_shape(fmt))  # fmt: skip

    return call


class EngineTimer:
    """One problem (experts, n, hidden, top_k) in one format, in one engine's kernel."""

    def __init__(self, engine: str, version: str, problem: dict, fmt: str, seed: int,
                 alpha: float, device: str = "cuda"):  # fmt: skip
        import torch

        from tilesweep.engine_kernels import load
        from tilesweep.measure import engine_case

        self.engine, self.version, self.problem, self.fmt = engine, version, problem, fmt
        self.kernel, self.kernel_from = load(engine, version)
        self.lx = launcher(engine)
        self.device, self.alpha = device, alpha
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        half = torch.float16 if device == "cpu" else None  # the interpreter has no bf16 stores
        self.dtype = half
        self.weights = engine_case.make_weights(problem, fmt, device, self.gen, dtype=half)

    def batch(self, m: int, routing: str):
        """Return a fresh routed batch of m tokens."""
        from tilesweep.measure import engine_case

        return engine_case.make_batch(self.problem, self.weights, m, routing, self.alpha,
                                      self.device, self.gen, dtype=self.dtype)  # fmt: skip

    def time(self, config: dict, batch, repeats: int) -> dict:
        """Return both GEMMs' summed median, p10 and p90 ms and the worse relative error (inf
        where the result is not finite); raise what the launch raises (a refusal)."""
        from tilesweep.measure import engine_case
        from tilesweep.measure.gemm_case import rel_error
        from tilesweep.measure.timing import time_call

        config = effective(config, self.fmt)
        blocks = self.lx.blocks(batch.topk_ids, config["BLOCK_SIZE_M"], self.problem["experts"])
        total = {"time_ms": 0.0, "time_p10_ms": 0.0, "time_p90_ms": 0.0}
        worst = 0.0
        for gemm in GEMMS:
            call = _gemm_call(self.kernel, self.lx, self.problem, self.weights, batch, blocks,
                              config, gemm, self.fmt)  # fmt: skip
            batch.c[gemm].fill_(float("nan"))
            call()
            if gemm not in batch.refs:
                batch.refs[gemm] = engine_case.reference(self.problem, self.weights, batch, gemm)
            worst = max(worst, rel_error(batch.c[gemm], batch.refs[gemm]))
            t = time_call(call, repeats, 2, graph=True, max_calls=10, fill_ms=1.0)
            for key in total:
                total[key] += t[key]
        return {**total, "rel_err": worst if math.isfinite(worst) else float("inf")}


def _warm_one(job: tuple) -> tuple[int, str | None]:
    """Compile one (config, M) of a problem in a pool process; return (index, error)."""
    index, engine, version, problem, fmt, config, m = job
    try:
        import torch

        from tilesweep.engine_kernels import load
        from tilesweep.measure import engine_case

        kernel, _ = load(engine, version)
        lx = launcher(engine)
        # top_k experts only (the weights' strides do not depend on their count), laid out
        # for the real count, which sets the path, the buffer sizes and so Triton's
        # specialisation of the kernel's integer arguments.
        few = {**problem, "experts": problem["top_k"]}
        gen = torch.Generator(device="cuda").manual_seed(0)
        weights = engine_case.make_weights(few, fmt, "cuda", gen)
        batch = engine_case.make_batch(few, weights, m, "uniform", 1.0, "cuda", gen)
        blocks = lx.blocks(batch.topk_ids, config["BLOCK_SIZE_M"], problem["experts"])
        for gemm in GEMMS:
            _gemm_call(kernel, lx, problem, weights, batch, blocks, config, gemm, fmt)()
        torch.cuda.synchronize()
        return index, None
    except Exception as exc:  # a compile or launch refusal is that config's result
        return index, last_line(exc)


def warm(engine: str, version: str, problem: dict, fmt: str, jobs: list, workers: int) -> dict:
    """Compile every (config, M) of `jobs` in parallel processes; return {(slug, M): error}
    for those refused (Triton's OutOfResources at the first launch, a compile error)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    work = [(i, engine, version, problem, fmt, effective(c, fmt), m) for i, (c, m) in
            enumerate(jobs)]  # fmt: skip
    failed = {}
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
        for index, err in pool.map(_warm_one, work, chunksize=2):
            if err:
                config, m = jobs[index]
                failed[space.config_slug(effective(config, fmt)), m] = err
    return failed
