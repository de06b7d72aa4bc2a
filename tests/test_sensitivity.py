"""The brief's panel inputs: winners per batch and the half/double sensitivity band."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep.config import compose_settings
from tilesweep.plan import sensitivity


@pytest.fixture(scope="module")
def brief():
    """Return the default (the brief's) settings and their composed deployment."""
    settings = compose_settings([])
    from tilesweep.plan.composition import compose_deployment

    return settings, compose_deployment(settings)


def test_winner_is_the_fastest_layout_that_fits():
    table = pd.DataFrame(
        [
            {"layout": "a", "batch": 1, "world": 8, "fits_memory": "yes", "tokens_per_s": 100.0},
            {"layout": "b", "batch": 1, "world": 8, "fits_memory": "yes", "tokens_per_s": 125.0},
            {"layout": "c", "batch": 1, "world": 8, "fits_memory": "no", "tokens_per_s": None},
            {"layout": "d", "batch": 1, "world": 2, "fits_memory": "yes", "tokens_per_s": 900.0},
            {"layout": "a", "batch": 8, "world": 8, "fits_memory": "no", "tokens_per_s": None},
        ]
    )
    out = sensitivity.winners(table, world=8).set_index("batch")
    assert out.loc[1, "winner"] == "b" and out.loc[1, "runner_up"] == "a"
    assert out.loc[1, "lead"] == "1.25x"
    assert out.loc[8, "winner"] == "none fits"


def test_scaling_touches_only_the_named_input(brief):
    settings, _ = brief
    hw = settings.catalog["rtx_pro_6000"]
    slow = sensitivity.scaled_hardware(hw, "interconnect_bandwidth", 0.5)
    late = sensitivity.scaled_hardware(hw, "interconnect_latency", 2.0)
    for name, topology in slow.interconnect_model.topologies.items():
        for kind in topology.model_fields_set:
            base = getattr(hw.interconnect_model.topologies[name], kind)
            for n, figures in getattr(topology, kind).by_gpus.items():
                assert figures.busbw_gbs == base.by_gpus[n].busbw_gbs / 2
                assert figures.latency_us == base.by_gpus[n].latency_us
                later = getattr(late.interconnect_model.topologies[name], kind).by_gpus[n]
                assert later.latency_us == 2 * figures.latency_us
    shot = late.interconnect_model.topologies["switch"].all_reduce.one_shot
    base_shot = hw.interconnect_model.topologies["switch"].all_reduce.one_shot
    assert shot.by_gpus[8].latency_us == 2 * base_shot.by_gpus[8].latency_us
    assert shot.by_gpus[8].points == [[b, 2 * t] for b, t in base_shot.by_gpus[8].points]
    assert slow.memory_bandwidth_gbs == hw.memory_bandwidth_gbs
    assert sensitivity.scaled_hardware(hw, "memory_bandwidth", 2.0).memory_bandwidth_gbs == (
        2 * hw.memory_bandwidth_gbs
    )
    with pytest.raises(ValueError, match="allowed"):
        sensitivity.scaled_hardware(hw, "power", 2.0)


def test_band_brackets_the_base_step(brief):
    settings, base = brief
    band = sensitivity.sensitivity(settings, world=8)
    assert set(band["input"]) == set(sensitivity.INPUTS)
    merged = band.merge(base[["layout", "batch", "tpot_ms"]], on=["layout", "batch"])
    fits = merged[merged["tpot_ms"].notna()]
    assert not fits.empty
    # Less bandwidth or more latency never makes a step faster; the opposite never slower.
    slower_half = fits[fits["input"] != "interconnect_latency"]
    assert (slower_half["tpot_half_ms"] >= slower_half["tpot_ms"] - 1e-9).all()
    assert (slower_half["tpot_double_ms"] <= slower_half["tpot_ms"] + 1e-9).all()
    latency = fits[fits["input"] == "interconnect_latency"]
    assert (latency["tpot_half_ms"] <= latency["tpot_ms"] + 1e-9).all()
    assert (latency["tpot_double_ms"] >= latency["tpot_ms"] - 1e-9).all()
    # A layout that does not fit stays out at both ends: no speed verdict.
    unfit = merged[merged["tpot_ms"].isna()]
    assert (unfit["bound_half"] == "does-not-fit").all()
    lines = sensitivity.changes(band, sensitivity.winners(base, 8))
    assert len(lines) == len(sensitivity.INPUTS)
