"""A measured whole decode step of a depth-reduced model (docs/pipeline.md, bench_layout), one
process per device: the ranks' processes and the table rows.

Per stage `dense_layers` dense and `moe_layers` MoE layers at full width over a real KV cache. TP
splits heads, FFN and expert widths (all-reduce after attention and FFN/MoE; LM head by vocabulary);
EP runs attention data-parallel and splits the experts (all-to-all dispatch and combine). PP splits
the batch into `pp` micro-batches passed around a ring, so one step is `pp` slots, full from the
first. Routing is balanced. A step is timed whole after a barrier (slowest rank; p10/p50/p90), its
parts on separate repeats (step.rank, step.weights, step.buffers, step.attention, step.moe)."""

import json
from pathlib import Path

from tilesweep.measure.process_group import init_rank, run_ranks
from tilesweep.measure.step import extras as step_extras
from tilesweep.measure.step.extras import ENGINE
from tilesweep.measure.step.graph_timing import run_batch
from tilesweep.measure.step.rank import StepRank
from tilesweep.measure.step.shapes import emulated_rank, local_sequences
from tilesweep.measure.timing import percentile

# The engine's list (bench.step_kernel_list=engine): its results and failures.
ENGINE_KEY, ENGINE_ERROR = "engine_batches", "engine_error"


def _worker(rank: int, world: int, port: int, spec: dict, cuda: bool, out_dir: str) -> None:
    """Run every batch of the spec on one rank; write this rank's results as JSON."""
    torch, dist = init_rank(rank, world, port, cuda)
    try:
        me = StepRank(torch, dist, rank, spec, cuda)
        step = spec["step"]

        def batches() -> list[dict]:
            return [run_batch(me, b, step["warmup"], step["repeats"]) for b in step["batches"]]

        result = {"rank": rank, **me.at, "batches": batches()}
        if ENGINE in step.get("kernel_lists", ()):  # the same step with the engine's extras
            me.use_kernel_list(ENGINE)
            try:
                result[ENGINE_KEY] = batches()
            except Exception as exc:  # the lean rows stand; the engine's are failure rows
                result[ENGINE_ERROR] = (str(exc).strip().splitlines() or [repr(exc)])[-1][:300]
        me.sync()
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


def run_whole_step(spec: dict, world: int, cuda: bool, timeout_s: float) -> list[dict]:
    """Return every rank's results over `world` processes; raise past timeout_s."""
    return run_ranks(_worker, world, (spec, cuda), cuda, timeout_s, writers=world)


def step_rows(ranks: list[dict], spec: dict, layout_name: str) -> list[dict]:
    """Return a row per batch and kernel list: step percentiles, part medians, what ran."""
    label = measured_label(spec)
    rows = _list_rows(ranks, spec, layout_name, "batches", label, step_extras.lean_columns())
    step = spec["step"]
    if ENGINE not in step.get("kernel_lists", ()):
        return rows
    engine = step["engine_list"]
    columns = step_extras.row_columns(engine)
    error = next((r[ENGINE_ERROR] for r in ranks if ENGINE_ERROR in r), "")
    if error:
        return rows + [
            {"layout": layout_name, "batch": b, "status": "runtime", "reason": error, **columns}
            for b in step["batches"]
        ]
    run = engine["run"]
    label += (
        f"; with the {engine['list']}'s extra kernels as stand-ins: {run['per_layer']:g} per "
        f"layer, {run['per_moe_layer']:g} more per MoE layer, {run['per_dense_layer']:g} more per "
        f"dense layer, {run['per_step']:g} per step (measure/step/extras)"
    )
    return rows + _list_rows(ranks, spec, layout_name, ENGINE_KEY, label, columns)


def measured_label(spec: dict) -> str:
    """Return the label of the measured rows of a spec: what ran, and on how many ranks."""
    step = spec["step"]
    shape = (
        f"{step['dense_layers']} dense + {step['moe_layers']} MoE layers per stage, "
        f"context {step['context_len']}, bf16"
    )
    if not spec.get("emulate"):
        return f"measured ({shape})"
    world = spec["layout"]["tp"] * spec["layout"]["pp"] * spec["layout"]["ep"]
    return (
        f"measured (one rank emulated: rank {emulated_rank(spec['layout'])} of {world}, "
        f"collectives left out; {shape})"
    )


def _list_rows(
    ranks: list[dict], spec: dict, layout_name: str, key: str, label: str, columns: dict
) -> list[dict]:
    """Return the rows of one kernel list's results (ranks' `key`), with its `columns`."""
    step, model = spec["step"], spec["model"]
    layers = step["dense_layers"] + step["moe_layers"]
    rows = []
    for index, batch in enumerate(step["batches"]):
        first = ranks[0][key][index]
        if first.get("skipped"):
            skipped = {"status": "skipped", "reason": first["skipped"], **columns}
            rows.append({"layout": layout_name, "batch": batch, **skipped})
            continue
        whole = first["whole_ms"]  # already the max over ranks
        row = {
            "layout": layout_name,
            **{k: spec["layout"][k] for k in ("tp", "pp", "ep")},
            "batch": batch,
            "sequences_run": local_sequences(batch, spec["layout"]) * spec["layout"]["ep"],
            "context_len": step["context_len"],
            "dense_layers_run": step["dense_layers"],
            "moe_layers_run": step["moe_layers"],
            "routed_experts_run": model["routed_experts"],
            "top_k_run": model["top_k"],
            "vocab_run": model["vocab"],
            "runner": step["runner"],
            "step_ms": percentile(whole, 0.5),
            "step_p10_ms": percentile(whole, 0.1),
            "step_p90_ms": percentile(whole, 0.9),
            "repeats": len(whole),
            "finite": all(r[key][index]["finite"] for r in ranks),
            "measured_label": label,
            "emulated": bool(spec.get("emulate")),
            "timing": first["timing"],
            "eager_step_ms": percentile(first["eager_ms"], 0.5),
            **launch_columns(first, whole),
            "graph_error": first.get("graph_error", ""),
            "moe_config": first.get("moe_config", ""),
            "step_kernels": first.get("step_kernels", ""),
        }
        launches = max((r[key][index]["launches"] for r in ranks), key=lambda c: sum(c.values()))
        row["launches"] = sum(launches.values())
        ran = sum(1 for n in first["micro_batches"] if n)
        row.update(columns, kernels_per_layer=step_extras.kernels_per_layer(launches, layers, ran))
        row.update({f"launches_{name}": n for name, n in sorted(launches.items())})
        busiest = _busiest_parts([rank[key][index]["parts"] for rank in ranks])
        row.update({f"part_{name}_ms": ms for name, ms in sorted(busiest.items())})
        row["status"] = "ok" if row["finite"] else "correctness"
        row["reason"] = "" if row["finite"] else "non-finite activations after the step"
        rows.append(row)
    return rows


def _busiest_parts(samples_per_rank: list[list[dict]]) -> dict[str, float]:
    """Return the median ms of each named part of the step on the rank whose parts sum most."""
    per_rank = []
    for samples in samples_per_rank:
        names = {n for sample in samples for n in sample}
        per_rank.append({n: percentile([s.get(n, 0.0) for s in samples], 0.5) for n in names})
    return max(per_rank, key=lambda parts: sum(parts.values()))


def launch_columns(result: dict, whole: list[float]) -> dict:
    """Return `graph_launch_ms` (unfronted less fronted median) and `launch_exposed`."""
    launched = result.get("launched_ms")
    if not launched:
        return {"graph_launch_ms": None, "launch_exposed": None}
    return {
        "graph_launch_ms": percentile(launched, 0.5) - percentile(whole, 0.5),
        "launch_exposed": result.get("launch_exposed", 0),
    }
