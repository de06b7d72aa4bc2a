"""The tuning worker's compile step: a config per kernel, compiled in a pool before any timing."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp

from tilesweep.fused_moe import space
from tilesweep.fused_moe.case import torch_dtype
from tilesweep.fused_moe.journal import beat


def screened(spec: dict, configs: list[dict]) -> list[dict]:
    """Return the configs screened: each tile at the space's first GROUP_SIZE_M (run-time only)."""
    first = spec["space"]["GROUP_SIZE_M"][0]
    return [c for c in configs if c["GROUP_SIZE_M"] == first]


def compile_set(spec: dict, configs: list[dict]) -> list[dict]:
    """Return one config per distinct compiled kernel, less those a constraint rules out."""
    out, seen = [], set()
    for config in screened(spec, configs):
        key = space.tile_key(space.config_slug(config))
        if key in seen:
            continue
        seen.add(key)
        limit = spec["smem_limit_bytes"]
        if not space.problems_constraint(config, spec["dtype"], limit, spec["problems"]):
            out.append(config)
    return out


def refusal_status(reason: str, compiled: bool) -> str:
    """Return the status of a config that cannot be screened: launch, compile or constraint."""
    if reason.startswith("OutOfResources"):
        return "launch"
    return "compile" if compiled else "constraint"


def _compile_one(args: tuple) -> tuple[str, str | None]:
    """Compile one config (in a pool process) into Triton's cache; return (slug, error)."""
    config, dtype = args
    try:
        import torch

        from tilesweep.fused_moe import kernel as fm  # triton: this module loads without it

        dev = "cuda"
        e, n, k, rows = 2, 256, 512, 4
        op = torch_dtype(dtype)
        a = torch.zeros(rows, k, device=dev).to(op)
        b = torch.zeros(e, n, k, device=dev).to(op)
        c = torch.zeros(rows, n, device=dev, dtype=torch.bfloat16)
        bm = config["BLOCK_SIZE_M"]
        ids = torch.zeros(bm, dtype=torch.int32, device=dev)
        exp = torch.zeros(1, dtype=torch.int32, device=dev)
        post = torch.tensor([bm], dtype=torch.int32, device=dev)
        scale = space.scale_mode(dtype)
        a_s = torch.ones(rows, device=dev) if dtype == "fp8" else None
        b_s = torch.ones(e, n, device=dev) if dtype == "fp8" else None
        given = {"top_k": 1, "gather": False, "scale": scale, "a_scale": a_s, "b_scale": b_s}
        for weights in (None, torch.ones(rows, device=dev)):  # a runtime flag: one compile
            fm.invoke(a, b, c, (ids, exp, post), config, topk_weights=weights, **given)
        torch.cuda.synchronize()
        return space.config_slug(config), None
    except Exception as exc:  # a compile or launch refusal is a result: its last line
        return space.config_slug(config), f"{type(exc).__name__}: {str(exc).strip()[-300:]}"


def compile_pool(workers: int):
    """Return a pool of spawned processes (one per worker; reused across calls)."""
    return cf.ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn"))


def compile_once(spec, configs, key, done, journal, heartbeat, log) -> dict[str, str]:
    """Return {tile: error} of the compiles, compiled once and journalled for fresh workers."""
    if key in done:
        return done[key]["failed"]
    beat(heartbeat, "compile")
    work = [(c, spec["dtype"]) for c in compile_set(spec, configs)]
    with compile_pool(spec["compile_workers"]) as pool:
        done_compiles = pool.map(_compile_one, work, chunksize=4)
        failed = {space.tile_key(slug): err for slug, err in done_compiles if err}
    log(f"compiled {len(work)} configs, {len(failed)} refused")
    journal.append({"key": key, "phase": "compile", "failed": failed}, counts=False)
    return failed
