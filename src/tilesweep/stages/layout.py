"""Stage 4b: measure one layout's whole decode step at every batch that fits here."""

import json
import re

import pandas as pd

from tilesweep import backends
from tilesweep.cells import write_cell_table
from tilesweep.columns import STEP_COLUMNS, Status
from tilesweep.measure.step import extras as step_extras
from tilesweep.measure.step.extras import ENGINE, LEAN
from tilesweep.measure.whole_step import run_whole_step, step_rows
from tilesweep.provenance import stamp
from tilesweep.stages import logged


def _machine(world: int, bench: dict) -> tuple[bool, bool, str]:
    """Return (on GPUs, emulate one rank, why the layout cannot run here or '')."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    have = gpus if gpus else bench["step_cpu_world_cap"]
    if world <= have:
        return bool(gpus), False, ""
    if bench["step_emulate"]:
        return bool(gpus), True, ""
    what = f"this machine has {gpus} GPUs" if gpus else f"bench.step_cpu_world_cap is {have}"
    return bool(gpus), False, f"needs {world} devices; {what} (bench.step_emulate is off)"


def model_as_run(model: dict, layout: dict, bench: dict, cuda: bool) -> dict:
    """Return the model the step runs (cut to step_cpu_* on the CPU)."""
    if cuda:
        return dict(model)
    experts = min(model["routed_experts"], bench["step_cpu_experts"] * layout["ep"])
    return dict(
        model,
        routed_experts=experts,
        top_k=min(model["top_k"], experts),
        vocab=min(model["vocab"], bench["step_cpu_vocab"]),
    )


def step_spec(spec: dict, cuda: bool, emulate: bool = False) -> tuple[dict, list[dict]]:
    """Return (the whole-step spec, skipped rows with reasons); `emulate`: one rank runs alone."""
    layout, bench = spec["layout"], spec["bench"]
    model = model_as_run(spec["model"], layout, bench, cuda)
    batches, skipped = [], []
    for batch in spec["batches"]:
        if not cuda and batch > bench["step_cpu_max_batch"]:
            reason = f"batch {batch} is over the CPU cap of {bench['step_cpu_max_batch']} sequences"
            skipped.append({"batch": batch, "status": Status.SKIPPED, "reason": reason})
        else:
            batches.append(batch)
    runner = bench["step_runner"]
    if runner == "auto":
        runner = backends.default_step_runner(cuda)
    dense = bench["step_dense_layers"] if model.get("dense_layers", 0) else 0
    step = {
        "dense_layers": dense,
        "moe_layers": bench["step_moe_layers"],
        "context_len": bench["step_context_len"] if cuda else bench["step_cpu_context_len"],
        "batches": batches,
        "warmup": bench["warmup"] if cuda else min(bench["warmup"], 1),
        "repeats": bench["repeats"] if cuda else bench["cpu_repeats"],
        "seed": bench["seed"],
        "runner": runner,
        "mode": bench["step_mode"] if cuda else "eager",
        "fused": bench.get("step_kernels", "fused") == "fused",
        "kernel_lists": [LEAN],
    }
    if bench.get("step_kernel_list", LEAN) == ENGINE:
        skipped += engine_list(spec, step, model, cuda)
    return {
        "layout": layout,
        "model": model,
        "step": step,
        "kernels": spec.get("kernels", {}),
        "moe_table": spec.get("moe_table", {}),
        "emulate": emulate,
    }, skipped


# Why the engine's list is not run on the CPU (bench.step_kernel_list=engine).
ENGINE_CPU = (
    "bench.step_kernel_list=engine runs on a GPU only: the engine's extra kernels are Triton and "
    "torch kernels launched inside the step's CUDA graph, and the CPU step is eager torch ops; "
    "the lean step beside it is measured"
)


def engine_list(spec: dict, step: dict, model: dict, cuda: bool) -> list[dict]:
    """Add the engine's list to `step`; return skipped rows where it cannot run here."""
    engine, layers = spec.get("engine") or {}, (step["dense_layers"], step["moe_layers"])
    name = engine.get("name", "none")
    arch = None
    if cuda:  # the list's arch-bound entries (only_arch) as the GPU at hand runs them
        import torch  # heavy: loaded only where a GPU runs the list

        if torch.cuda.is_available():
            arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    try:
        dtype = spec.get("weight_dtype", "bf16")
        expanded = step_extras.expand(engine, model, dtype, *layers, arch=arch)
    except ValueError as exc:
        columns = {"kernel_list": f"engine-faithful ({name}: no list)"}
        why = f"bench.step_kernel_list=engine: {exc}"
    else:
        columns = step_extras.row_columns(expanded)
        if cuda:
            step["kernel_lists"].append(ENGINE)
            step["engine_list"] = expanded
            return []
        why = ENGINE_CPU
    return [
        {"batch": b, "status": Status.SKIPPED, "reason": why, **columns} for b in spec["batches"]
    ]


def list_columns(run_spec: dict) -> list[dict]:
    """Return the kernel-list columns of each list the spec runs (lean, then the engine's)."""
    step = run_spec["step"]
    out = [step_extras.lean_columns()]
    if ENGINE in step["kernel_lists"]:
        out.append(step_extras.row_columns(step["engine_list"]))
    return out


_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b")


def failure_reason(text: str) -> str:
    """Return a rank traceback's last `SomeError: ...` line, else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if _ERROR_LINE.match(line)]
    return (named or lines or [""])[-1]


def bench_layout(cell_json: str, table_path: str, log_path: str | None = None) -> pd.DataFrame:
    """Measure one layout's whole decode step at every batch; write and return the table."""
    spec = json.loads(cell_json)
    layout, bench = spec["layout"], spec["bench"]
    world = layout["world"]
    cuda, emulate, why = _machine(world, bench)
    run_spec, skipped = step_spec(spec, cuda, emulate)
    lists = list_columns(run_spec)
    base = {
        **{k: layout[k] for k in ("layout", "tp", "pp", "ep")},
        "world": world,
        "model": spec["model"]["name"],
        "backend": "nccl" if cuda else "gloo",
        **stamp(),
    }
    rows = [{**base, **lists[0], **s} for s in skipped]

    def failed(status: str, reason: str) -> list[dict]:
        return [
            {**base, "batch": b, "status": status, "reason": reason, **cols}
            for cols in lists
            for b in batches
        ]

    with logged(log_path) as log:
        batches = run_spec["step"]["batches"]
        if why:
            rows += failed(Status.SKIPPED, why)
            batches = []
        said = {"emulated": " (one rank emulated)" if emulate else "", "batches": batches}
        log.info(
            "layout %(layout)s on %(world)d %(backend)s ranks%(emulated)s: batches %(batches)s",
            base | said,
        )
        if batches:
            try:
                procs = 1 if emulate else world
                ranks = run_whole_step(run_spec, procs, cuda, bench["step_timeout_s"])
                rows += [{**base, **r} for r in step_rows(ranks, run_spec, layout["layout"])]
            except Exception as exc:  # a failed or hung layout is a row per batch, not a crash
                status = Status.TIMEOUT if isinstance(exc, TimeoutError) else Status.RUNTIME
                msg = failure_reason(str(exc)) or repr(exc)
                log.info("layout %s failed: %s\n%s", layout["layout"], msg, exc)
                rows += failed(status, msg)
        for row in rows:
            log.info("batch %s: %s %s", row["batch"], row["status"], row.get("step_ms", ""))
    frame = pd.DataFrame(rows).sort_values("batch", kind="stable").reset_index(drop=True)
    frame.loc[frame["status"] != Status.OK, "source"] = "not measured"
    frame = frame.reindex(columns=[*STEP_COLUMNS, *(c for c in frame if c not in STEP_COLUMNS)])
    write_cell_table(table_path, frame)
    return frame
