"""The fused-MoE tuning worker: compiles the space, screens every config at every key and the
variants of the best tiles, then times finalists, defaults, torch and the engine's kernel. Each
finished item is a journal line and each item starts with a heartbeat, so a killed or crashed worker
loses only the item in flight; with items_per_worker = N it exits after N items for a fresh one.
Its compile step: a config per compiled kernel, in a pool of processes before any timing.
Usage: python -m tilesweep.fused_moe.tune_worker SPEC.json JOURNAL.jsonl HEARTBEAT.json"""

import functools
import json
import sys
from pathlib import Path

from tilesweep.errors import last_line
from tilesweep.fused_moe import case, space
from tilesweep.fused_moe.engines.base import get, installed
from tilesweep.fused_moe.engines.timer import compile_pool
from tilesweep.fused_moe.journal import FINAL, SCREEN, Journal, Yield, beat, item_key, read_journal
from tilesweep.measure.timing import time_call


def _engine_rows(spec: dict, problem: dict, weights, batch, rows: list, routing: str) -> list:
    """Return each engine's whole-MoE timing of a batch (vLLM's fused_experts under
    override_config, compared with itself only), or a skipped row saying why."""
    out = []
    for engine in spec["engines"]:
        base = {"source": "engine", "runner": f"engine:{engine}", "routing": routing}
        if not installed(engine):
            why = f"{engine} is not installed"
        elif (whole_moe := get(engine).whole_moe_calls) is None:
            why = f"the engine runner times no whole MoE call of {engine}; installed, untimed"
        elif (tuned := _best(spec, rows)) is None:
            why = "no tuned config at this M"
        else:
            why = None
        if why:
            out.append({**base, "status": "skipped", "reason": why})
            continue
        try:
            for label, call in whole_moe(problem, weights, batch, tuned, spec["dtype"]).items():
                timing = _graph_timed(spec, call)
                out.append({**base, "config_from": label, "status": "ok", "whole": timing})
        except NotImplementedError as exc:
            out.append({**base, "status": "unsupported", "reason": str(exc)})
        except Exception as exc:  # an engine API change is a result, not a crash
            out.append({**base, "status": "error", "reason": last_line(exc)})
    return out


def _graph_timed(spec: dict, call) -> dict:
    """Return a call's final timing in CUDA graphs, amortised as the spec says."""
    return time_call(call, spec["final_repeats"], 2, graph=True, **space.graph_amortisation(spec))


def _best(spec: dict, rows: list[dict]) -> dict | None:
    """Return the config the project kernel's table names for a batch (space.pick, guarded)."""
    sources = space.engine_sources(spec["engine_defaults"])
    ok = [r for r in rows if r.get("status") == "ok" and r["source"] in sources]
    timed = [
        (r["slug"], r["routing"], r["source"], r["gate_up"]["time_ms"] + r["down"]["time_ms"])
        for r in ok
    ]
    slug = space.pick_from(timed, spec["routing"], space.guard_source(spec))
    return next((r["config"] for r in ok if r["slug"] == slug), None)


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


def _compile_one(args: tuple) -> tuple[str, str | None]:
    """Compile one config (in a pool process) into Triton's cache; return (slug, error)."""
    config, dtype = args
    try:
        import torch

        from tilesweep.fused_moe import kernel as fm  # triton: this module loads without it

        dev = "cuda"
        e, n, k, rows = 2, 256, 512, 4
        op = case.torch_dtype(dtype)
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


def candidates(spec: dict) -> list[dict]:
    """Return every config of the search space with the engines' defaults appended (deduped)."""
    defaults = [
        space.engine_default(rules, m, problem["experts"], spec["dtype"])
        for problem in spec["problems"]
        for m in spec["final_batches"]
        for rules in spec["engine_defaults"].values()
    ]
    return space.distinct([*space.search_space(spec["space"]), *defaults])


def variant_configs(spec: dict, done: dict, p_idx: int) -> list[dict]:
    """Return the variants to screen: each spec variant of the `variant_tiles` best tiles."""
    best = [_finalists(done, p_idx, m, spec["variant_tiles"]) for m in spec["batch_keys"]]
    tiles = space.distinct([config for configs in best for config in configs])
    return [{**tile, **variant} for tile in tiles for variant in spec["variants"]]


def _screen(spec, problem, p_idx, weights, batches, configs, failed, journal, heartbeat, done):
    """Screen the configs on one problem: correctness at one batch, then every batch key."""
    dtype, smem = spec["dtype"], spec["smem_limit_bytes"]
    shapes = space.gemm_shapes(problem)
    for config in configs:
        slug = space.config_slug(config)
        key = item_key(SCREEN, p_idx, slug)
        if key in done:
            continue
        beat(heartbeat, key)
        rec = {"key": key, "phase": SCREEN, "problem": p_idx, "config": config, "slug": slug}
        refused = failed.get(space.tile_key(slug))
        why = refused or space.problems_constraint(config, dtype, smem, [problem])
        if why:
            status = "compile" if refused is not None else "constraint"
            status = "launch" if why.startswith("OutOfResources") else status
            journal.append({**rec, "status": status, "reason": why})
            continue
        try:
            err, bad = case.check(config, problem, weights, batches[spec["check_batch"]])
            if bad:
                journal.append({**rec, "status": "correctness", "reason": bad})
                continue
            times = {}
            for m in spec["batch_keys"]:
                for gemm in shapes:
                    call = case.fused_call(config, problem, weights, batches[m], gemm)
                    t = time_call(call, spec["screen_repeats"], 1, graph=False)
                    times[f"{gemm}|{m}"] = t["time_ms"]
        except NotImplementedError as exc:  # e.g. a variant this Triton cannot build
            journal.append({**rec, "status": "unsupported", "reason": str(exc)})
            continue
        except Exception as exc:  # the launch was refused or failed: a result, with its reason
            status = "launch" if "OutOfResources" in type(exc).__name__ else "runtime"
            journal.append({**rec, "status": status, "reason": last_line(exc)})
            if status == "runtime":
                raise  # a failed launch can poison the context: let the parent restart us
            continue
        journal.append({**rec, "status": "ok", "rel_err": err, "times": times})


def _finalists(
    done: dict, p_idx: int, m: int, count: int, variants: bool = False, direct: bool = True
) -> list[dict]:
    """Return the `count` fastest screened configs at m (SORT variants on the direct path only)."""
    scored = []
    for rec in done.values():
        config, t = rec.get("config", {}), rec.get("times")
        if rec["phase"] != SCREEN or rec["problem"] != p_idx or rec["status"] != "ok":
            continue
        if space.is_engine_config(config) == variants or (config.get("SORT") and not direct):
            continue
        scored.append((t[f"gate_up|{m}"] + t[f"down|{m}"], rec["slug"], config))
    return [cfg for _, _, cfg in sorted(scored)[:count]]


def _final_entries(spec: dict, problem: dict, p_idx: int, m: int, done: dict) -> list[tuple]:
    """Return the (source, config) pairs timed at final batch m."""
    near = space.nearest_key(spec["batch_keys"], m)
    direct = space.is_direct(m, problem, spec["direct_sparsity"])
    picks = [("finalist", c) for c in _finalists(done, p_idx, near, spec["finalists"])]
    count = spec["variant_finalists"]
    picks += [("variant", c) for c in _finalists(done, p_idx, near, count, True, direct)]
    groups = spec["space"]["GROUP_SIZE_M"]
    entries = [(source, {**c, "GROUP_SIZE_M": g}) for source, c in picks for g in groups]
    for engine_name, rules in spec["engine_defaults"].items():
        cfg = space.engine_default(rules, m, problem["experts"], spec["dtype"])
        entries.append((f"{engine_name}-default", cfg))
    return entries


def _timed_rows(spec, problem, weights, batch, entries, routing) -> list[dict]:
    """Return one row per entry and the torch baseline, timed in CUDA graphs at one batch."""
    touched = int(batch.topk_ids.unique().numel())
    rows = []
    for source, config in entries:
        row = {"source": source, "routing": routing, "config": config, "touched": touched}
        row["slug"] = space.config_slug(config)
        try:
            _, bad = case.check(config, problem, weights, batch)
            if bad:
                rows.append({**row, "status": "correctness", "reason": bad})
                continue
            for gemm in space.gemm_shapes(problem):
                call = case.fused_call(config, problem, weights, batch, gemm)
                row[gemm] = _graph_timed(spec, call)
            rows.append({**row, "status": "ok"})
        except Exception as exc:
            rows.append({**row, "status": "launch", "reason": last_line(exc)})
    name = case.baseline_name(spec["dtype"])
    row = {"source": "baseline", "runner": name, "routing": routing, "touched": touched}
    try:
        for gemm in space.gemm_shapes(problem):
            row[gemm] = _graph_timed(spec, case.baseline_call(problem, weights, batch, gemm))
        rows.append({**row, "status": "ok"})
    except NotImplementedError as exc:
        rows.append({**row, "status": "unsupported", "reason": str(exc)})
    except Exception as exc:
        rows.append({**row, "status": "runtime", "reason": last_line(exc)})
    return rows


def _final(spec, problem, p_idx, weights, batches_by_routing, journal, heartbeat, done):
    """Time finalists, engine defaults, the baseline and the engine at every final batch."""
    screened_keys = set(spec["batch_keys"])
    for m in spec["final_batches"]:
        key = item_key(FINAL, p_idx, str(m))
        if key in done:
            continue
        beat(heartbeat, key)
        entries = _final_entries(spec, problem, p_idx, m, done)
        rows = []
        for routing, batches in batches_by_routing.items():
            rows += _timed_rows(spec, problem, weights, batches[m], entries, routing)
        # The engine's kernel, once every routing is timed: with the project kernel's tuned pick
        for routing, batches in batches_by_routing.items():
            rows.extend(_engine_rows(spec, problem, weights, batches[m], rows, routing))
            batches[m].refs.clear()  # this batch is done: free its fp32 references
        record = {"key": key, "phase": FINAL, "problem": p_idx, "m": m, "rows": rows}
        journal.append({**record, "screened": m in screened_keys})


def main(spec_path: str, journal_path: str, heartbeat: str) -> None:
    """Run the spec's unfinished items, journalling each (at most items_per_worker, if set)."""
    spec = json.loads(Path(spec_path).read_text())
    journal = Journal(journal_path, spec.get("items_per_worker", 0))
    try:
        _run(spec, journal, heartbeat)
    except Yield:
        beat(heartbeat, "yield")
        return
    beat(heartbeat, "done")


def _batches(spec: dict, problem: dict, weights, device: str, gen) -> dict:
    """Return {routing: {batch: its routed batch}} at every batch key and final batch."""
    ms, alpha = sorted(set(spec["batch_keys"]) | set(spec["final_batches"])), spec["zipf_alpha"]

    def batch(m: int, routing: str):
        direct = space.is_direct(m, problem, spec["direct_sparsity"])
        return case.make_batch(problem, weights, m, routing, alpha, device, gen, direct)

    return {routing: {m: batch(m, routing) for m in ms} for routing in spec["routing"]}


def _run(spec: dict, journal: Journal, heartbeat: str) -> None:
    """Compile, screen, screen the variants and time the finals of every problem."""
    import torch

    done = read_journal(journal.path)
    log = functools.partial(print, flush=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    configs = candidates(spec)
    in_space = screened(spec, configs)  # the engines' space, as screened
    problems = range(len(spec["problems"]))
    screens = [item_key(SCREEN, p, space.config_slug(c)) for p in problems for c in in_space]
    failed = {}
    if device == "cuda" and any(k not in done for k in screens):
        key = item_key("compile", 0, "space")
        failed = compile_once(spec, configs, key, done, journal, heartbeat, log)
    gen = torch.Generator(device=device)
    for p_idx, problem in enumerate(spec["problems"]):
        if item_key(FINAL, p_idx, str(spec["final_batches"][-1])) in done:
            continue  # every item of this problem is journalled
        gen.manual_seed(spec["seed"] + p_idx)
        weights = case.make_weights(problem, spec["dtype"], device, gen)
        batches = _batches(spec, problem, weights, device, gen)
        uniform = batches[spec["routing"][0]]
        _screen(spec, problem, p_idx, weights, uniform, in_space, failed, journal, heartbeat, done)
        done = read_journal(journal.path)
        variants = variant_configs(spec, done, p_idx)
        todo = [c for c in variants if item_key(SCREEN, p_idx, space.config_slug(c)) not in done]
        if device == "cuda" and todo:
            key = item_key("compile", p_idx, "variants")
            failed |= compile_once(spec, variants, key, done, journal, heartbeat, log)
        _screen(spec, problem, p_idx, weights, uniform, variants, failed, journal, heartbeat, done)
        done = read_journal(journal.path)
        _final(spec, problem, p_idx, weights, batches, journal, heartbeat, done)
        done = read_journal(journal.path)
        del weights, batches, uniform
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(*sys.argv[1:4])
