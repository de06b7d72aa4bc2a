"""The question as data (conf/question): it loads, validates in one line, and drives the report."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import question, verdict
from tilesweep.config import compose
from tilesweep.errors import ConfigError
from tilesweep.report import contents
from tilesweep.report import html as report_html
from tilesweep.report import markdown as report_md

CPU = {"device": "cpu", "device_kind": "cpu", "copy_gbs": 10.0, "matmul_tflops": {"bf16": 0.2}}
POWER = pd.DataFrame(
    [
        {"load": "decode_gemm", "expected_bound": "memory", "status": "ok",
         "power_frac_p10": 0.30, "power_frac_p90": 0.45},
    ]
)  # fmt: skip


def test_the_brief_loads_as_the_default_question():
    asked = question.of(compose([]))
    assert asked is not None and asked.asks_about("glm5", "rtx_pro_6000")
    assert asked.power.fraction == 235 / 600
    assert asked.layout_dicts() == [
        {"tp": 8, "pp": 1, "ep": 1},
        {"tp": 4, "pp": 2, "ep": 1},
        {"tp": 1, "pp": 1, "ep": 8},
    ]
    assert {(t.m, t.n, t.k) for t in asked.tiles.shapes} == {
        (128, 128, 128), (128, 128, 256), (128, 256, 128), (256, 128, 128)
    }  # fmt: skip
    assert question.of(compose(["question=none"])) is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("question.power.watts=nan", "question.power.watts=nan: Input should be a finite number"),
        ("question.power.watts=inf", "question.power.watts=inf: Input should be a finite number"),
        ("question.power.watts=700", "question.power: watts 700 above limit_watts 600"),
        ("question.gpus=4", "question: layouts[0] uses 8 GPUs, not 4"),
        ("question.gpus='8'", "question.gpus='8': Input should be a valid integer"),
        ("+question.colour=red", "question.colour='red': unknown key"),
        ("question.layouts=[{tp:8,pp:1}]", "question.layouts[0].ep: Field required"),
        ("question.hardware=tpu", "question.hardware='tpu': unknown hardware; valid: "),
    ],
)
def test_a_bad_question_is_refused_in_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def report_of(settings: dict) -> tuple[str, str]:
    """Return the Markdown and HTML reports of a settings' composed verdict (no figures drawn)."""

    def roofline(varied: dict) -> pd.DataFrame:
        return verdict.deployment_table(varied, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU)

    empty = pd.DataFrame()
    data = contents.build(
        settings, empty, empty, empty, roofline(settings), {}, figures=dict.fromkeys(
            ("launch_smem", "decode_time", "decode_roofline", "collective_bandwidth",
             "verdict_split", "check_error"), b""),
        power=POWER, panel=verdict.question_panel(settings, roofline),
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
