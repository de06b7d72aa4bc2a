"""The report's figures read at a 1,280 px page: at most MAX_SERIES series per axis however many
the tables hold, text no smaller than 10 px as shown, shared scales where panels are compared,
the deployment's hardware first, and no ceiling drawn as a roof below what was measured."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text

from tilesweep.references import BAND
from tilesweep.report import sections
from tilesweep.report.decode_figures import decode_roofline, decode_time, shown_runners
from tilesweep.report.document import Figure
from tilesweep.report.machine_figures import collective_bandwidth, deployment_target, launch_smem
from tilesweep.report.plotting import (
    DPI,
    MAX_SERIES,
    REFERENCE,
    compare_ratios,
    enforce_series,
    png,
    series_labels,
    top_series,
)
from tilesweep.report.step_figures import check_error, engine_points, engine_tpot, verdict_split

# The report's image column at a 1,280 px page (report/html.py): 1,200 px less padding, border.
COLUMN_PX = 1164
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
KERNELS = [
    f"triton:bf16-m{m}n{n}k128-s{s}-w4-default"
    for m, n, s in itertools.product((16, 32, 64, 128), (64, 128), (3, 4))
]
BASELINES = ["torch_bmm", "torch_matmul", "torch_grouped_mm"]


# ---- how a figure is inspected ----------------------------------------------------------------


def _in_containers(ax) -> set[int]:
    """Return the ids of every artist that belongs to one of ax's containers (error bars)."""
    found = set()
    for container in ax.containers:
        stack = list(container.get_children())
        while stack:
            child = stack.pop()
            if isinstance(child, (list, tuple)):
                stack.extend(child)
            else:
                found.add(id(child))
    return found


def series_count(ax) -> int:
    """Return the data series on ax: labelled lines, collections and containers; every other
    line or collection must be a marked reference or part of a labelled container."""
    inside = _in_containers(ax)
    for artist in [*ax.get_lines(), *ax.collections]:
        label = str(artist.get_label())
        counted = label and not label.startswith("_") and artist.get_gid() != REFERENCE
        assert counted or artist.get_gid() == REFERENCE or id(artist) in inside, (
            f"{ax.get_title()!r}: an unlabelled series {artist!r} escapes the count"
        )
    return len(series_labels(ax))


def assert_readable(fig) -> None:
    """Assert every axis carries at most MAX_SERIES series and no text is under 10 px as the
    report shows the figure at a 1,280 px page."""
    for ax in fig.get_axes():
        assert series_count(ax) <= MAX_SERIES, (ax.get_title(), series_labels(ax))
    width = struct.unpack(">I", png(fig)[16:20])[0]
    scale = min(1.0, COLUMN_PX / width)
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            px = text.get_fontsize() * DPI / 72 * scale
            assert px >= 10, f"{text.get_text()[:40]!r} is {px:.1f} px at {width} px wide"


def legend_titles(fig) -> str:
    """Return the titles of every legend of a figure and its subfigures, joined."""
    legends = [*fig.legends, *(leg for sub in fig.subfigs for leg in sub.legends)]
    return "\n".join(leg.get_title().get_text() for leg in legends)


# ---- tables with many series ------------------------------------------------------------------


def decode_rows(runners: list[str], copy_gbs: float = 5000.0, peak: float = 900.0) -> pd.DataFrame:
    """Return timed decode rows: every runner at every op, routing and tokens per expert, in
    bf16 and fp8; runner i is slower than runner i-1 except at 256 tokens, where the last wins."""
    rows = []
    for dtype, op, routing, tpe in itertools.product(
        ("bf16", "fp8"), ("gate_up", "down"), ("uniform", "zipf"), TOKENS
    ):
        for i, runner in enumerate(runners):
            time = 0.1 * (1 + 0.05 * i) * max(1.0, tpe / 16)
            if tpe == 256 and i == len(runners) - 1:
                time = 0.01
            flops, nbytes = 2e9 * tpe, 4e8
            rows.append(
                {
                    "runner": runner.replace("bf16", dtype),
                    "dtype": dtype,
                    "op": op,
                    "routing": routing,
                    "tokens_per_expert": tpe,
                    "time_ms": time,
                    "time_p10_ms": time * 0.95,
                    "time_p90_ms": time * 1.05,
                    "gbs": nbytes / time / 1e6,
                    "tflops": flops / time / 1e9,
                    "intensity": flops / nbytes,
                    "ceiling_copy_gbs": copy_gbs,
                    "ceiling_matmul_tflops": peak,
                    "status": "ok",
                }
            )
    return pd.DataFrame(rows)


def launch_rows(targets=("h200", "b200", "rtx_pro_6000")) -> pd.DataFrame:
    """Return 16 launch rows per target, of every fit, with the SM120-like limits 1 KiB apart."""
    rows = []
    fits = ["default", "optin", "no", "unknown"]
    for target, (m, n) in itertools.product(
        targets, itertools.product((16, 32, 64, 128), (64, 128, 256, 512))
    ):
        rows.append(
            {
                "target": target,
                "arch": "sm_x",
                "backend": "triton",
                "dtype": "bf16",
                "tile_m": m,
                "tile_n": n,
                "tile_k": 128,
                "stages": 3,
                "epilogue": "default",
                "smem_bytes": 256.0 * m * n / 8,
                "smem_model_bytes": 300.0 * m * n / 8,
                "mainloop_smem_bytes": 200.0 * m * n / 8 if n == 128 else np.nan,
                "fits": fits[(m + n) % 4],
                "status": "ok",
                "smem_default_bytes": 49152,
                "smem_limit_bytes": 101376,
                "smem_per_sm_bytes": 102400,
            }
        )
    return pd.DataFrame(rows)


def verdict_rows(layouts: int = 8, batches=(1, 8, 32, 128, 512, 4096)) -> pd.DataFrame:
    """Return a verdict: layout i fits up to batch 8 * 2**i, the first layout at none."""
    rows = []
    for i, batch in itertools.product(range(layouts), batches):
        fits = i > 0 and batch <= 8 * 2**i
        share = np.nan if not fits else 1.0 + i + batch / 16
        rows.append(
            {
                "hardware": "rtx_pro_6000",
                "layout": f"tp{i + 1}-pp1-ep1",
                "batch": batch,
                "fits_memory": "yes" if fits else "no",
                "memory_ms": share,
                "math_ms": share / 4,
                "comm_ms": share / 8,
                "other_ms": 2.0 if fits else np.nan,
            }
        )
    return pd.DataFrame(rows)


# ---- the series limit --------------------------------------------------------------------------


def test_top_series_keeps_the_forced_ones_and_the_best_in_their_order():
    ranked = [f"r{i}" for i in range(10)]
    shown, left = top_series(ranked, 4, keep=["r9"])
    assert shown == ["r0", "r1", "r2", "r9"] and left == ["r3", "r4", "r5", "r6", "r7", "r8"]
    assert top_series(ranked[:3]) == (ranked[:3], [])


def test_enforce_series_refuses_an_axis_over_the_limit():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    for i in range(MAX_SERIES + 1):
        ax.plot([0, 1], [i, i], label=f"s{i}")
    ax.axhline(0.5, gid=REFERENCE)  # a reference line is not a series
    with pytest.raises(ValueError, match=f"{MAX_SERIES + 1} series"):
        enforce_series(fig)
    ax.lines[0].remove()
    assert enforce_series(fig) is fig


@pytest.mark.parametrize("draw", [decode_time, decode_roofline], ids=["time", "roofline"])
def test_decode_figures_show_at_most_max_series_of_many_runners_and_say_so(draw):
    rows = decode_rows(KERNELS + BASELINES)
    fig = draw(rows)
    assert_readable(fig)
    n = len(KERNELS) + len(BASELINES)
    assert f"{MAX_SERIES} of {n} runners" in legend_titles(fig)
    assert "decode table" in legend_titles(fig)


def test_the_runners_shown_are_the_winners_the_nearest_and_the_fastest_baseline():
    rows = decode_rows(KERNELS + BASELINES)
    shown, left = shown_runners(rows[rows["dtype"] == "bf16"])
    # The last runner (a baseline) wins only at 256 tokens, yet it is shown, second after the
    # first (the fastest elsewhere); then the runners nearest the fastest. It is the fastest
    # baseline too, so no other baseline takes a place.
    assert shown[:2] == [KERNELS[0], BASELINES[-1]]
    assert set(shown) == {*KERNELS[:5], BASELINES[-1]}
    only_kernels = rows[(rows["dtype"] == "bf16") & (rows["runner"] != BASELINES[-1])]
    shown, _ = shown_runners(only_kernels)
    assert shown[-1] == BASELINES[0] and shown[:5] == KERNELS[:5]  # the fastest baseline kept
    assert len(shown) + len(left) == len(KERNELS) + len(BASELINES)


def test_cpu_bandwidth_panels_show_their_points_not_an_empty_axis():
    # The default CPU sweep: torch baselines at 0.05-18 GB/s under a 24 GB/s copy ceiling.
    rows = decode_rows(["torch_bmm", "torch_matmul"], copy_gbs=24.0, peak=1e9)
    rows["gbs"] = rows["gbs"] / rows["gbs"].max() * 18.0
    fig = decode_time(rows)
    assert_readable(fig)
    bandwidth = [ax for ax in fig.get_axes() if ax.get_ylabel().startswith("achieved bandwidth")]
    assert bandwidth
    for ax in bandwidth:
        lo, hi = ax.get_ylim()
        assert 0 < lo <= rows["gbs"].min() and 24.0 < hi < 24.0 * 10
    drawn = [
        line for ax in fig.get_axes() for line in ax.get_lines() if line.get_gid() != REFERENCE
    ]
    assert any(len(line.get_xdata()) == len(TOKENS) for line in drawn)


def test_a_ceiling_below_what_ran_is_a_labelled_gap_not_a_roof():
    # The default CPU report's case: the measured matmul peak under the decode runs' own rate.
    rows = decode_rows(["torch_bmm", "torch_matmul"], copy_gbs=1e6, peak=1e-3)
    fig = decode_roofline(rows)
    titles = legend_titles(fig)
    assert "measured matmul peak, 0.001 TFLOPS, is below" in titles and "a gap" in titles
    for ax in fig.get_axes():
        for line in ax.get_lines():
            if line.get_gid() == REFERENCE:  # the roof that is drawn: bandwidth only
                assert np.ptp(np.asarray(line.get_ydata(), float)) > 0
    rows = decode_rows(["torch_bmm"], copy_gbs=1.0)
    assert "measured copy bandwidth, 1 GB/s, is below" in legend_titles(decode_time(rows))


# ---- the other figures ------------------------------------------------------------------------


def test_the_launch_figure_puts_the_deployments_hardware_first_and_names_both_close_limits():
    launch = launch_rows()
    verdict = verdict_rows()
    fig = launch_smem(launch, first=deployment_target(verdict))
    assert_readable(fig)
    panels = [ax for ax in fig.get_axes() if ax.get_yticklabels()]
    assert panels[0].get_title(loc="left").startswith("rtx_pro_6000")
    assert [ax.get_title(loc="left").split()[0] for ax in panels[1:]] == ["h200", "b200"]
    assert len({ax.get_xlim() for ax in panels}) == 1  # one x scale
    names = [t.get_text() for t in panels[0].texts]
    assert "opt-in per block 99 KiB" in names and "per SM 100 KiB" in names
    spots = {t.get_text(): t.get_position() for t in panels[0].texts}
    assert spots["opt-in per block 99 KiB"] != spots["per SM 100 KiB"]
    styles = {line.get_linestyle() for line in panels[0].get_lines() if line.get_gid() == REFERENCE}
    assert {"--", "-"} <= styles
    # Without a deployment, the table's order.
    plain = [ax for ax in launch_smem(launch).get_axes() if ax.get_yticklabels()]
    assert plain[0].get_title(loc="left").startswith("h200")


def test_the_split_panels_share_one_scale_and_leave_no_slot_for_what_does_not_fit():
    verdict = verdict_rows()
    fig = verdict_split(verdict)
    assert_readable(fig)
    axes = [ax for ax in fig.get_axes() if ax.get_ylabel()]
    assert len(axes) > 1  # 26 bars wrap into rows
    assert len({ax.get_ylim() for ax in axes}) == 1
    fitting = verdict[verdict["fits_memory"] == "yes"]
    ticks = [t.get_text() for ax in axes for t in ax.get_xticklabels()]
    assert len(ticks) == len(fitting)  # one slot per bar that is drawn, none for the rest
    assert "tp1-pp1-ep1" not in ticks
    note = legend_titles(fig)
    assert "tp1-pp1-ep1 at every batch" in note and "No layout has a bar at batch 4096" in note


def test_the_check_panels_share_one_scale():
    rows = []
    for i, batch in itertools.product(range(8), (1, 8, 64)):
        ms = (i + 1) * batch
        rows.append(
            {
                "layout": f"l{i}",
                "batch": batch,
                "measured_ms": ms,
                "measured_p10_ms": ms * 0.9,
                "measured_p90_ms": ms * 1.1,
                "composed_ms": ms * 1.2,
                "roofline_ms": ms * 0.5,
                "held_out": i > 0,
            }
        )
    fig = check_error(pd.DataFrame(rows))
    assert_readable(fig)
    axes = [ax for ax in fig.get_axes() if ax.get_title()]
    assert len(axes) == 8 and len({ax.get_ylim() for ax in axes}) == 1


def test_collectives_cap_their_groups_per_panel_and_share_a_scale_per_row():
    rows = []
    for name, group, size in itertools.product(
        ("all_reduce", "all_to_all", "send_recv"), range(2, 18, 2), (4096, 65536, 2**20)
    ):
        time = 0.01 * group + size / 1e9
        rows.append(
            {
                "collective": name,
                "group": group,
                "backend": "nccl",
                "bytes": size,
                "time_ms": time,
                "time_p10_ms": time * 0.9,
                "time_p90_ms": time * 1.1,
                "busbw_gbs": size / time / 1e6,
                "status": "ok",
            }
        )
    fig = collective_bandwidth(pd.DataFrame(rows))
    assert_readable(fig)
    assert "all_reduce: 2 more groups in the table (x14 nccl, x16 nccl)" in legend_titles(fig)
    panels = [ax for ax in fig.get_axes() if ax.axison]
    for row in {ax.get_subplotspec().rowspan.start for ax in panels}:
        limits = {ax.get_ylim() for ax in panels if ax.get_subplotspec().rowspan.start == row}
        assert len(limits) == 1, row


def test_compare_ratios_is_readable_with_many_changes():
    changes = pd.DataFrame(
        {
            "table": ["decode"] * 40 + ["launch"] * 5,
            "label": [f"k{i}" for i in range(45)],
            "metric": "time_ms",
            "ratio": np.linspace(0.5, 2.0, 45),
            "beyond": [i % 3 == 0 for i in range(45)],
        }
    )
    assert_readable(compare_ratios(changes))


def test_the_engine_figure_is_log_log_with_the_band_and_a_marker_per_engine():
    engines = pd.DataFrame(
        [{"engine": e, "model": m, "hardware": h, "engine_tpot_ms": t, "composed_tpot_ms": c}
         for e, m, h, t, c in [
             ("SGLang", "glm5", "h200", 10.0, 9.0), ("SGLang", "glm5", "h200", 20.0, 30.0),
             ("vLLM", "glm5", "h200", 15.0, 14.0), ("vLLM", "qwen3", "b200", 5.0, 2.0),
             ("SGLang", "qwen3", "b200", 8.0, float("nan")),  # not composed: table only
         ]]
    )  # fmt: skip
    assert len(engine_points(engines)) == 4
    fig = engine_tpot(engines)
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [
        "h200: 2 of 3 figures in band", "b200: 0 of 1 figure in band"
    ]  # fmt: skip
    markers = {}
    for ax in axes:
        assert ax.get_xscale() == ax.get_yscale() == "log"
        (band,) = [c for c in ax.collections if not c.get_label() or c.get_label()[0] == "_"]
        xs, ys = band.get_paths()[0].vertices.T
        ratios = sorted(set(np.round(ys[xs > 0] / xs[xs > 0], 2)))
        assert ratios[0] == BAND[0] and ratios[-1] == BAND[1]
        for points in ax.collections:
            if points is not band:
                engine = points.get_label().split()[0]
                markers.setdefault(engine, set()).add(points.get_paths()[0].vertices.tobytes())
    assert set(markers) == {"SGLang", "vLLM"} and all(len(m) == 1 for m in markers.values())
    assert len({next(iter(m)) for m in markers.values()}) == 2  # a marker of its own each
    assert png(engine_tpot(pd.DataFrame()))[:4] == b"\x89PNG"


def test_the_engine_figure_stands_in_the_engines_part_of_the_check_section():
    kept = Path(__file__).resolve().parents[1] / "docs" / "examples" / "h200" / "engines.csv"
    engines = pd.read_csv(kept).head(6)
    blocks = sections.engine_blocks(engines)
    names = [type(b).__name__ for b in blocks]
    assert Figure("engine_tpot") in blocks
    assert names.index("Figure") < len(names) - 1 and names[-1] == "Table"
