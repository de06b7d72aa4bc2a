"""The `engine` decode runner: the engine's own fused-MoE kernel timed with the project kernel's
tuned config and with its default, where the engine imports; its whole MoE call (vLLM's
fused_experts under override_config) is compared with itself only. Else a skipped row says why."""

from __future__ import annotations

from tilesweep.errors import last_line
from tilesweep.fused_moe import space
from tilesweep.fused_moe.engines.base import get, installed
from tilesweep.measure.timing import time_call


def engine_runner(spec: dict, log):
    """Return a function timing one batch in each engine (a skipped row where not installed)."""
    repeats, amortised = spec["final_repeats"], space.graph_amortisation(spec)

    def rows_for(problem, weights, batch, rows, m, routing):
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
                calls = whole_moe(problem, weights, batch, tuned, spec["dtype"])
                for label, call in calls.items():
                    timing = time_call(call, repeats, 2, graph=True, **amortised)
                    out.append({**base, "config_from": label, "status": "ok", "whole": timing})
            except NotImplementedError as exc:
                out.append({**base, "status": "unsupported", "reason": str(exc)})
            except Exception as exc:  # an engine API change is a result, not a crash
                out.append({**base, "status": "error", "reason": last_line(exc)})
        return out

    return rows_for


def _best(spec: dict, rows: list[dict]) -> dict | None:
    """Return the config the project kernel's table names for a batch (space.pick, guarded)."""
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
