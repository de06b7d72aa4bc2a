"""The verdict: measured and projected (model) rows apart, what each projection came from, and the
projection error where a layout has both."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from tilesweep import verdict
from tilesweep.plan.expert_shapes import expert_ops

GLM5 = {
    "name": "glm5",
    "hidden": 6144,
    "moe_intermediate": 2048,
    "routed_experts": 256,
    "top_k": 8,
    "shared_experts": 1,
    "moe_layers": 75,
}
LAYOUTS = [{"tp": 1, "pp": 1, "ep": 1}, {"tp": 2, "pp": 1, "ep": 1}, {"tp": 8, "pp": 1, "ep": 1}]


def settings(layouts=LAYOUTS, tokens=(1,), model=GLM5) -> dict:
    """Return the parts of a composed config the verdict reads."""
    return {
        "model": model,
        "grid": {"layouts": list(layouts), "tokens_per_expert": list(tokens)},
        "bench": {"layout_runner": "best"},
    }


def decode_rows(per_expert: dict[str, float], tp: int = 1, t: int = 1, huge=True) -> list[dict]:
    """Return decode-table rows (two experts each) at the shape split over tp."""
    peak, bw = (1e12, 1e12) if huge else (0.1, 10.0)
    rows = []
    for op, (n, k) in expert_ops(GLM5, tp).items():
        rows.append(
            {
                "runner": "torch_matmul",
                "op": op,
                "n": n,
                "k": k,
                "routing": "uniform",
                "dtype": "bf16",
                "tokens_per_expert": t,
                "experts": 2,
                "status": "ok",
                "time_ms": 2 * per_expert[op],
                "bound": "memory",
                "ceiling_matmul_tflops": peak,
                "ceiling_copy_gbs": bw,
                "device": "test device",
            }
        )
    return rows


def all_reduce_rows(alpha_ms=0.01, bytes_per_ms=1e7) -> pd.DataFrame:
    """Return measured all-reduce rows over two ranks that follow time = alpha + bytes / beta."""
    sizes = [4096, 1 << 20, 16 << 20]
    return pd.DataFrame(
        [
            {
                "layout": "tp2-pp1-ep1",
                "collective": "all_reduce",
                "group": 2,
                "layout_group": 2,
                "bytes": s,
                "time_ms": alpha_ms + s / bytes_per_ms,
                "status": "ok",
            }
            for s in sizes
        ]
    )


def test_decide_names_the_largest_share_its_runner_up_and_margin():
    got = verdict.decide({"compute_memory_ms": 6.0, "compute_math_ms": 1.0, "comm_ms": 3.0})
    assert got["verdict"] == "memory-bound" and got["runner_up"] == "communication-bound"
    assert got["margin"] == pytest.approx(2.0) and got["share"] == pytest.approx(0.6)
    unknown = verdict.decide({"compute_memory_ms": math.nan, "compute_math_ms": 1.0, "comm_ms": 0})
    assert unknown["verdict"] == "unknown"


def test_compute_comes_from_decode_at_the_per_device_shape():
    decode = pd.DataFrame(decode_rows({"gate_up": 1.0, "down": 0.5}))
    table = verdict.verdict_table(settings(), decode, all_reduce_rows())
    model = table.set_index("layout")
    # tp1: 256 experts x 1.5 ms + shared expert (32 tokens, proportional above t=1: 48 ms), x75
    assert model.loc["tp1-pp1-ep1", "compute_memory_ms"] == pytest.approx(75 * (384 + 48), 1e-4)
    assert model.loc["tp2-pp1-ep1", "compute_memory_ms"] == pytest.approx(75 * 432 / 2, 1e-4)
    assert "x1/2 from the full shape" in model.loc["tp2-pp1-ep1", "inputs"]
    # With rows measured at the TP2 shape, those are used as they are.
    exact = pd.DataFrame(
        decode_rows({"gate_up": 1.0, "down": 0.5})
        + decode_rows({"gate_up": 0.7, "down": 0.3}, tp=2)
    )
    tp2 = verdict.verdict_table(settings(), exact, all_reduce_rows()).set_index("layout")
    assert tp2.loc["tp2-pp1-ep1", "compute_memory_ms"] == pytest.approx(75 * (256 + 32), 1e-4)
    assert "x1/2" not in tp2.loc["tp2-pp1-ep1", "inputs"]


def test_communication_comes_from_the_fit_scaled_by_bus_factor():
    decode = pd.DataFrame(decode_rows({"gate_up": 1.0, "down": 0.5}))
    table = verdict.verdict_table(settings(), decode, all_reduce_rows()).set_index("layout")
    nbytes = 32 * 6144 * 2
    assert table.loc["tp1-pp1-ep1", "comm_ms"] == 0
    assert table.loc["tp2-pp1-ep1", "comm_ms"] == pytest.approx(150 * (0.01 + nbytes / 1e7), 1e-4)
    assert table.loc["tp8-pp1-ep1", "comm_ms"] == pytest.approx(
        150 * (0.01 + 1.75 * nbytes / 1e7), 1e-4
    )
    assert "from the fit over all_reduce(2)" in table.loc["tp8-pp1-ep1", "inputs"]
    assert set(table["source"]) == {"model"}


def test_measured_rows_stand_apart_and_carry_the_projection_error():
    decode = pd.DataFrame(decode_rows({"gate_up": 1.0, "down": 0.5}, huge=False))
    steps = pd.DataFrame(
        [
            {
                "layout": "tp2-pp1-ep1",
                "tokens_per_expert": 1,
                "world": 2,
                "backend": "gloo",
                "status": "ok",
                "compute_memory_ms": 10000.0,
                "compute_math_ms": 100.0,
                "comm_ms": 50.0,
                "other_ms": 5.0,
                "step_ms": 10155.0,
                "raw_step_ms": 270.8,
                "scaling": "2 of 75 layers run (x37.5)",
                "power_frac": 0.39,
                "device": "test device",
            },
            {"layout": "tp1-pp1-ep1", "tokens_per_expert": 1, "status": "skipped"},
        ]
    )
    table = verdict.verdict_table(settings(), decode, all_reduce_rows(), steps)
    assert list(table["source"]) == ["measured", "model", "model", "model"]
    meas = table.iloc[0]
    assert meas["layout"] == "tp2-pp1-ep1" and meas["verdict"] == "memory-bound"
    assert meas["runner_up"] == "math-bound" and meas["margin"] == pytest.approx(100.0)
    assert meas["power_frac"] == pytest.approx(0.39) and meas["power_source"] == "layout step"
    assert "2 of 75 layers run" in meas["inputs"]
    proj = table[(table["source"] == "model") & (table["layout"] == "tp2-pp1-ep1")].iloc[0]
    error = 100 * (proj["step_ms"] - 10155.0) / 10155.0
    assert meas["projection_error_pct"] == pytest.approx(error)
    assert proj["projection_error_pct"] == pytest.approx(error)
    assert proj["measured_step_ms"] == 10155.0 and meas["projected_step_ms"] == proj["step_ms"]
    others = table[(table["source"] == "model") & (table["layout"] != "tp2-pp1-ep1")]
    assert others["projection_error_pct"].isna().all()
    for col in (
        "layout",
        "tokens_per_expert",
        "compute_memory_ms",
        "compute_math_ms",
        "comm_ms",
        "step_ms",
        "verdict",
        "runner_up",
        "margin",
        "source",
        "inputs",
    ):
        assert col in table


def test_missing_measurements_make_an_unknown_verdict_not_a_guess():
    table = verdict.verdict_table(settings(), pd.DataFrame(), pd.DataFrame())
    assert list(table["layout"]) == ["tp1-pp1-ep1", "tp2-pp1-ep1", "tp8-pp1-ep1"]
    assert list(table["verdict"]) == ["unknown"] * 3 and set(table["source"]) == {"model"}
    assert table["compute_memory_ms"].isna().all() and table["step_ms"].isna().all()
    assert table["inputs"].str.contains("expert_gate_up: no decode measurement").all()
    assert table.loc[0, "comm_ms"] == 0  # one device needs no collective
    assert table.loc[1:, "comm_ms"].isna().all()  # nothing measured, nothing to fit


def test_an_unknown_bound_is_a_labelled_gap_not_memory_bound():
    rows = decode_rows({"gate_up": 1.0, "down": 0.5})
    for row in rows:
        row.pop("bound")
        row.pop("ceiling_matmul_tflops")  # without ceilings there is no roofline to ask
    table = verdict.verdict_table(settings(), pd.DataFrame(rows), all_reduce_rows())
    one = table.set_index("layout").loc["tp1-pp1-ep1"]
    # the expert and shared-expert GEMMs are timed, but whether memory or math bound them is not
    assert one["compute_unknown_ms"] == pytest.approx(75 * (384 + 48), 1e-4)
    assert one["compute_math_ms"] == 0 and one["verdict"] == "unknown"
    assert math.isnan(one["compute_memory_ms"])  # the router's roofline floor needs ceilings
    assert "expert_gate_up: bound unknown" in one["inputs"]
    assert "router: no decode measurement" in one["inputs"]


@pytest.mark.slow
def test_the_real_chain_on_tiny_shapes(tmp_path):
    """Decode baselines, collectives and layout steps measured for real, then the verdict."""
    from tilesweep.config import compose
    from tilesweep.stages.collective import bench_collective
    from tilesweep.stages.decode import bench_decode
    from tilesweep.stages.layout import bench_layout

    tiny = {**GLM5, "name": "tiny", "hidden": 128, "moe_intermediate": 64, "routed_experts": 16}
    tiny.update(top_k=4, moe_layers=4)
    bench = compose(["experiment=tiny"])["bench"]  # every key the steps read, then small values
    bench.update(
        warmup=1, repeats=2, cpu_repeats=2, cpu_experts=2, collective_repeats=6,
        cpu_collective_max_bytes=1 << 20, collective_sweep_max_bytes=1 << 20,
        collective_sweep_factor=16, layout_layers=1, layout_cpu_experts=2,
    )  # fmt: skip
    tokens = [1, 2]
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps({"copy_gbs": 10.0, "matmul_tflops": {"bf16": 0.1}}))
    decode_path = str(tmp_path / "decode.csv")
    bench_decode(
        json.dumps({"kernel": {"kernel": "baselines"}, "model": tiny, "tokens_per_expert": tokens,
                    "bench": bench}),
        str(ceilings), decode_path,
    )  # fmt: skip
    frames = {"collective": [], "layout": []}
    layouts = [
        {"tp": 1, "pp": 1, "ep": 1},
        {"tp": 2, "pp": 1, "ep": 1},
        {"tp": 1, "pp": 1, "ep": 2},
    ]
    for lay in layouts:
        name = f"tp{lay['tp']}-pp{lay['pp']}-ep{lay['ep']}"
        row = {**lay, "world": lay["tp"] * lay["pp"] * lay["ep"], "layout": name}
        cell = {"layout": row, "model": tiny, "tokens_per_expert": tokens, "bench": bench}
        frames["collective"].append(
            bench_collective(json.dumps(cell), str(tmp_path / f"c-{name}.csv"))
        )
        frames["layout"].append(
            bench_layout(
                json.dumps(cell), str(ceilings), [decode_path], str(tmp_path / f"{name}.csv")
            )
        )
    table = verdict.verdict_table(
        {"model": tiny, "grid": {"layouts": layouts, "tokens_per_expert": tokens},
         "bench": bench},
        pd.read_csv(decode_path),
        pd.concat(frames["collective"], ignore_index=True),
        pd.concat(frames["layout"], ignore_index=True),
    )  # fmt: skip
    measured = table[table["source"] == "measured"]
    model = table[table["source"] == "model"]
    assert len(measured) == len(model) == 6
    assert measured["projection_error_pct"].notna().all()
    assert model["verdict"].isin(["memory-bound", "math-bound", "communication-bound"]).all()
    assert (model[model["layout"] != "tp1-pp1-ep1"]["comm_ms"] > 0).all()
    assert (measured[measured["layout"] != "tp1-pp1-ep1"]["comm_ms"] > 0).all()
    held_out = model[model["layout"] != "tp1-pp1-ep1"]
    assert held_out["calibration"].notna().all() and held_out["calibrated_error_pct"].notna().all()
    assert table[table["layout"] == "tp1-pp1-ep1"]["calibrated_step_ms"].isna().all()


def _split_row(layout: str, t: int, source: str, step: float, comm: float) -> dict:
    """Return the verdict-table columns calibrate reads."""
    return {"layout": layout, "tokens_per_expert": t, "source": source, "step_ms": step,
            "comm_ms": comm}  # fmt: skip


# The single-device reference and TP2, each measured and projected at 16 tokens per expert.
TWO_MEASURED = [
    _split_row("tp1-pp1-ep1", 16, "measured", 150.0, 0.0),
    _split_row("tp1-pp1-ep1", 16, "model", 100.0, 0.0),
    _split_row("tp2-pp1-ep1", 16, "measured", 90.0, 15.0),
    _split_row("tp2-pp1-ep1", 16, "model", 60.0, 10.0),
]


def test_calibration_comes_from_the_measured_single_device_step_and_is_checked_held_out():
    rows = [
        *TWO_MEASURED,
        _split_row("tp8-pp1-ep1", 16, "model", 20.0, 8.0),
        _split_row("tp8-pp1-ep1", 64, "model", 40.0, 9.0),  # no reference at 64
    ]
    frame = verdict._projection_error(pd.DataFrame(rows))
    frame = verdict.calibrate(verdict.calibrate(frame))  # idempotent: recomputed, not stacked
    by = frame.set_index(["layout", "tokens_per_expert", "source"])
    tp2 = by.loc[("tp2-pp1-ep1", 16, "model")]
    assert tp2["calibration"] == pytest.approx(1.5)
    assert tp2["calibrated_step_ms"] == pytest.approx(50 * 1.5 + 10)
    assert tp2["calibrated_error_pct"] == pytest.approx(100 * (85 - 90) / 90)
    assert by.loc[("tp2-pp1-ep1", 16, "measured")]["calibrated_error_pct"] == pytest.approx(
        tp2["calibrated_error_pct"]
    )
    assert by.loc[("tp8-pp1-ep1", 16, "model")]["calibrated_step_ms"] == pytest.approx(12 * 1.5 + 8)
    assert math.isnan(by.loc[("tp8-pp1-ep1", 16, "model")]["calibrated_error_pct"])
    assert math.isnan(by.loc[("tp8-pp1-ep1", 64, "model")]["calibration"])
    ref = frame[frame["layout"] == "tp1-pp1-ep1"]
    assert ref[verdict.CALIBRATION_COLUMNS].isna().all().all()
    assert by.loc[("tp1-pp1-ep1", 16, "model")]["projection_error_pct"] == pytest.approx(-100 / 3)


def test_the_reports_show_raw_and_calibrated_projection_error():
    from tilesweep.report import data as summary
    from tilesweep.report import html as report_html
    from tilesweep.report import markdown as report

    frame = verdict.calibrate(verdict._projection_error(pd.DataFrame(TWO_MEASURED)))
    errors = summary.projection_errors(frame)
    assert list(errors["layout"]) == ["tp1-pp1-ep1", "tp2-pp1-ep1"]
    line = summary.projection_headline(frame)
    assert line == (
        "Projection vs measurement on 2 measured layouts: -33%; calibrated by the measured "
        "single-device step, -6% on the 1 point it was not taken from."
    )
    empty = pd.DataFrame()
    data = summary.build({"model": {"name": "m"}}, empty, empty, empty, frame, {}, figures={})
    text, page = report.render(data), report_html.render(data)
    for out in (text, page):
        assert "How far to trust the projections" in out and "calibrated_error_pct" in out
