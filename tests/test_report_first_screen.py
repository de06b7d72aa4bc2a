"""The report's first screen: the answer in one sentence, the tie rule, the grid of the layouts
that fit, the Pareto frontier, and in-page links that all land on an element."""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import re

import numpy as np
import pandas as pd
import pytest
from test_report_html import blocks_of, browse, settings_stub

from tilesweep import answer_card, answer_picks
from tilesweep.config import compose, compose_settings
from tilesweep.plan import row_inputs
from tilesweep.report import analysis, contents, headlines, measurement_sections
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.report.document import Figure
from tilesweep.report.pareto_figure import frontier, pareto, pareto_points, shown_layouts
from tilesweep.report.plotting import png


def rests_line(card: answer_card.AnswerCard) -> str:
    """Return what a card rests on (answer.json's rests_on), every clause, on one line."""
    return "; ".join(card.rests_on.values()) + "."


def asking(*overrides: str):
    """Return settings with no case study, asking the answer card the target overrides set."""
    return compose_settings(["question=none", *overrides])


NO_QUESTION = asking()  # settings whose question asks the card nothing

CHECK = pd.DataFrame(
    {
        "layout": ["tp1", "tp1", "tp2", "tp2"],
        "batch": [1, 8, 1, 8],
        "held_out": [False, True, True, True],
        "composed_error_pct": [0.5, -4.0, 7.0, 2.0],
        "device": "NVIDIA H200",
    }
)


def row(layout: str, world: int, batch: int, tpot: float | None, split=(4.0, 1.0, 0.5, 0.2)):
    """Return one verdict row: it fits when tpot is given, its bound from the split."""
    fits = tpot is not None
    memory, math, comm, other = split
    parts = sorted(split, reverse=True)
    return {
        "model": "m",
        "hardware": "gpu",
        "layout": layout,
        "world": world,
        "batch": batch,
        "fits_memory": "yes" if fits else "no",
        "mem_short_gb": np.nan if fits else 12.5,
        "tpot_ms": tpot if fits else np.nan,
        "tokens_per_s": batch * 1000 / tpot if fits else np.nan,
        "tokens_per_s_per_gpu": batch * 1000 / tpot / world if fits else np.nan,
        "memory_ms": memory,
        "math_ms": math,
        "comm_ms": comm,
        "other_ms": other,
        "bound": "memory" if fits else "does-not-fit",
        "margin": f"{parts[0] / parts[1]:.1f}x" if fits else np.nan,
        "source": "composed" if fits else "model",
    }


def hand_verdict() -> pd.DataFrame:
    """Return a small verdict: tp2 wins at batches 1 and 8, tp1 at 64, none at 512; tp4 fits
    at no batch."""
    rows = [
        row("tp1", 1, 1, 10.0),
        row("tp1", 1, 8, 12.0),
        row("tp1", 1, 64, 20.0),
        row("tp1", 1, 512, None),
        row("tp2", 2, 1, 8.0),
        row("tp2", 2, 8, 9.0),
        row("tp2", 2, 64, None),
        row("tp2", 2, 512, None),
        *(row("tp4", 4, b, None) for b in (1, 8, 64, 512)),
    ]
    return pd.DataFrame(rows)


def test_the_grid_shows_the_layouts_that_fit_and_sums_up_the_rest_in_one_line():
    data = contents.build(settings_stub(), *[pd.DataFrame()] * 3, hand_verdict(), {}, check=CHECK)
    first = data.sections[0]
    assert first.key == "summary"
    grid = next(b for b in first.blocks if hasattr(b, "frame"))
    assert list(grid.frame["layout"]) == ["tp1", "tp2"]  # tp4 fits nowhere: not a row
    assert {word for word, _ in grid.legend} >= {"mixed", "kernel-limited", "launch", "tie"}
    text = report_md.render(data)
    assert "Fit in memory at no batch, so not in the grid: tp4 (12.5 GB short)." in text
    assert text.index("| tp1 | 1 |") < text.index("- **mixed**") < text.index("`pareto`")
    page = report_html.render(data)
    assert '<div class="with-legend"><div class="scroll"><table>' in page


# ---- the tie rule ---------------------------------------------------------------------------


def test_a_margin_within_5_percent_of_the_mixed_line_is_a_tie():
    assert headlines.is_tie(1.2 * 1.05, 1.2) and headlines.is_tie(1.2 * 0.95, 1.2)
    assert not headlines.is_tie(1.27, 1.2) and not headlines.is_tie(1.13, 1.2)
    assert not headlines.is_tie(float("nan"), 1.2)
    tied = row("tp1", 1, 1, 10.0, split=(1.21, 1.0, 0.1, 0.1))  # 1.21x: bound `memory`
    clear = row("tp1", 1, 8, 10.0, split=(1.5, 1.0, 0.1, 0.1))
    mixed = dict(tied, bound="mixed", memory_ms=1.16)  # 1.16x: mixed, but only just
    limited = dict(tied, bound="kernel-limited")  # decided before the mixed line
    assert [headlines.bound_tie(r) for r in (tied, clear, mixed, limited)] == [
        True, False, True, False
    ]  # fmt: skip
    worded = headlines.worded(pd.DataFrame([tied, clear, mixed]))
    assert list(worded["margin"]) == ["1.21x tie", "1.5x", "1.16x tie"]
    with_tie = headlines.tie_column(pd.DataFrame([tied, clear]))
    assert list(with_tie.columns).index("tie") == list(with_tie.columns).index("margin") + 1
    assert list(with_tie["tie"]) == ["1.21x, within 5% of the 1.2x mixed line", ""]


# ---- the Pareto figure -------------------------------------------------------------------


def dominated_by_brute_force(points: pd.DataFrame) -> set[int]:
    """Return the index of every point some other point beats on one axis and ties or beats
    on the other."""
    out = set()
    for i, p in points.iterrows():
        for j, q in points.iterrows():
            ge = q["per_user"] >= p["per_user"] and q["per_gpu"] >= p["per_gpu"]
            if i != j and ge and (q["per_user"], q["per_gpu"]) != (p["per_user"], p["per_gpu"]):
                out.add(i)
    return out


def test_the_frontier_is_exactly_the_points_no_other_point_dominates():
    points = pd.DataFrame(
        {
            "layout": list("abcdefg"),
            "per_user": [10.0, 20.0, 30.0, 15.0, 30.0, 20.0, 5.0],
            "per_gpu": [100.0, 60.0, 10.0, 50.0, 5.0, 60.0, 100.0],
        }
    )
    # d is beaten by b; e by c (same x, lower y); g by a (same y, lower x); b and f are equal.
    assert list(frontier(points)["layout"]) == ["a", "b", "f", "c"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        random = pd.DataFrame(
            {"per_user": rng.integers(1, 8, 15).astype(float), "per_gpu": rng.integers(1, 8, 15)}
        )
        expected = set(random.index) - dominated_by_brute_force(random)
        assert set(frontier(random).index) == expected
    assert frontier(points.iloc[0:0]).empty


def test_the_pareto_figure_takes_the_rows_that_fit_and_at_most_six_layouts():
    points = pareto_points(hand_verdict())
    assert sorted(zip(points["layout"], points["batch"], strict=True)) == [
        ("tp1", 1), ("tp1", 8), ("tp1", 64), ("tp2", 1), ("tp2", 8)
    ]  # fmt: skip
    assert points.loc[points["layout"] == "tp2", "per_user"].tolist() == [125.0, 1000 / 9]
    many = pd.DataFrame([row(f"l{i}", 1, 1, 10.0 + i) for i in range(9)])
    drawn, rest = shown_layouts(pareto_points(many))
    assert drawn == ["l0", "l1", "l2", "l3", "l4", "l5"] and rest == ["l6", "l7", "l8"]
    for verdict in (hand_verdict(), many, pd.DataFrame()):
        assert png(pareto(verdict))[:4] == b"\x89PNG"


def coincident_verdict() -> pd.DataFrame:
    """Return the kept H200 example's shape: two layouts at one point at batch 8 (TP8 and
    TP4+PP2), TP8's line along the frontier, a third layout and close labels."""
    rows = [
        row("tp1-pp1-ep8", 8, 1, 19.0), row("tp1-pp1-ep8", 8, 8, 24.6),
        row("tp1-pp1-ep8", 8, 64, 41.4), row("tp4-pp2-ep1", 8, 1, 12.2),
        row("tp4-pp2-ep1", 8, 8, 17.5), row("tp4-pp2-ep1", 8, 64, 50.3),
        row("tp8-pp1-ep1", 8, 1, 11.4), row("tp8-pp1-ep1", 8, 8, 17.52),
        row("tp8-pp1-ep1-xep", 8, 1, 13.7), row("tp8-pp1-ep1-xep", 8, 8, 21.0),
    ]  # fmt: skip
    return pd.DataFrame(rows)


def label_boxes(fig) -> list:
    """Return the window extents of the point labels of a drawn Pareto figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.get_axes()
    return [t.get_window_extent(renderer) for t in ax.texts]


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_the_pareto_labels_never_overlap(seed):
    verdict = coincident_verdict()
    if seed is not None:  # a crowded grid: 5 layouts x 6 batches, some points close together
        rng = np.random.default_rng(seed)
        verdict = pd.DataFrame([
            row(f"l{i}", 8, b, float(rng.uniform(10, 12) * (1 + b / 64)))
            for i in range(5) for b in (1, 2, 4, 8, 16, 32)
        ])  # fmt: skip
    fig = pareto(verdict)
    boxes = label_boxes(fig)
    # Every point has a label; coincident points share one that says how many it stands for.
    texts = [t.get_text() for t in fig.get_axes()[0].texts]
    shared = [int(m) for t in texts for m in re.findall(r"\((\d+) layouts\)", t)]
    assert len(texts) - len(shared) + sum(shared) == len(pareto_points(verdict))
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def test_coincident_pareto_points_share_one_label_and_both_markers_show():
    fig = pareto(coincident_verdict())
    label_boxes(fig)
    (ax,) = fig.get_axes()
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("8 (2 layouts)") == 1 and len(texts) == 9
    sizes = sorted(s for c in ax.collections for s in c.get_sizes())
    assert sizes[0] < sizes[-1]  # the later of the two coincident points drawn inside


def test_the_pareto_frontier_is_a_line_of_its_own():
    fig = pareto(coincident_verdict())
    (ax,) = fig.get_axes()
    (front,) = [line for line in ax.get_lines() if line.get_gid() == "frontier"]
    layouts = [line for line in ax.get_lines() if line.get_gid() != "frontier"]
    assert len(layouts) == 4
    for line in layouts:
        assert line.get_color() != front.get_color()
        assert front.get_linewidth() > 3 * line.get_linewidth()
        assert front.get_zorder() < line.get_zorder()  # under every layout's own line


# ---- in-page links ---------------------------------------------------------------------------


def links_and_ids(page: str) -> tuple[set[str], set[str]]:
    """Return the targets of a page's in-page links and the ids of its elements."""
    return set(re.findall(r'href="#([^"]*)"', page)), set(re.findall(r'\bid="([^"]*)"', page))


def test_a_deployment_the_question_does_not_ask_about_links_to_no_missing_section():
    settings = compose_settings(["hardware=h200"])
    data = contents.build(settings, *[pd.DataFrame()] * 3, hand_verdict(), {})
    page = report_html.render(data)
    links, ids = links_and_ids(page)
    assert links and links <= ids
    assert '<a href="#brief">' not in page  # the panel is absent, so is its link
    assert "Not answered here: The brief&#x27;s question" in page


@pytest.mark.slow
def test_every_in_page_link_of_the_swept_report_resolves_in_chromium(tiny_sweep, tmp_path):
    page = tiny_sweep / "results" / "report.html"
    dom = browse(page, tmp_path / "profile", "--window-size=1280,900", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    links, ids = links_and_ids(dom.stdout)
    assert "brief" in links and "summary" in links
    assert links <= ids, f"links to no element: {sorted(links - ids)}"
    first = dom.stdout.index('<section id="summary">')
    assert first < dom.stdout.index('<section id="brief">') < dom.stdout.index('id="machine"')


# ---- the answer card -------------------------------------------------------------------------

FIT = "launch-aware fit on NVIDIA H200, tp1 cuda-graph step of m at batches [1, 64]"
SHIPPED = "shipped as docs/fit.json, its costs per kernel and efficiencies"
INPUTS = row_inputs.dumps(
    {
        "memory_bandwidth_gbs": "4800 (hardware[gpu])",
        "interconnect": "nvlink4/nvswitch",
        "interconnect from": "hardware[gpu].interconnect_model",
        "part times": f"composed ({FIT}; {SHIPPED})",
        "routing": "random top-k",
        "fit": FIT,
        "fit file": SHIPPED,
        "expert GEMMs": "nvfp4, no nvfp4 kernel timed; the bf16 step's efficiency applied to "
        "their bytes",
    }
)
ENGINES = pd.DataFrame(
    [{"engine": "SGLang", "model": "m", "hardware": "gpu", "layout": "tp2", "batch": 1,
      "engine_tpot_ms": 20.0, "composed_tpot_ms": 9.2, "composed_over_engine": 0.46}]
)  # fmt: skip


def carded_verdict() -> pd.DataFrame:
    """Return hand_verdict with each row's inputs naming the fit and a roofline floor."""
    verdict = hand_verdict().assign(inputs_json=INPUTS)
    return verdict.assign(x_floor=np.where(verdict["fits_memory"] == "yes", 2.0, np.nan))


def test_the_card_names_per_batch_the_fastest_layout_that_fits_with_its_figures():
    card = answer_card.build(NO_QUESTION, carded_verdict(), CHECK, ENGINES)
    assert [(p.batch, p.layout) for p in card.picks] == [(1, "tp2"), (8, "tp2"), (64, "tp1")]
    tp2 = card.picks[0]
    assert tp2.tpot_ms == 8.0 and tp2.tokens_per_s_per_user == 125.0 and tp2.gpus == 2
    assert tp2.tokens_per_s_per_gpu == pytest.approx(62.5) and tp2.x_floor == 2.0
    assert card.no_fit_batches == [512]
    assert card.headline.startswith("m on gpu: the most tokens/s per GPU: tp1 (1 GPU) at batch 64")


def test_the_cards_rests_on_line_names_the_fit_the_verdict_used_and_the_rest():
    verdict = carded_verdict()
    card = answer_card.build(NO_QUESTION, verdict, CHECK, ENGINES)
    # The fit verdict.csv's inputs carry, with where it was shipped from, and the row's items.
    assert card.rests_on["fit"] == f"parts composed from the {FIT}"
    assert card.rests_on["fit file"] == SHIPPED
    assert card.inputs == row_inputs.of(verdict.iloc[0])
    assert "the bf16 step's efficiency applied to their bytes" in card.rests_on["expert GEMMs"]
    assert card.rests_on["collectives"].startswith(
        "collectives modelled from hardware[gpu].interconnect_model (nvlink4/nvswitch)"
    )
    assert "(0.46x)" in rests_line(card) and "SGLang" in rests_line(card)
    # A check made on another fit (a CPU's own) is said to say nothing of this one.
    assert card.rests_on["check"].startswith("check: none of this fit")
    same = CHECK.assign(composed_label=f"composed ({FIT})")
    assert (
        answer_card.build(NO_QUESTION, verdict, same)
        .rests_on["check"]
        .startswith("check: composed -4% to +7% off 3 held-out")
    )


def test_the_target_picks_the_most_tokens_per_gpu_that_meets_it_or_says_by_how_much_none_does():
    verdict = carded_verdict()
    asked = asking("question.tpot_target_ms=10.0")
    card = answer_card.build(asked, verdict, CHECK)
    # tp1 at 8 (12 ms) misses; tp2 at 8 (9 ms, 444 tok/s/GPU) beats tp1 at 1 (10 ms, 100).
    assert card.target.met and (card.target.pick.layout, card.target.pick.batch) == ("tp2", 8)
    assert card.headline.startswith("m on gpu: At TPOT <= 10 ms, the most tokens/s per GPU: tp2")
    floor = answer_card.build(asking("question.min_tokens_per_s_per_user=100"), verdict)
    assert (floor.target.pick.layout, floor.target.pick.batch) == ("tp2", 8)  # 111 tok/s/user
    missed = answer_card.build(asking("question.tpot_target_ms=5.0"), verdict)
    assert not missed.target.met and missed.target.miss_ms == pytest.approx(3.0)
    assert "No layout and batch meets TPOT <= 5 ms: the closest, tp2 (2 GPUs) at batch 1" in (
        missed.headline
    )
    assert "is 3 ms over the 5 ms it allows" in missed.headline
    nothing = answer_card.build(asked, verdict.assign(fits_memory="no"))
    assert "no layout fits in memory at any batch, so none meets it" in nothing.headline


def test_a_target_is_declared_in_the_config_with_its_range():
    from tilesweep.errors import ConfigError

    assert compose(["question.tpot_target_ms=30"])["question"]["tpot_target_ms"] == 30
    assert compose([])["question"]["tpot_target_ms"] is None
    for bad in ("question.tpot_target_ms=0", "question.min_tokens_per_s_per_user=-1"):
        with pytest.raises(ConfigError, match="greater than 0"):
            compose([bad])


def test_the_card_opens_both_reports_and_answer_json_holds_its_fields(tmp_path):
    data = contents.build(settings_stub(), *[pd.DataFrame()] * 3, carded_verdict(), {},
                          check=CHECK, engines=ENGINES)  # fmt: skip
    text, page = report_md.render(data), report_html.render(data)
    # The first thing after the title, in both.
    assert text.split("\n\n")[1].startswith("**The answer.** m on gpu: ")
    assert text.index("**The answer.**") < text.index("## ") and FIT in text.split("## ")[0]
    body = page[page.index("<body>") :]
    assert re.match(r"<body><header><h1>[^<]*</h1></header><section id=\"answer\"", body)
    assert "| 64 | tp1 | 1 | 20 | 50 | 3,200 | memory | 2x |" in text
    assert "`" not in page  # names in backticks are set as <code>, never shown raw
    path = tmp_path / "answer.json"
    answer_card.write(data.card, path)
    saved = json.loads(path.read_text())
    assert set(saved) >= {"model", "hardware", "headline", "picks", "rests_on", "target",
                          "header", "provenance", "check_error_pct", "commit", "gaps"}  # fmt: skip
    assert set(saved["picks"][0]) == {*answer_picks.PICK_FIELDS, "tpot_range_ms", "runner_up",
                                      "runner_up_tpot_ms", "margin_pct"}  # fmt: skip
    assert saved["commit"] and saved["check_error_pct"] is not None
    assert answer_card.console_lines(path) == data.card.lines()
    assert data.card.lines()[-1].startswith("Rests on: parts composed from the " + FIT)


@pytest.mark.slow
def test_the_swept_answer_json_is_the_card_both_reports_open_with(tiny_sweep):
    results = tiny_sweep / "results"
    card = answer_card.AnswerCard.from_dict(json.loads((results / "answer.json").read_text()))
    assert card.headline in (results / "report.md").read_text().split("## ")[0]


# ---- the launch check and the timed kernels ---------------------------------------------------


def timed_and_checked() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return (launch rows, decode rows): two Triton tiles checked and timed, a CUTLASS program
    timed but not checked, one of whose tiles failed to launch where timed, and a baseline."""
    launch = pd.DataFrame(
        {"target": "h200", "arch": "sm_90", "backend": "triton", "fits": "default",
         "status": "ok", "kernel": ["bf16-m16n64k64-s2-w4-default",
                                    "bf16-m32n64k64-s2-w4-default"]}
    )  # fmt: skip
    runners = [
        ("triton:bf16-m16n64k64-s2-w4-default", "ok", ""),
        ("triton:bf16-m32n64k64-s2-w4-default", "ok", ""),
        ("cutlass:128x128x128", "ok", ""),
        ("cutlass:128x256x128_s5", "launch", "initialize Error Internal: needs 280,576 B"),
        ("torch_bmm", "ok", ""),
    ]
    decode = pd.DataFrame(
        [{"runner": r, "status": s, "reason": why, "device": "NVIDIA H200", "dtype": "bf16",
          "op": "down", "routing": "uniform", "tokens_per_expert": 1,
          "time_ms": 0.1 if s == "ok" else np.nan} for r, s, why in runners]
    )  # fmt: skip
    return launch, decode


def test_the_launch_section_names_every_timed_kernel_it_does_not_cover_and_each_failure():
    launch, decode = timed_and_checked()
    coverage = analysis.launch_coverage(launch, decode)
    # The project's own timed kernels, never the library baseline.
    assert "torch_bmm" not in set(coverage["runner"])
    data = contents.build(settings_stub(), launch, decode, pd.DataFrame(), hand_verdict(), {})
    for text in (report_md.render(data), html.unescape(report_html.render(data))):
        launch_text = text[text.index("Which kernels launch") :]
        checked = set("triton:" + launch["kernel"])
        for runner in coverage["runner"]:
            # No contradiction: each timed kernel is in the launch table or named as lacking.
            lacks = re.search(r"it lacks \d+, timed on [^:]+: ([^\n<]+)\.", launch_text)
            assert runner in checked or (lacks and runner in lacks.group(1)), runner
        assert "The launch check covers 2 of the 4 kernels timed in decode" in launch_text
        assert (
            "Failed to launch where timed: cutlass:128x256x128_s5 on NVIDIA H200 (1 row; not a "
            "kernel of the launch check, so not in its counts above): initialize Error Internal: "
            "needs 280,576 B" in launch_text
        )
    everything = analysis.launch_coverage(
        pd.concat([launch, pd.DataFrame({"target": "h200", "backend": "cutlass", "fits": "no",
                   "kernel": ["128x128x128", "128x256x128_s5"]})]), decode,
    )  # fmt: skip
    assert (everything["in_launch_check"] == "yes").all()
    assert measurement_sections.coverage_lines(everything)[0] == (
        "The launch check covers all 4 kernels timed in decode."
    )


def test_every_cell_colour_of_the_verdict_grid_has_its_key_and_launch_is_not_does_not_fit():
    verdict = hand_verdict()
    verdict.loc[0, "bound"] = "launch"
    verdict.loc[1, "bound"] = "mixed"
    page = report_html.render(contents.build(settings_stub(), *[pd.DataFrame()] * 3, verdict, {}))
    cells = set(re.findall(r'<td class="v-([\w-]+)"', page))
    keys = set(re.findall(r'<span class="swatch v-([\w-]+)"', page))
    assert {"launch", "mixed", "memory", "does"} <= cells <= keys
    colour = dict(re.findall(r"\.v-([\w-]+)\{background:([^;}]+)", report_html.CSS))
    assert colour["launch"] != colour["does"] and len(set(colour.values())) == len(colour)


def test_pareto_labels_never_overlap_even_where_points_coincide():
    crowded = pd.DataFrame(
        [row("tp4", 8, 8, 17.71), row("tp8", 8, 8, 17.72), row("tp2", 2, 8, 17.0),
         row("tp4", 8, 1, 13.0), row("tp8", 8, 1, 12.9), row("ep8", 8, 64, 37.8),
         row("ep8", 8, 8, 17.8)]
    )  # fmt: skip
    fig = pareto(crowded)
    png(fig)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
    assert boxes and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[:i])
    # tp4, tp8 and ep8 at batch 8 sit on one spot: one label for all three, saying so.
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("8 (3 layouts)") == 1 and texts.count("8") == 1 and texts.count("1") == 2


def test_a_gpu_report_never_shows_cpu_collectives_as_its_own():
    launch, decode = timed_and_checked()
    decode = decode.assign(device_kind="cuda")
    gloo = pd.DataFrame(
        {"collective": "all_reduce", "group": 2, "backend": "gloo", "bytes": [1024, 4096],
         "time_ms": [0.1, 0.2], "status": "ok", "device": "cpu (x86_64, 2 threads)",
         "device_kind": "cpu"}
    )  # fmt: skip
    verdict = carded_verdict()
    data = contents.build(settings_stub(), launch, decode, gloo, verdict, {})
    section = next(s for s in data.sections if s.key == "collectives")
    text = " ".join(b.text for b in section.blocks if hasattr(b, "text"))
    assert "Not this GPU run's collectives: these ran on cpu (x86_64, 2 threads) over gloo" in text
    assert "modelled from hardware[gpu].interconnect_model (nvlink4/nvswitch)" in text
    assert "collective_bandwidth" not in [b.name for b in blocks_of(data, Figure)]
    assert all(t.collapsed and "on the CPU (gloo)" in t.title for t in section.blocks
               if hasattr(t, "frame"))  # fmt: skip
    # The check section says where the verdict's collectives come from, from the same inputs.
    check = next(s for s in data.sections if s.key == "check")
    assert "The verdict's own collectives: modelled from hardware[gpu]" in check.blocks[0].text


def test_report_text_counts_in_proper_plurals_and_ends_a_reason_with_one_stop():
    launch, decode = timed_and_checked()
    launch = launch.assign(reason="Tile_M must be a multiple of 64.", fits="no", status="compile")
    data = contents.build(settings_stub(), launch, decode, pd.DataFrame(), hand_verdict(), {})
    text = report_md.render(data)
    assert not re.search(r"(?<![\d.,])1 (rows|kernels|points|GPUs|tokens|runners|layouts)\b", text)
    assert "(1 row;" in text
    assert not re.search(r"[^.]\.\.(\s|$)", text)  # no 'of 64..', p10..p90 stays
    assert "multiple of 64." in text


def test_the_grid_and_the_card_label_tokens_per_s_per_gpu_alike():
    verdict = hand_verdict()
    page = report_md.render(contents.build(settings_stub(), *[pd.DataFrame()] * 3, verdict, {}))
    grid = analysis.verdict_pivot(verdict)
    # tp2 at batch 8: 9 ms, 888.9 tok/s in all over 2 GPUs, 444 per GPU (the card's unit).
    cell = grid.loc[grid["layout"] == "tp2", "batch 8"].item()
    assert "444 tok/s/GPU (889 all GPUs)" in cell.split("\n")
    assert max(map(len, cell.split("\n"))) <= 32  # short lines: the grid fits 1,280 px
    assert "| tok/s/GPU |" in page and "**tok/s/GPU (N all GPUs)**" in page


def test_the_reports_say_what_the_answer_rests_on_in_at_most_three_short_lines():
    data = contents.build(settings_stub(), *[pd.DataFrame()] * 3, carded_verdict(), {},
                          check=CHECK, engines=ENGINES)  # fmt: skip
    text, page = report_md.render(data), report_html.render(data)
    card = text.split("## ")[0]
    lines = re.findall(r"^- (.*)$", card[card.index("_Rests on_:") :], flags=re.M)
    items = re.findall(r"<li>(.*?)</li>", page[page.index('class="rests"') :].split("</ul>")[0])
    assert 1 <= len(lines) <= 3 and [html.unescape(i) for i in items] == lines
    assert all(len(line) <= 105 for line in lines)
    assert lines[0].startswith("parts composed from the launch-aware fit")
    assert lines[1].startswith("check: ") and lines[2].startswith("engine check: ")
    assert rests_line(data.card) not in text  # the whole list stays in answer.json


def test_the_short_rests_keep_the_clauses_they_name_whole_and_cut_long_ones():
    engine = "engine check: 3 of 4 within (median 5%; 1 contradicted)"
    card = answer_card.AnswerCard(
        model="m", hardware="gpu", picks=[], no_fit_batches=[],
        rests_on={"fit": "fit X", "engine check": engine, "engine figures": "SGLang ..."},
    )  # fmt: skip
    assert card.short_rests() == "fit X; engine check: 3 of 4 within (median 5%; 1 contradicted)."
    assert rests_line(card) == f"fit X; {engine}; SGLang ...."
    # Cut short before a bracket it would leave open, and no stop after the ellipsis.
    long = "engine check: 182 of 209 cited engine figures within 0.75-1.33x (median |error| 11%"
    long += "; 1 contradicted by its own source)"
    card = dataclasses.replace(card, rests_on={"fit": "fit X", "engine check": long})
    assert card.short_rests() == (
        "fit X; engine check: 182 of 209 cited engine figures within 0.75-1.33x ..."
    )
