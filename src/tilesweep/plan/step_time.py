"""A whole decode step of one layout x batch, composed from parts (step_parts) timed by a part
timer (part_timers). Parts run one after another (no overlap of communication is modelled).

Pipeline: `batch` sequences are split into m = min(pp, batch) micro-batches. A token of one
micro-batch must pass every stage and every hop, so
  TPOT = max(sum of the stages' times + pp hops, m * slowest stage time);
tokens/s = batch / TPOT. When the path sets TPOT the split is taken over the whole path (the
return hop included); else over the slowest stage's m micro-batches. EP: each layer waits for
its busiest rank under random top-k routing (`step_parts.busiest_rank`)."""

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from tilesweep.plan.architecture import ACT_BYTES, prompt_attention
from tilesweep.plan.interconnect import ONE_SHOT, floored_ms, topology_numbers
from tilesweep.plan.memory_fit import layer_counts, stage_layers
from tilesweep.plan.part_timers import Timer, roofline_timer
from tilesweep.plan.prompt_load import UNCHUNKED, PromptLoad, prompt_chunks
from tilesweep.plan.step_parts import make_part, stage_collectives, stage_parts
from tilesweep.settings import DeploymentSettings, HardwareSpec, Layout, ModelSettings

# Part kinds that serve the decoding sequences alone: a prefilling prompt's rows never read
# another sequence's KV cache (its attention over its own prompt: prompt_parts), and a prompt's
# logits are its last position's only (SGLang 0.5.6.post2 srt/layers/logits_processor.py:414-434
# prunes an extend batch's hidden states to each sequence's last index before the lm_head).
DECODE_ONLY_KINDS = ("attention", "attention_gqa", "indexer", "lm_head")
# The parts a step's time is split into (a stage time holds each under its name).
SPLIT_PARTS = ("memory", "math", "communication", "other")


@dataclass(frozen=True)
class StepCase:
    """One layout x batch to compose, and what its parts are timed with."""

    model: ModelSettings
    dep: DeploymentSettings
    hw: HardwareSpec
    layout: Layout
    batch: int
    timer: Timer = roofline_timer
    measured_floors: dict | None = None  # the collectives' latency floors measured here
    layer_overrides: dict | None = None
    extra_parts: Callable | None = None  # an engine's extra kernels (stage, last) -> parts
    prompt: PromptLoad = UNCHUNKED  # how the engine runs an arriving prompt's rows


def _at_prompt_size(step: StepCase, parts: list[dict]) -> list[dict]:
    """Return the parts with the expert and dense GEMMs at the engine's cited e_math at prompt
    rows (each where its engine file gives one for this GPU, and for dense ones this dtype)."""
    cited = {(dtype, kind): e for dtype, kind, e in step.prompt.linear_e_math}
    if step.prompt.expert_e_math is not None:  # any dtype: the entry is the weight format's
        experts = (p for p in parts if p["kind"] == "expert_gemm")
        cited |= {(p["dtype"], p["kind"]): step.prompt.expert_e_math for p in experts}
    return [
        dict(p, e_math=cited[p["dtype"], p["kind"]]) if (p["dtype"], p["kind"]) in cited else p
        for p in parts
    ]


def _parts(step: StepCase, stage: dict, micro, first, last, prefill, fused=False) -> list:
    """Return the parts one rank of a stage runs for a micro-batch (with prompt and extra parts):
    `prefill` prompt rows carried through the decode step's layers (mixed); micro 0: a prefill
    pass of its own over them (separate: every layer's weights read again, one row's logits, no
    decoding sequence's attention)."""
    model, dep, layout = step.model, step.dep, step.layout
    parts = stage_parts(model, dep, layout, stage, micro or 1, first, last)
    if prefill:
        loaded = stage_parts(model, dep, layout, stage, micro + prefill, first, last)
        carried = _at_prompt_size(step, [p for p in loaded if p["kind"] not in DECODE_ONLY_KINDS])
        if micro:
            parts = [p for p in parts if p["kind"] in DECODE_ONLY_KINDS] + carried
        else:
            parts = carried + [p for p in parts if p["kind"] == "lm_head"]
        parts += prompt_parts(model, dep, layout, stage, prefill, step.hw)
    if step.extra_parts is not None:
        parts = parts + step.extra_parts(stage, last, fused)
    return parts


def prompt_parts(model, dep, layout, stage, rows, hw) -> list[dict]:
    """Return the attention one rank runs over `rows` rows of an arriving prompt, none uncited."""
    cited = hw.prompt_attention
    if not cited or not dep.input_len:
        return []
    share = rows / dep.input_len
    heads = model.attention.heads / layout.tp
    layers = stage["dense"] + stage["moe"]
    out = []
    for sliding, count in ((False, layers - stage["sliding"]), (True, stage["sliding"])):
        if not count:
            continue
        core = prompt_attention(model, dep, heads, sliding)
        for kind, flops, nbytes, dtype in (
            ("prompt_attention", core["flops"], core["bytes"], "bf16"),
            ("prompt_indexer", core["index_flops"], core["index_bytes"], "fp8"),
        ):
            if not flops:
                continue
            name = kind + ("_sliding" if sliding else "")
            more = {"launches": 1.0, "e_math": cited.e_math}
            out.append(make_part(name, kind, share * nbytes, share * flops, dtype, count, **more))
    return out


def _comm_gap(why: str, hw: HardwareSpec) -> str:
    """Return why a collective has no time, naming the file its figures would come from."""
    where = f"conf/hardware/{hw.name}.yaml"
    if hw.interconnect == "measured":
        where = "the collectives measured here"
    return f"{why.split(';')[0]} in {where}"


def comm_gap_bound(gaps: list[str]) -> str:
    """Return the bound of a row whose step has no communication time: 'gap (...)'."""
    reason = next((g.split(": ", 1)[1] for g in gaps if ": " in g), "")
    return f"gap (communication unknown: {reason})" if reason else "gap (communication unknown)"


def _stage_time(step: StepCase, numbers, stage: dict, micro: int, first, last, prefill) -> dict:
    """Return one stage's {memory, math, comm, other, roof_*, kernel_ms, sources, gaps, peak};
    micro 0 with `prefill` rows: a prefill pass of its own (separate)."""
    hw, dep = step.hw, step.dep
    colls = [
        (c, *floored_ms(c["collective"], c["n"], c["bytes"], numbers, step.measured_floors))
        for c in stage_collectives(step.model, step.layout, stage, micro or prefill, first)
    ]
    fused = dep.pcie_allreduce == "one_shot_norm" and any(
        c["name"] == "tp_all_reduce" and why.startswith(ONE_SHOT) for c, _, why in colls
    )
    parts = _parts(step, stage, micro, first, last, prefill, fused)
    acc = dict.fromkeys(
        (*SPLIT_PARTS, "roof_memory", "roof_math", "mem_kernel", "math_kernel"), 0.0
    )
    sources, gaps, comm_gaps, peak = set(), [], [], 0.0
    for part in parts:
        t = step.timer(part, hw)
        c = part["count"]
        kernel = t["memory_ms"] + t["math_ms"]
        if kernel > 0:
            peak = max(peak, max(t["roof_memory_ms"], t["roof_math_ms"] or 0.0) / kernel)
        sources.add(t["source"])
        if t["gap"]:
            gaps.append(f"{part['name']}: {t['gap']}")
        acc["memory"] += c * t["memory_ms"]
        acc["math"] += c * t["math_ms"]
        # Launch-aware timers give each part's fixed cost; others take the deployment's gap.
        acc["other"] += c * t.get("launch_ms", dep.kernel_gap_us * 1e-3)
        # A part's kernel time (both terms: the bound one and the other's unhidden share)
        # against its binding roofline term.
        if t["memory_ms"] > 0 and t["memory_ms"] >= t["math_ms"]:
            acc["mem_kernel"] += c * (t["memory_ms"] + t["math_ms"])
            acc["roof_memory"] += c * t["roof_memory_ms"]
        else:
            acc["math_kernel"] += c * (t["math_ms"] + t["memory_ms"])
            acc["roof_math"] += c * t["roof_math_ms"]
    for coll, ms, why in colls:
        acc["communication"] += coll["count"] * ms
        if math.isnan(ms):
            comm_gaps.append(f"{coll['name']}: {_comm_gap(why, hw)}")
    acc["time"] = acc["memory"] + acc["math"] + acc["communication"] + acc["other"]
    return acc | dict(sources=sources, gaps=gaps + comm_gaps, peak=peak, comm_gaps=comm_gaps)


def _hops(model: ModelSettings, layout: Layout, micro: int, numbers, measured_floors) -> tuple:
    """Return (one PP hop's time, the return hop's, why none); (0, 0, '') without PP."""
    if layout.pp == 1:
        return 0.0, 0.0, ""
    rows = math.ceil(micro / layout.ep)
    hop, why = floored_ms("send_recv", 2, rows * model.hidden * ACT_BYTES, numbers, measured_floors)
    back, _ = floored_ms("send_recv", 2, rows * 8, numbers, measured_floors)
    return hop, back, why


def _achieved(slow: dict) -> dict:
    """Return the roofline fraction the slowest stage's kernels reach, {} where none takes time."""
    if slow["mem_kernel"] >= slow["math_kernel"] and slow["mem_kernel"] > 0:
        return {"bandwidth": slow["roof_memory"] / slow["mem_kernel"], "math": 0.0}
    if slow["math_kernel"] > 0:
        return {"bandwidth": 0.0, "math": slow["roof_math"] / slow["math_kernel"]}
    return {}


def _path_split(times: list[dict], hops: float, m: int, pp: int) -> tuple[float, dict, dict]:
    """Return (TPOT, split in ms, slowest stage's time) of the stages, hops and micro-batches."""
    path = sum(t["time"] for t in times) + hops
    slow = max(times, key=lambda t: t["time"])
    tpot = max(path, m * slow["time"])
    # The bound is taken over the token's whole path: when the path sets the time, every
    # stage's work and every hop is on it (a bubble is the other stages' work, not `other`);
    # when the slowest stage does, its m micro-batches are.
    if pp > 1 and path >= m * slow["time"]:
        split = {part: sum(t[part] for t in times) for part in SPLIT_PARTS}
        split["communication"] += hops
    else:
        split = {part: m * slow[part] for part in SPLIT_PARTS}
    return tpot, split, slow


def compose_step(case: StepCase, topology: str | None = None, prefill: int = 0) -> dict:
    """Return one layout x batch's step: tpot_ms, tokens/s, split (ms), bound inputs and labels.
    `prefill`: prompt rows each micro-batch carries through the linear layers and experts (a
    serving load's arriving requests; batch 0: a prefill pass of its own over them)."""
    model, hw, layout, batch = case.model, case.hw, case.layout, case.batch
    numbers, ic_label = topology_numbers(hw, topology)
    pp = layout.pp
    per_stage = (case.layer_overrides or {}).get("per_stage")  # depth-reduced: on every stage
    counts = layer_counts(model, case.layer_overrides)
    stages = [dict(per_stage, sliding=0)] * pp if per_stage else stage_layers(counts, pp)
    m = max(1, min(pp, batch))
    micro = math.ceil(batch / m)
    rows = math.ceil(prefill / m)
    times = [
        _stage_time(case, numbers, st, micro, i == 0, i == pp - 1, rows)
        for i, st in enumerate(stages)
    ]
    hop, back, hop_why = _hops(model, layout, micro or rows, numbers, case.measured_floors)
    tpot, split, slow = _path_split(times, (pp - 1) * hop + back, m, pp)
    sources = set().union(*(t["sources"] for t in times))
    gaps = [g for t in times for g in t["gaps"]]
    comm_gaps = [g for t in times for g in t["comm_gaps"]]
    if math.isnan(hop) or math.isnan(back):  # the PP hops' gap
        comm_gaps.append(f"pp_send_recv: {_comm_gap(hop_why, hw)}")
        gaps.append(comm_gaps[-1])
    return {
        "tpot_ms": tpot,
        "stage_ms": [t["time"] for t in times],
        "hop_ms": hop,
        "micro_batches": m,
        "split": split,
        "achieved": _achieved(slow),
        "source": "composed" if any(s.startswith("composed") for s in sources) else "model",
        "part_sources": sorted(sources),
        "peak_fraction": max(t["peak"] for t in times),
        "gaps": gaps,
        "comm_gaps": comm_gaps,
        "interconnect": ic_label,
    }


def serving_load(dep: DeploymentSettings) -> tuple[int, int]:
    """Return (input_len, output_len) of the deployment's serving load, (0, 0) for decode only."""
    i, o = dep.input_len, dep.output_len
    return (i, o) if i > 0 and o > 0 else (0, 0)


def _prompt_cost(case: StepCase, step: dict, i: int) -> tuple:
    """Return (what one arriving prompt adds to the GPU's time, by split part, in ms; the
    highest peak fraction of its passes): per chunk, a pass of its own (separate) or the
    decode step's increase with the chunk's rows carried (mixed)."""
    alone = case.prompt.schedule == "separate"
    run_case = replace(case, batch=0) if alone else case
    cost, peak = dict.fromkeys(step["split"], 0.0), 0.0
    for rows, times in Counter(prompt_chunks(i, case.prompt.chunk)).items():  # equal chunks once
        run = compose_step(run_case, prefill=rows)
        for k in cost:
            cost[k] += times * (run["split"][k] - (0.0 if alone else step["split"][k]))
        peak = max(peak, run["peak_fraction"])
    return cost, peak


def loaded_step(case: StepCase) -> tuple[dict, float]:
    """Return (the decode step, its prefill share in ms) under a serving load: each of the other
    batch - 1 requests' prompts arrives once every output_len steps, so a request's TPOT carries
    (batch - 1) / output_len of what one prompt adds (_prompt_cost, as the engine schedules it:
    prompt_load); a separate prefill pass is time every decoding request waits."""
    step, batch = compose_step(case), case.batch
    i, o = serving_load(case.dep)
    if not i or batch < 2:
        return step, 0.0
    cost, peak = _prompt_cost(case, step, i)
    share = (batch - 1) / o
    add = {k: share * v for k, v in cost.items()}
    prefill = sum(add.values())
    split = {k: v + add[k] for k, v in step["split"].items()}
    peak = max(step["peak_fraction"], peak)
    return dict(step, tpot_ms=step["tpot_ms"] + prefill, split=split, peak_fraction=peak), prefill
