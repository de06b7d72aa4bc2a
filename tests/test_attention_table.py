"""The attention kernel's own times on the target: where a measured tune table covers an attention
core part (device, heads per rank, sequences, indexed tokens), the composition takes them."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep.config import compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.plan import attention_table, launch_fit
from tilesweep.settings import HardwareSpec, Layout

DEVICE = "GPU X"


def _table() -> pd.DataFrame:
    rows = [
        {"device": DEVICE, "heads": h, "sequences": s, "top": 1024, "ms": ms}
        for h, s, ms in [(8, 1, 0.01), (8, 64, 0.04), (8, 512, 0.25), (64, 1, 0.01),
                         (64, 64, 0.07), (64, 512, 0.4)]
    ]  # fmt: skip
    return pd.DataFrame(rows).astype({"heads": float, "sequences": float, "top": float})


def test_lookup_interpolates_within_what_was_measured_and_nothing_beyond():
    t = _table()
    assert attention_table.lookup(t, DEVICE, 8, 512, 1024) == pytest.approx(0.25)
    mid = attention_table.lookup(t, DEVICE, 8, 181, 1024)  # between 64 and 512, log-log
    assert 0.04 < mid < 0.25
    assert attention_table.lookup(t, DEVICE, 4, 512, 1024) == pytest.approx(0.25)  # padded heads
    between = attention_table.lookup(t, DEVICE, 16, 512, 1024)
    assert 0.25 < between < 0.4
    assert attention_table.lookup(t, DEVICE, 128, 512, 1024) is None  # more heads than measured
    assert attention_table.lookup(t, DEVICE, 8, 2048, 1024) is None  # more sequences
    assert attention_table.lookup(t, DEVICE, 8, 512, 2048) is None  # other indexed tokens
    assert attention_table.lookup(t, "GPU Y", 8, 512, 1024) is None  # another device


def test_an_attention_part_the_table_covers_takes_the_kernels_own_time():
    s = compose_settings([])
    model, dep = s.model, s.deployment.model_copy(update={"kv_dtype": "bf16"})
    own = attention_table.for_device(_table(), DEVICE, model, dep)
    assert own is not None
    shape = {"heads": 8.0, "sequences": 512, "tokens": 1024}
    part = {"name": "attention", "kind": "attention", "bytes": 1e9, "flops": 1e12,
            "dtype": "bf16", "count": 3, **shape}  # fmt: skip
    fit = {"device": DEVICE, "groups": {}, "per_kernel_us": 2.0,
           launch_fit.POOLED: {"e_bw": 0.5, "e_math": 0.25, "note": ""}}  # fmt: skip
    hw = HardwareSpec.model_construct(
        name="gpu", memory_bandwidth_gbs=1000.0, peak_tflops={"bf16": 100.0}
    )
    t = launch_fit.launch_timer(fit, 2.0, "composed (test)", own)(part, hw)
    assert t["memory_ms"] == pytest.approx(0.25) and t["math_ms"] == 0 and t["launch_ms"] == 0
    assert "own measured time" in t["source"]
    other = dict(part, sequences=4096)  # beyond the table: the fit, as without one
    beyond = launch_fit.launch_timer(fit, 2.0, "x", own)(other, hw)
    assert beyond["math_ms"] == pytest.approx(40.0)  # 10 ms at the roof, over e_math 0.25
    # An fp8 cache, or another device, is never served from a bf16 table measured elsewhere.
    fp8 = dep.model_copy(update={"kv_dtype": "fp8"})
    assert attention_table.for_device(_table(), DEVICE, model, fp8) is None
    assert attention_table.for_device(_table(), "GPU Y", model, dep) is None


def test_the_parts_carry_what_the_table_is_keyed_by():
    from tilesweep.plan.step_parts import stage_parts

    s = compose_settings([])
    model, dep = s.model, s.deployment.model_copy(update={"context_len": 1024})
    stage = {"dense": 1, "moe": 0, "sliding": 0}
    parts = stage_parts(model, dep, Layout(tp=8, pp=1, ep=1), stage, 64, True, True)
    core = next(p for p in parts if p["kind"] == "attention")
    assert core["heads"] == model.attention.heads / 8
    assert core["sequences"] == 64 and core["tokens"] == 1024


def test_a_missing_table_is_a_one_line_error_before_any_job():
    with pytest.raises(ConfigError, match="deployment.attention_table"):
        compose(["deployment.attention_table=no/such/table.csv"])


def _kernel_table(e_bw: float, e_math: float, heads=(8, 64), overlap: float = 0.0):
    """Return a table of steady times a kernel at these efficiencies would take on a device of
    1,000 GB/s and 100 bf16 TFLOP/s (the composition's own part time), and that reference."""
    ref = {"memory_bandwidth_gbs": 1000.0, "peak_tflops": {"bf16": 100.0}}
    rows = []
    for h in heads:
        for s in (512, 2048):
            mem = s * 1024 * 576 * 2 / 1e9  # ms at 1,000 GB/s
            flop = s * h * 1024 * (2 * 576 + 2 * 512) / 1e11  # ms at 100 TFLOP/s
            m, f = mem / e_bw, flop / e_math
            ms = max(m, f) + overlap * min(m, f)
            rows.append({"device": DEVICE, "heads": h, "sequences": s, "top": 1024, "ms": ms})
    return pd.DataFrame(rows).astype({"heads": float, "sequences": float, "top": float}), ref


def test_head_counts_separate_the_kernels_memory_and_math_terms():
    table, ref = _kernel_table(0.6, 0.3)
    got = attention_table.identify(table, DEVICE, ref, 0.0)
    assert got["e_bw"] == pytest.approx(0.6, abs=0.005)
    assert got["e_math"] == pytest.approx(0.3, abs=0.005)
    assert got["cases"] == 4 and got["heads"] == [8, 64] and got["rms_log_error_pct"] < 1
    one_head_count, _ = _kernel_table(0.6, 0.3, heads=(64,))
    assert attention_table.identify(one_head_count, DEVICE, ref, 0.0) is None


def test_a_fit_made_beside_the_table_takes_the_kernels_efficiencies_for_attention_only():
    s = compose_settings([])
    model, dep = s.model, s.deployment.model_copy(update={"kv_dtype": "bf16"})
    table, ref = _kernel_table(0.6, 0.3)
    group = {"e_bw": 0.35, "e_math": 0.62, "kinds": ["attention"], "note": ""}
    fit = {"device": DEVICE, "reference": ref, "overlap": 0.0,
           "groups": {"attention": group, "norm": dict(group, kinds=["norm"])}}  # fmt: skip
    got = attention_table.with_kernel_efficiencies(fit, table, model, dep)
    att = got["groups"]["attention"]
    assert (att["e_bw"], att["e_math"]) == pytest.approx((0.6, 0.3), abs=0.005)
    assert "kernel's own times" in att["note"] and "0.350 / 0.620" in att["note"]
    assert got["groups"]["norm"] == fit["groups"]["norm"] and fit["groups"]["attention"] is group
    # Another device's table, or an fp8 cache, leaves the fit as it was.
    assert (
        attention_table.with_kernel_efficiencies(dict(fit, device="GPU Y"), table, model, dep)[
            "groups"
        ]["attention"]
        is group
    )
    fp8 = dep.model_copy(update={"kv_dtype": "fp8"})
    assert attention_table.with_kernel_efficiencies(fit, table, model, fp8) is fit
