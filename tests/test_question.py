"""The question as data (conf/question): it loads, validates in one line, and drives the report."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import fast_sample

from tilesweep import deployment_verdict
from tilesweep.config import compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.report import contents, sections
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md
from tilesweep.settings import RootSettings

CPU = {"device": "cpu", "device_kind": "cpu", "copy_gbs": 10.0, "matmul_tflops": {"bf16": 0.2}}
POWER = pd.DataFrame(
    [
        {"load": "decode_gemm", "expected_bound": "memory", "status": "ok",
         "power_frac_p10": 0.30, "power_frac_p90": 0.45},
    ]
)  # fmt: skip


def test_the_brief_loads_as_the_default_question():
    asked = compose_settings([]).question.case
    assert asked is not None and asked.asks_about("glm5", "rtx_pro_6000")
    assert asked.power.fraction == 235 / 600
    assert [(lay.tp, lay.pp, lay.ep) for lay in asked.layouts] == [(8, 1, 1), (4, 2, 1), (1, 1, 8)]
    assert {(t.m, t.n, t.k) for t in asked.tiles.shapes} == {
        (128, 128, 128), (128, 128, 256), (128, 256, 128), (256, 128, 128)
    }  # fmt: skip
    assert compose_settings(["question=none"]).question.case is None


@pytest.mark.parametrize(
    ("override", "message"),
    fast_sample(
        [
            (
                "question.power.watts=nan",
                "question.power.watts=nan: Input should be a finite number",
            ),
            (
                "question.power.watts=inf",
                "question.power.watts=inf: Input should be a finite number",
            ),
            ("question.power.watts=700", "question.power: watts 700 above limit_watts 600"),
            ("question.gpus=4", "question: layouts[0] uses 8 GPUs, not 4"),
            ("question.gpus='8'", "question.gpus='8': Input should be a valid integer"),
            ("+question.colour=red", "question.colour='red': unknown key"),
            ("question.layouts=[{tp:8,pp:1}]", "question.layouts[0].ep: Field required"),
            ("question.hardware=tpu", "question.hardware='tpu': unknown hardware; valid: "),
            (
                "question.tiles.shapes.0.ran=maybe",
                "question.tiles.shapes[0].ran='maybe': Input should",
            ),
        ]
    ),
)
def test_a_bad_question_is_refused_in_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def report_of(settings: dict, launch: pd.DataFrame | None = None) -> tuple[str, str]:
    """Return the Markdown and HTML reports of a settings' composed verdict (no figures drawn)."""

    def roofline(varied: RootSettings) -> pd.DataFrame:
        return deployment_verdict.deployment_table(
            varied, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU
        )

    empty = pd.DataFrame()
    launch = empty if launch is None else launch
    typed = RootSettings.model_validate(settings)
    data = contents.build(
        typed, launch, empty, empty, roofline(typed), {}, figures=dict.fromkeys(
            ("launch_smem", "decode_time", "decode_roofline", "collective_bandwidth",
             "verdict_split", "check_error"), b""),
        power=POWER, panel=deployment_verdict.question_panel(typed, roofline),
    )  # fmt: skip
    return report_md.render(data), report_html.render(data)


def test_the_question_panel_and_reading_appear_for_the_question():
    text, page = report_of(compose([]))
    assert "## The brief's question: TP8, TP4+PP2 or EP8" in text
    assert '<section id="brief">' in page and '<a href="#brief">' in page
    assert "The brief read about 235 W of 600 W (39%) during decode" in text
    assert "| load | expected_bound | band | brief | consistent |" in text


def test_a_deployment_that_is_not_the_question_gets_no_panel():
    text, page = report_of(compose(["hardware=h200"]))
    assert "## The brief's question" not in text and '<section id="brief">' not in page
    assert "The brief read about 235 W" in text  # the reading is still weighed on this device


def test_with_no_question_nothing_of_the_brief_appears():
    settings = compose(["question=none"])
    text, page = report_of(settings)
    shown = text.split("#### Resolved config")[0]  # the config block quotes model.source
    for phrase in ("brief", "235 W", "39%"):
        assert phrase not in shown, phrase
    assert "brief" not in page.split("<summary>Resolved config</summary>")[0]
    assert "Power as evidence" in text  # the section stays, without an outside reading


def sm120_launch(limit: int, *cells: tuple) -> pd.DataFrame:
    """Return CUTLASS launch rows on the brief's GPU, one per (tile, epilogue, stages asked,
    stages, bytes), checked against an opt-in limit of `limit` bytes as check_launch does."""
    rows = []
    for (m, n, k), epilogue, asked, stages, smem in cells:
        over = smem > limit
        rows.append(
            {"backend": "cutlass", "target": "rtx_pro_6000", "dtype": "nvfp4", "tile_m": m,
             "tile_n": n, "tile_k": k, "epilogue": epilogue, "stages_requested": asked,
             "stages": stages, "smem_bytes": smem, "smem_limit_bytes": limit,
             "overshoot_bytes": max(0, smem - limit), "fits": "no" if over else "optin",
             "status": "launch" if over else "ok", "reason": ""}
        )  # fmt: skip
    return pd.DataFrame(rows)


# Finalize-epilogue cells of the brief's four tiles, auto and 3 stages asked (the bytes as CUTLASS's
# types gave them on sm_120; any bytes would do: the sentences are built from the rows).
BRIEF_CELLS = [
    ((128, 128, 128), "finalize", "auto", 4, 101_376),
    ((128, 128, 128), "finalize", 3, 3, 82_944),
    ((128, 128, 256), "finalize", "auto", 2, 101_376),
    ((128, 128, 256), "finalize", 3, 3, 138_240),
    ((128, 256, 128), "finalize", "auto", 2, 82_944),
    ((128, 256, 128), "finalize", 3, 3, 110_592),
    ((256, 128, 128), "finalize", "auto", 2, 82_944),
    ((256, 128, 128), "finalize", 3, 3, 110_592),
]


def test_the_tile_findings_name_each_failing_combination_and_its_overshoot():
    asked = compose_settings([]).question.case
    said = sections.tile_failure_findings(sm120_launch(101_376, *BRIEF_CELLS), asked)
    assert said == [
        "128x128x256, finalize epilogue, 3 stages asked: 138,240 B, 36,864 B over the 101,376 B "
        "opt-in limit: would fail initialize, yet the brief saw this tile run, so its kernel asked "
        "for less; with auto stages the build picks 2 (101,376 B) and it fits after opt-in.",
        "128x256x128, finalize epilogue, 3 stages asked: 110,592 B, 9,216 B over the 101,376 B "
        "opt-in limit: reproduces the brief's initialize failure; with auto stages the build picks "
        "2 (82,944 B) and it fits after opt-in.",
        "256x128x128, finalize epilogue, 3 stages asked: 110,592 B, 9,216 B over the 101,376 B "
        "opt-in limit: reproduces the brief's initialize failure; with auto stages the build picks "
        "2 (82,944 B) and it fits after opt-in.",
        "No accounted setting matches all 4 of the brief's observations (which tiles ran, which "
        "failed); closest, 3 of 4: finalize epilogue, 3 stages asked (misses 128x128x256).",
    ]
    truth = sections.tile_launch_truth(sm120_launch(101_376, *BRIEF_CELLS), asked)
    column = dict(zip(truth["tile"] + "/" + truth["stages"].astype(str),
                      truth["reproduces_brief_failure"], strict=True))  # fmt: skip
    assert column["128x256x128/3"] == "yes: over the opt-in limit"
    assert column["128x128x256/3"] == "no: over the opt-in limit, but the brief saw it run"
    assert column["128x256x128/2"] == "no"


def test_the_tile_findings_follow_the_rows_not_fixed_numbers():
    asked = compose_settings([]).question.case
    # The stage count as a CSV reads it back ("3"), and a limit every cell fits under.
    launch = sm120_launch(140_000, *BRIEF_CELLS).assign(
        stages_requested=lambda f: f["stages_requested"].astype(str)
    )
    said = sections.tile_failure_findings(launch, asked)
    assert said[:2] == [
        f"{tile}: every accounted combination fits, so none reproduces the brief's initialize "
        "failure."
        for tile in ("128x256x128", "256x128x128")
    ]
    assert said[2].startswith("No accounted setting matches all 4 of the brief's observations")
    # Only auto cells, as before the explicit ones: two combinations of two tiles, both fit.
    auto = sm120_launch(101_376, *[c for c in BRIEF_CELLS if c[2] == "auto"])
    assert "closest, 2 of 4" in sections.tile_failure_findings(auto, asked)[-1]
    # A bigger overshoot, read from the row.
    big = [(t, e, a, s, b + 1_000 if a == 3 else b) for t, e, a, s, b in BRIEF_CELLS]
    said = sections.tile_failure_findings(sm120_launch(101_376, *big), asked)
    assert said[1].startswith("128x256x128, finalize epilogue, 3 stages asked: 111,592 B, 10,216 B")
    assert sections.tile_failure_findings(pd.DataFrame(), asked) == []


def test_the_tile_findings_appear_in_both_reports():
    text, page = report_of(compose([]), sm120_launch(101_376, *BRIEF_CELLS))
    sentence = "9,216 B over the 101,376 B opt-in limit: reproduces the brief&#x27;s initialize"
    assert sentence.replace("&#x27;", "'") in text
    assert sentence in page
