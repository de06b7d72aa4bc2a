"""The decode-targets table says which target each batch meets, and by how much it misses."""

from __future__ import annotations

import pandas as pd

from tilesweep.report.analysis import decode_targets


def _row(runner, tokens, ms, frac, dtype="bf16"):
    return {
        "runner": runner,
        "dtype": dtype,
        "op": "gate_up",
        "routing": "uniform",
        "tokens_per_expert": tokens,
        "status": "ok",
        "time_ms": ms,
        "frac_copy_bw": frac,
    }


def test_targets_met_and_missed_with_margins():
    decode = pd.DataFrame(
        [
            _row("triton:a", 16, 0.40, 0.95),
            _row("triton:b", 16, 0.50, 0.80),
            _row("torch_bmm", 16, 0.45, 0.85),
            _row("triton:a", 32, 0.44, 0.87),
            _row("torch_bmm", 32, 0.50, 0.77),
            _row("triton:a", 256, 1.00, 0.30),
            _row("torch_grouped_mm", 256, 0.60, 0.50),
            _row("triton:f", 16, 0.20, 0.90, dtype="fp8"),
        ]
    )
    t = decode_targets(decode).set_index("tokens_per_expert")
    assert t.loc[16, "best_tile"] == "a" and t.loc[16, "vs_baseline"] == "met"
    assert t.loc[16, "copy_90pct"] == "met"
    assert t.loc[32, "copy_90pct"] == "missed by 0.03"
    assert t.loc[256, "vs_baseline"] == "missed: 0.60x the baseline's speed"
    assert t.loc[256, "copy_90pct"].startswith("n/a")
    assert len(t) == 3  # fp8 has no fp8 baseline to compare with
