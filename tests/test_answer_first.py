"""The answer first: the verdict reads only the measurements it composes from (each cell's own
output, not the joined tables), so its answer card comes before the whole steps only the check
needs; the console shows the card the moment the verdict step ends."""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from conftest import ROOT, snakemake
from snakemake_interface_logger_plugins.common import LogEvent
from test_progress import feed, record
from test_report_first_screen import CHECK, ENGINES, NO_QUESTION, carded_verdict, rests_line

from tilesweep import answer_card
from tilesweep.pipeline import Sweep
from tilesweep.plan import row_inputs
from tilesweep.plan.calibration import FIT_LAYOUT
from tilesweep.progress import Console


def test_a_cpu_sweeps_verdict_waits_for_no_whole_step_and_no_joined_table():
    sweep = Sweep(["experiment=tiny", "device=cpu"], ROOT / "conf")
    inputs = sweep.stage5().verdict_inputs()
    assert inputs["layout"] == []
    # only the decode job timing the operand type the verdict reads (the baselines' fp8 one)
    assert (
        inputs["decode"]
        == sweep.decode_outputs(sweep.answer_decode_jobs())
        == [sweep.path("decode", "baselines-fp8.csv")]
    )
    assert inputs["collective"] == sweep.collective_outputs()
    joined = str(sweep.results / "tables")
    assert not any(p.startswith(joined) for paths in inputs.values() for p in paths)


def test_a_gpu_sweeps_verdict_waits_only_for_the_step_its_fit_is_made_on():
    sweep = Sweep(["experiment=tiny", "device=h200x1"], ROOT / "conf")
    stage = sweep.stage5()
    assert len(sweep.layout_outputs()) > 1
    assert stage.verdict_inputs()["layout"] == [sweep.path("layout", f"{FIT_LAYOUT}.csv")]
    # the check reads every whole step
    assert stage.check_inputs()["layout"] == sweep.layout_outputs()


def test_a_gpu_sweeps_verdict_waits_only_for_the_decode_jobs_timing_fp8():
    sweep = Sweep(["device=h200x1", "grid.dtypes=[bf16,fp8]"], ROOT / "conf")
    jobs = sweep.answer_decode_jobs()
    assert set(jobs) < set(sweep.decode_jobs)
    assert {"baselines-fp8", "cutlass-sm90-fp8"} <= set(jobs) and "baselines" not in jobs
    assert all(j.startswith("fp8-") for j in set(jobs) - {"baselines-fp8", "cutlass-sm90-fp8"})
    assert not any(j.startswith("bf16-") for j in jobs)
    assert sweep.stage5().verdict_inputs()["decode"] == sweep.decode_outputs(
        sweep.answer_decode_jobs()
    )


def test_the_verdict_composed_from_its_operand_types_rows_alone_is_the_same():
    """The kept H200 example's verdict and engine rows, composed from every decode row and from
    the fp8 rows alone: the same (what the answer does not wait for, it does not read)."""
    from tilesweep import deployment_verdict
    from tilesweep.report_paths import example_overrides
    from tilesweep.stages.verdict import composer

    folder = "docs/examples/h200"
    sweep = Sweep(example_overrides(folder), ROOT / "conf")
    _, decode, steps, collective, ceilings = composer(sweep.stage5(folder).verdict_inputs())
    fp8 = decode[decode["dtype"] == deployment_verdict.DECODE_DTYPE]
    assert 0 < len(fp8) < len(decode)
    dep = sweep.settings.deployment.model_copy(update={"weight_dtype": "fp8"})
    settings = sweep.settings.model_copy(update={"deployment": dep})
    every = deployment_verdict.deployment_table(settings, decode, collective, steps, ceilings)
    alone = deployment_verdict.deployment_table(settings, fp8, collective, steps, ceilings)
    # SGLang's own fused_moe curve (h200.yaml) takes precedence over the project's best fp8
    # decode kernel, which SGLang does not run; the expert input names it either way
    words = " ".join(row_inputs.column_words(every))
    assert "fused_moe" in words or "best fp8 kernel" in words
    pd.testing.assert_frame_equal(every, alone)


def test_a_kept_example_composes_from_its_joined_tables():
    sweep = Sweep(["experiment=tiny", "device=cpu"], ROOT / "conf")
    stage = sweep.stage5("docs/examples/h200")
    assert not stage.per_cell
    assert stage.verdict_inputs()["layout"] == ["docs/examples/h200/layout.csv"]


@pytest.mark.slow
def test_on_a_gpu_the_answer_needs_one_whole_step_and_nothing_the_check_alone_needs(tmp_path):
    done = snakemake(
        tmp_path,
        "-n",
        "--cores",
        "16",
        "--until",
        "verdict",
        "--config",
        "device=h200x1",
        f'overrides=["experiment=tiny","results_dir={tmp_path}/results"]',
    )
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout, flags=re.M))
    assert counts.get("bench_layout") == "1"
    assert counts.get("bench_decode") == "1"  # the one timing fp8 (baselines-fp8), no bf16 job
    assert counts.get("verdict") == "1"
    for later in ("tables", "check_steps", "build_batch", "measure_power", "report"):
        assert later not in counts, later


def test_the_console_shows_the_lines_a_stage_calls_for_once_when_its_last_job_ends(tmp_path):
    shown = ["The answer: x", "Rests on: y"]
    console = Console(io.StringIO(), metadata=tmp_path, when_done={"verdict": lambda: shown})
    lines = feed(
        console,
        record(0.0, LogEvent.RUN_INFO, stats={"verdict": 1, "report": 1, "total": 2}),
        record(0.0, LogEvent.JOB_STARTED, jobs=[1]),
        record(0.0, LogEvent.JOB_INFO, jobid=1, rule_name="verdict"),
        record(2.0, LogEvent.JOB_FINISHED, job_id=1),
        record(2.0, LogEvent.JOB_STARTED, jobs=[2]),
        record(2.0, LogEvent.JOB_INFO, jobid=2, rule_name="report"),
        record(4.0, LogEvent.JOB_FINISHED, job_id=2),
    )
    at = lines.index("[tilesweep] The answer: x")
    assert lines[at - 2].startswith("[tilesweep] verdict done: 1 job")
    assert lines[at - 1] == "[tilesweep] verdict ended 2s into the run:"
    assert lines[at + 1] == "[tilesweep] Rests on: y"
    assert sum("The answer" in line for line in lines) == 1


def test_the_card_before_its_check_says_the_check_comes_with_the_report(tmp_path):
    early = answer_card.build(NO_QUESTION, carded_verdict(), engines=ENGINES)
    path = tmp_path / "card.json"
    path.write_text(answer_card.card_json(early))
    lines = answer_card.early_lines(path)
    assert lines[0].startswith("The answer")
    assert lines[-1] == answer_card.CHECK_TO_COME
    assert "; check:" not in rests_line(early) and "engine check: SGLang" in rests_line(early)
    # With the check (the report's card, answer.json): the same picks and headline, the check
    # named.
    checked = answer_card.build(NO_QUESTION, carded_verdict(), CHECK, ENGINES)
    assert checked.picks == early.picks and checked.headline == early.headline
    assert "check: none of this fit" in rests_line(checked)
