"""The `engine` runner: the serving engine's own fused-MoE Triton kernel, timed with the project
kernel's tuned config and with the engine's default, where the engine can be imported.

vLLM: `fused_experts` under `override_config` (both expert GEMMs with the activation, the
alignment and the top-k sum: the engine's whole MoE, so it is compared with itself only).
Where vLLM is not installed, every row says it was skipped and why; SGLang likewise.
"""

from __future__ import annotations

import importlib.util

from tilesweep.errors import last_line
from tilesweep.fused_moe import space
from tilesweep.measure.timing import time_call

ENGINES = ("vllm", "sglang")


def installed(engine: str) -> bool:
    """Return whether an engine's package can be imported here."""
    return importlib.util.find_spec(engine) is not None


def _vllm_calls(problem: dict, weights, batch, tuned: dict, dtype: str):
    """Return {label: call} timing vLLM's fused_experts with the tuned config and its default."""
    from vllm.model_executor.layers.fused_moe import fused_experts, override_config
    from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config

    if dtype != "bf16":
        raise NotImplementedError("the engine runner times vLLM's bf16 path only")
    x = batch.a["gate_up"]
    w1, w2 = weights.w["gate_up"], weights.w["down"]
    ids = batch.topk_ids
    topw = batch.topk_weights.view(ids.shape)
    m, k = x.shape
    default = get_default_config(m, problem["experts"], problem["n"], k, problem["top_k"], None)

    def run(config):
        def call():
            with override_config(config):
                return fused_experts(x, w1, w2, topw, ids)

        return call

    return {"tuned": run(tuned), "default": run(default)}


def engine_runner(spec: dict, log):
    """Return a function (problem, weights, batch, rows, m, routing) -> engine rows for one
    batch: timed where the engine is installed, else one skipped row per engine."""

    def rows_for(problem, weights, batch, rows, m, routing):
        out = []
        for engine in spec["engines"]:
            base = {"source": "engine", "runner": f"engine:{engine}", "routing": routing}
            if not installed(engine):
                out.append({**base, "status": "skipped", "reason": f"{engine} is not installed"})
                continue
            if engine != "vllm":
                reason = f"the engine runner drives vLLM only; {engine} is installed but untimed"
                out.append({**base, "status": "skipped", "reason": reason})
                continue
            tuned = _best(spec, rows)
            if tuned is None:
                out.append({**base, "status": "skipped", "reason": "no tuned config at this M"})
                continue
            try:
                calls = _vllm_calls(problem, weights, batch, tuned, spec["dtype"])
                for label, call in calls.items():
                    timing = time_call(
                        call,
                        spec["final_repeats"],
                        2,
                        graph=True,
                        **space.graph_amortisation(spec),
                    )
                    out.append({**base, "config_from": label, "status": "ok", "whole": timing})
            except NotImplementedError as exc:
                out.append({**base, "status": "unsupported", "reason": str(exc)})
            except Exception as exc:  # an engine API change is a result, not a crash
                out.append({**base, "status": "error", "reason": last_line(exc)})
        return out

    return rows_for


def _best(spec: dict, rows: list[dict]) -> dict | None:
    """Return the config the project kernel's table names for a batch: fused_moe_space.pick over
    the batch's timed configs of the engines' space (both GEMMs summed, every routing, guarded
    by spec['guard_default']'s default), as fused_moe/tune picks it from the journal, at a key and
    at an extra batch past the keys alike."""
    sources = space.engine_sources(spec["engine_defaults"])
    times, configs, guard = {}, {}, {}
    for r in rows:
        if r.get("status") != "ok" or r["source"] not in sources:
            continue
        t = r["gate_up"]["time_ms"] + r["down"]["time_ms"]
        slot = times.setdefault(r["slug"], {})
        slot[r["routing"]] = min(t, slot.get(r["routing"], t))
        configs[r["slug"]] = r["config"]
        if r["source"] == space.guard_source(spec):
            guard[r["routing"]] = min(t, guard.get(r["routing"], t))
    slug = space.pick(times, spec["routing"], guard)
    return configs.get(slug)
