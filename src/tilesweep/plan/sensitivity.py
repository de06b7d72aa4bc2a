"""Which layout wins at each batch, by how much, and what would change the answer (each input
scaled at half and at double)."""

from collections.abc import Callable

import pandas as pd

from tilesweep import package_data
from tilesweep.columns import BAND_COLUMNS, WINNER_COLUMNS
from tilesweep.plan.composition import compose_deployment
from tilesweep.settings import HardwareSpec, RootSettings
from tilesweep.settings.hardware_spec import Topology

DATA_FILES = ("data/plan.yaml",)
# The inputs scaled, with what a factor means for each.
INPUTS = package_data.data_typed("tilesweep", DATA_FILES[0], "sensitivity_inputs", dict[str, str])
FACTORS = (0.5, 2.0)


def winners(deployment: pd.DataFrame, world: int | None = None) -> pd.DataFrame:
    """Return per batch the fastest fitting layout, the runner-up and the lead (`world`: GPUs)."""
    rows = []
    frame = deployment if world is None else deployment[deployment["world"] == world]
    fits = frame[(frame["fits_memory"] == "yes") & frame["tokens_per_s"].notna()]
    for batch in sorted(frame["batch"].unique()):
        ranked = fits[fits["batch"] == batch].sort_values("tokens_per_s", ascending=False)
        if ranked.empty:
            rows.append({"batch": batch, "winner": "none fits"})
            continue
        top = ranked.iloc[0]
        row = {"batch": batch, "winner": top["layout"], "tokens_per_s": top["tokens_per_s"]}
        if len(ranked) > 1:
            second = ranked.iloc[1]
            row.update(
                runner_up=second["layout"],
                runner_up_tokens_per_s=second["tokens_per_s"],
                lead=f"{top['tokens_per_s'] / second['tokens_per_s']:.2f}x",
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=WINNER_COLUMNS)


def scaled_hardware(hw: HardwareSpec, name: str, factor: float) -> HardwareSpec:
    """Return a copy of a hardware spec with one input (an INPUTS key) scaled by factor."""
    if name not in INPUTS:
        raise ValueError(f"input={name!r}: allowed: {', '.join(INPUTS)}")
    if name == "memory_bandwidth":
        return hw.model_copy(update={"memory_bandwidth_gbs": hw.memory_bandwidth_gbs * factor})
    block = hw.interconnect_model
    if block is None:
        return hw
    key = "busbw_gbs" if name == "interconnect_bandwidth" else "latency_us"
    topologies = {t: _scaled_topology(topo, key, factor) for t, topo in block.topologies.items()}
    scaled = block.model_copy(update={"topologies": topologies})
    return hw.model_copy(update={"interconnect_model": scaled})


def _scaled_topology(topology: Topology, key: str, factor: float) -> Topology:
    """Return a topology with one figure (busbw_gbs or latency_us) of every collective scaled."""
    update = {}
    for kind in topology.model_fields_set:
        block = getattr(topology, kind)
        by_gpus = {
            n: f.model_copy(update={key: getattr(f, key) * factor})
            for n, f in block.by_gpus.items()
        }
        changed = {"by_gpus": by_gpus}
        shot = getattr(block, "one_shot", None)
        if key == "latency_us" and shot is not None:
            changed["one_shot"] = _scaled_times(shot, factor, latency=True)
        graph = getattr(block, "in_graph", None)
        if key == "latency_us" and graph is not None:
            scaled = {a: _scaled_times(getattr(graph, a), factor) for a, _, _ in graph.series()}
            changed["in_graph"] = graph.model_copy(update=scaled)
        update[kind] = block.model_copy(update=changed)
    return topology.model_copy(update=update)


def _scaled_times(block, factor: float, latency: bool = False):
    """Return a block of cited [bytes, us] series by GPU count with every time (and, with
    `latency`, its latency_us) scaled."""
    by_gpus = {}
    for n, f in block.by_gpus.items():
        update = {"points": [[b, t * factor] for b, t in f.points]}
        if latency:
            update["latency_us"] = f.latency_us * factor
        by_gpus[n] = f.model_copy(update=update)
    return block.model_copy(update={"by_gpus": by_gpus})


def sensitivity(
    settings: RootSettings,
    compose: Callable[[RootSettings], pd.DataFrame] = compose_deployment,
    world: int | None = None,
) -> pd.DataFrame:
    """Return per input x layout x batch TPOT and bound at half and double input (BAND_COLUMNS)."""
    base = compose(settings)
    rows = []
    for name in INPUTS:
        ends = {}  # half and double: the table composed there and its winner by batch
        for end, factor in zip(("half", "double"), FACTORS, strict=True):
            hw = scaled_hardware(settings.hardware, name, factor)
            table = compose(settings.model_copy(update={"hardware": hw}))
            ends[end] = table, dict(winners(table, world)[["batch", "winner"]].itertuples(False))
        for i, rec in enumerate(base.to_dict("records")):
            if world is not None and rec["world"] != world:
                continue
            row = {"input": name, "layout": rec["layout"], "batch": rec["batch"]}
            row["base_bound"] = rec["bound"]
            for end, (table, won) in ends.items():
                at = table.iloc[i]
                row |= {f"tpot_{end}_ms": at["tpot_ms"], f"bound_{end}": at["bound"]}
                row[f"winner_{end}"] = won.get(rec["batch"], "none fits")
            rows.append(row)
    return pd.DataFrame(rows, columns=BAND_COLUMNS)


def changes(band: pd.DataFrame, base_winners: pd.DataFrame) -> list[str]:
    """Return one sentence per input whose half or double changes a bound or a winner."""
    out = []
    base = dict(base_winners[["batch", "winner"]].itertuples(index=False))
    for name, part in band.groupby("input", sort=False):
        flips = part[
            (part["bound_half"] != part["base_bound"])
            | (part["bound_double"] != part["base_bound"])
        ]
        won = part[["batch", "winner_half", "winner_double"]].itertuples(index=False)
        moved = {b for b, w_half, w_double in won if (w_half, w_double) != (base.get(b),) * 2}
        if flips.empty and not moved:
            out.append(f"{INPUTS[name]} at half or double changes no bound and no winner.")
            continue
        bits = []
        if not flips.empty:
            bits.append(f"changes the bound of {len(flips)} of {len(part)} layout x batch cells")
        if moved:
            bits.append(f"changes the winner at batch {', '.join(str(b) for b in sorted(moved))}")
        out.append(f"{INPUTS[name]} at half or double {' and '.join(bits)}.")
    return out
