"""The attention kernel's own times on the target: where a measured tune table covers an attention
core part (device, heads per rank, sequences, indexed tokens), the composition takes them."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep.config import compose
from tilesweep.errors import ConfigError
from tilesweep.plan import attention_table, launch_fit

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
    s = compose([])
    model, dep = s["model"], dict(s["deployment"], kv_dtype="bf16")
    own = attention_table.for_device(_table(), DEVICE, model, dep)
    assert own is not None
    shape = {"heads": 8.0, "sequences": 512, "tokens": 1024}
    part = {"name": "attention", "kind": "attention", "bytes": 1e9, "flops": 1e12,
            "dtype": "bf16", "count": 3, **shape}  # fmt: skip
    fit = {"device": DEVICE, "groups": {}, "per_kernel_us": 2.0,
           launch_fit.POOLED: {"e_bw": 0.5, "e_math": 0.25, "note": ""}}  # fmt: skip
    hw = {"name": "gpu", "memory_bandwidth_gbs": 1000.0, "peak_tflops": {"bf16": 100.0}}
    t = launch_fit.launch_timer(fit, 2.0, "composed (test)", own)(part, hw)
    assert t["memory_ms"] == pytest.approx(0.25) and t["math_ms"] == 0 and t["launch_ms"] == 0
    assert "own measured time" in t["source"]
    other = dict(part, sequences=4096)  # beyond the table: the fit, as without one
    beyond = launch_fit.launch_timer(fit, 2.0, "x", own)(other, hw)
    assert beyond["math_ms"] == pytest.approx(40.0)  # 10 ms at the roof, over e_math 0.25
    # An fp8 cache, or another device, is never served from a bf16 table measured elsewhere.
    assert attention_table.for_device(_table(), DEVICE, model, dict(dep, kv_dtype="fp8")) is None
    assert attention_table.for_device(_table(), "GPU Y", model, dep) is None


def test_the_parts_carry_what_the_table_is_keyed_by():
    from tilesweep.plan.step_parts import stage_parts

    s = compose([])
    model, dep = s["model"], dict(s["deployment"], context_len=1024)
    stage = {"dense": 1, "moe": 0, "sliding": 0}
    parts = stage_parts(model, dep, {"tp": 8, "pp": 1, "ep": 1}, stage, 64, True, True)
    core = next(p for p in parts if p["kind"] == "attention")
    assert core["heads"] == model["attention"]["heads"] / 8
    assert core["sequences"] == 64 and core["tokens"] == 1024


def test_a_missing_table_is_a_one_line_error_before_any_job():
    with pytest.raises(ConfigError, match="deployment.attention_table"):
        compose(["deployment.attention_table=no/such/table.csv"])
