"""Both expert GEMMs timed in an engine's own kernel, in CUDA-graph replays of up to 10 calls, each
checked against fp32 first. `decode` (default): cold L2, enough rotated weight copies that the bytes
between two uses of one copy are at least L2_MULTIPLE x the L2, since a decode step runs every other
layer between two calls of one layer. `warm`: one weight set, as the engines' own tuners time it.
Compiles run in parallel processes into Triton's cache on problems with the real expert count (the
same specialisation)."""

import concurrent.futures as cf
import functools
import math
import multiprocessing as mp
import statistics
from dataclasses import dataclass

from tilesweep.errors import last_line
from tilesweep.fused_moe import space
from tilesweep.fused_moe.engines import formats
from tilesweep.fused_moe.engines.base import get
from tilesweep.fused_moe.engines.formats import BLOCK, block_shape
from tilesweep.fused_moe.engines.wheels import load
from tilesweep.measure.gemm_case import rel_error
from tilesweep.measure.timing import calls_to_fill, summarize, time_call, time_gpu

GEMMS = ("gate_up", "down")
TIMINGS = ("decode", "warm")
L2_MULTIPLE = 3  # bytes touched between two uses of one weight copy, in units of the L2
MEMORY_SHARE = 0.6  # the most of the free device memory the weight copies may take


def compile_pool(workers: int):
    """Return a pool of spawned processes (one per worker; reused across calls)."""
    return cf.ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn"))


def expert_bytes(problem: dict, fmt: str) -> dict:
    """Return {gemm: bytes of one expert's weights and scales} in a format."""
    out = {}
    for gemm, (n, k) in space.gemm_shapes(problem).items():
        weights = n * k * (2 if fmt == "bf16" else 1)
        scales = {"bf16": 0, "fp8": 4, "fp8_block": 4 * -(-n // BLOCK) * -(-k // BLOCK)}[fmt]
        out[gemm] = weights + scales
    return out


def weight_copies(problem: dict, fmt: str, l2_bytes: int, free_bytes: int | None = None) -> int:
    """Return how many weight copies a decode-true timing rotates (at least 2, memory-capped)."""
    per_expert = expert_bytes(problem, fmt)
    touched = problem["top_k"] * min(per_expert.values())
    copies = max(2, 1 + math.ceil(L2_MULTIPLE * l2_bytes / touched))
    if free_bytes is not None:
        one = problem["experts"] * sum(per_expert.values())
        copies = max(1, min(copies, int(MEMORY_SHARE * free_bytes // one)))
    return copies


def l2_multiple(problem: dict, fmt: str, l2_bytes: int, copies: int) -> float:
    """Return the bytes between two uses of one weight copy at M = 1, in units of the L2."""
    touched = problem["top_k"] * min(expert_bytes(problem, fmt).values())
    return (copies - 1) * touched / l2_bytes if copies > 1 else touched / l2_bytes


def timing_label(timing: str, copies: int) -> str:
    """Return the label a timing's rows carry."""
    return "warm L2" if timing == "warm" else f"decode (cold L2, {copies} weight copies)"


def time_rotation(calls: list, repeats: int, max_calls: int = 10, fill_ms: float = 1.0) -> dict:
    """Return median/p10/p90 ms per call of a rotation of `calls` replayed in one CUDA graph."""
    rounds = 1
    if len(calls) < max_calls:  # else one rotation already holds the most calls a replay may
        probe, _ = time_gpu(list(calls), 3, 1)
        rounds = max(1, calls_to_fill(statistics.median(probe), fill_ms, max_calls) // len(calls))
    samples, method = time_gpu(list(calls) * rounds, repeats, 1)
    return {**summarize(samples), "timing": method, "calls_per_replay": len(calls) * rounds}


@dataclass(frozen=True)
class Method:
    """How a problem is timed: on which device, which draw (bench.seed + seed_shift), `decode` or
    `warm` (TIMINGS), and against how many experts' fp32 rows (None: every expert)."""

    device: str = "cuda"
    seed_shift: int = 0
    timing: str = "decode"
    check_experts: int | None = None


DECODE = Method()  # on the GPU, the first draw, cold L2, every expert checked


def effective(config: dict, fmt: str) -> dict:
    """Return the config as it runs: for fp8_block, BLOCK_SIZE_K cut to the scale block."""
    if fmt == "fp8_block" and config["BLOCK_SIZE_K"] > BLOCK:
        return {**config, "BLOCK_SIZE_K": BLOCK}
    return dict(config)


def _gemm_call(kernel, lx, problem, fmt, batch, blocks, config, gemm, weights):
    """Return a call that runs one GEMM of a batch in the engine's kernel."""
    up = gemm == "gate_up"
    args = (kernel, batch.a[gemm], weights.w[gemm], batch.c[gemm], blocks, config)
    given = {"top_k": problem["top_k"] if up else 1, "block_shape": block_shape(fmt)}
    given.update(topk_weights=None if up else batch.topk_weights, a_scale=batch.a_scale[gemm])
    return lambda: lx.launch(*args, b_scale=weights.scale[gemm], **given)


class EngineTimer:
    """One problem in one format and engine kernel, under one timing, every launch checked."""

    def __init__(
        self, engine: str, version: str, problem: dict, fmt: str, seed: int, alpha, how=DECODE
    ):
        import torch

        device, timing, self.check_experts = how.device, how.timing, how.check_experts
        self.engine, self.version, self.problem, self.fmt = engine, version, problem, fmt
        self.kernel, self.kernel_from = load(engine, version)
        self.lx = get(engine)
        self.device, self.alpha = device, alpha
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.dtype = torch.float16 if device == "cpu" else None  # the interpreter: no bf16 stores
        self.weights = formats.make_weights(problem, fmt, device, self.gen, dtype=self.dtype)
        if timing not in TIMINGS:
            raise ValueError(f"timing {timing!r}: expected one of {', '.join(TIMINGS)}")
        self.timing, self.copies, self.l2_bytes = timing, [self.weights], None
        if device == "cpu":  # Triton's interpreter: for tests, never for numbers
            self.label = "cpu (Triton interpreter)"
            return
        if timing == "decode":
            props = torch.cuda.get_device_properties(device)
            if not getattr(props, "L2_cache_size", 0):
                raise LookupError(f"{props.name}: no L2 size reported; decode timing needs it")
            self.l2_bytes = int(props.L2_cache_size)
            free, _ = torch.cuda.mem_get_info(device)
            count = weight_copies(problem, fmt, self.l2_bytes, free)
            for _ in range(count - 1):  # clones: the same result at other addresses
                w = {g: t.clone() for g, t in self.weights.w.items()}
                scale = {g: t if t is None else t.clone() for g, t in self.weights.scale.items()}
                self.copies.append(formats.Weights(fmt, w, scale))
        self.label = timing_label(timing, len(self.copies))

    def columns(self) -> dict:
        """Return its rows' leading columns: the engine, its kernel, the format and the problem."""
        head = {"engine": self.engine, "version": self.version, "kernel_from": self.kernel_from}
        return head | {"format": self.fmt} | {k: self.problem[k] for k in ("experts", "n")}

    def provenance(self) -> dict:
        """Return the timing's columns: label, weight copies, L2 size and L2 multiple."""
        l2, copies = self.l2_bytes, len(self.copies)
        reach = l2_multiple(self.problem, self.fmt, l2, copies) if l2 else None
        return {"timing": self.label, "weight_copies": copies, "l2_bytes": l2, "l2_multiple": reach}

    def batch(self, m: int, routing: str):
        """Return a fresh routed batch of m tokens."""
        drawn = (self.alpha, self.device, self.gen)
        return formats.make_batch(self.problem, self.weights, m, routing, *drawn, dtype=self.dtype)

    def time(self, config: dict, batch, repeats: int) -> dict:
        """Return both GEMMs' summed median, p10, p90 ms and the worse relative error."""
        config = effective(config, self.fmt)
        blocks = self.lx.blocks(batch.topk_ids, config["BLOCK_SIZE_M"], self.problem["experts"])
        total, worst = dict.fromkeys(("time_ms", "time_p10_ms", "time_p90_ms"), 0.0), 0.0
        engine = (self.kernel, self.lx, self.problem, self.fmt)
        for gemm in GEMMS:
            on = functools.partial(_gemm_call, *engine, batch, blocks, config, gemm)
            call = on(self.weights)
            batch.c[gemm].fill_(float("nan"))
            call()
            if gemm not in batch.refs:
                ref = formats.reference(self.problem, self.weights, batch, gemm, self.check_experts)
                rows = ref[:, 0].isfinite().nonzero().squeeze(1)  # the rows computed
                batch.refs[gemm] = (rows, ref[rows])
            rows, ref = batch.refs[gemm]
            worst = max(worst, rel_error(batch.c[gemm][rows], ref))
            if self.timing == "decode" and self.device != "cpu":
                t = time_rotation([on(w) for w in self.copies], repeats)
            else:
                t = time_call(call, repeats, 2, graph=True, max_calls=10, fill_ms=1.0)
            for key in total:
                total[key] += t[key]
        return {**total, "rel_err": worst if math.isfinite(worst) else float("inf")}


def _warm_one(job: tuple) -> tuple[int, str | None]:
    """Compile one (config, M) of a problem in a pool process; return (index, error)."""
    index, engine, version, problem, fmt, config, m = job
    try:
        import torch

        kernel, _ = load(engine, version)
        lx = get(engine)
        # top_k experts only (the weights' strides do not depend on their count), laid out
        # for the real count, which sets the path, the buffer sizes and so Triton's
        # specialisation of the kernel's integer arguments.
        few = {**problem, "experts": problem["top_k"]}
        gen = torch.Generator(device="cuda").manual_seed(0)
        weights = formats.make_weights(few, fmt, "cuda", gen)
        batch = formats.make_batch(few, weights, m, "uniform", 1.0, "cuda", gen)
        blocks = lx.blocks(batch.topk_ids, config["BLOCK_SIZE_M"], problem["experts"])
        for gemm in GEMMS:
            _gemm_call(kernel, lx, problem, fmt, batch, blocks, config, gemm, weights)()
        torch.cuda.synchronize()
        return index, None
    except Exception as exc:  # a compile or launch refusal is that config's result
        return index, last_line(exc)


def warm(engine: str, version: str, problem: dict, fmt: str, jobs: list, workers: int) -> dict:
    """Compile (config, M) jobs in parallel; return {(slug, M): error} of those refused."""
    with compile_pool(workers) as pool:
        failed = warm_all([(engine, version, problem, fmt, c, m) for c, m in jobs], pool)
    return {
        (space.config_slug(effective(jobs[i][0], fmt)), jobs[i][1]): e for i, e in failed.items()
    }


def warm_all(jobs: list[tuple], pool) -> dict:
    """Compile jobs of any problems in a pool (compile_pool); return {index: error} refused."""
    work = [(i, *job[:4], effective(job[4], job[3]), job[5]) for i, job in enumerate(jobs)]
    return {index: err for index, err in pool.map(_warm_one, work, chunksize=1) if err}
