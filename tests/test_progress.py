"""The console's stage lines: the time-left arithmetic from job durations, the lines Snakemake's
events call for, and a tiny sweep's console (a line per stage with an estimate, the report last)."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from conftest import snakemake
from snakemake_interface_logger_plugins.common import LogEvent

from tilesweep.progress import Console
from tilesweep.progress_stage import Stage, clock, recorded_job_times, time_left


def record(created: float, event: LogEvent | None = None, msg: str | None = None, **extra):
    """Return a log record as Snakemake's scheduler logs it at time `created`."""
    fields = {"msg": msg, "levelno": logging.INFO, "levelname": "INFO", "created": created}
    return logging.makeLogRecord({**fields, **extra, **({"event": event} if event else {})})


def error(created: float, jobid: int, rule: str):
    """Return the record Snakemake logs when a job fails."""
    fields = {"levelno": logging.ERROR, "levelname": "ERROR", "rule_name": rule}
    return record(created, LogEvent.JOB_ERROR, "Error in rule", jobid=jobid, **fields)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.4, "<1s"), (42.4, "42s"), (59.6, "1m00s"), (190, "3m10s"), (3900, "1h05m")],
)
def test_clock(seconds, shown):
    assert clock(seconds) == shown


def test_time_left_spreads_the_pending_jobs_over_those_seen_at_once():
    # 28 pending at 30 s, two at once: 14 rounds of 30 s.
    assert time_left(28, [], 30.0, 2) == pytest.approx(420.0)
    # A running job 10 s in has 20 s of the mean left; one past the mean counts none.
    assert time_left(1, [10.0, 45.0], 30.0, 2) == pytest.approx((30 + 20 + 0) / 2)
    assert time_left(0, [], 30.0, 0) == 0.0


def test_an_estimate_comes_from_this_run_then_an_earlier_one_never_from_nothing():
    stage = Stage("bench_decode", total=4, durations=[10.0, 20.0], running={7: 100.0}, at_once=2)
    # 1 pending at the 15 s mean, the running job 5 s in has 10 s left, over 2 at once.
    assert stage.estimate(105.0, earlier=[99.0]) == (
        "~12s left (mean job 15s in this run, 2 at once)"
    )
    fresh = Stage("tables", total=3, running={1: 0.0}, at_once=1)
    assert fresh.estimate(0.0, earlier=[4.0, 8.0]) == (
        "~18s left (mean job 6s in an earlier run, 1 at once)"
    )
    assert fresh.estimate(0.0, earlier=None) == "no estimate yet"
    assert fresh.estimate(0.0, earlier=[]) == "no estimate yet"


def test_recorded_job_times_read_snakemakes_metadata_one_per_job(tmp_path):
    rows = [
        {"rule": "build_kernel", "starttime": 100.0, "endtime": 104.0},
        {"rule": "build_kernel", "starttime": 100.0, "endtime": 104.0},  # the job's 2nd output
        {"rule": "build_kernel", "starttime": 200.0, "endtime": 206.0},
        {"rule": "tables", "starttime": 1.0, "endtime": 3.0, "incomplete": True},
        {"rule": "tables", "starttime": None, "endtime": 3.0},
    ]
    for i, row in enumerate(rows):
        (tmp_path / f"r{i}").write_text(json.dumps(row))
    (tmp_path / "torn").write_text("{")
    assert recorded_job_times(tmp_path) == {"build_kernel": [4.0, 6.0]}
    assert recorded_job_times(tmp_path / "none") == {}


def feed(console: Console, *records) -> list[str]:
    """Return the lines the console writes for these records."""
    console.stream = io.StringIO()
    for r in records:
        console.emit(r)
    return console.stream.getvalue().splitlines()


def test_a_stage_says_it_started_once_its_batch_has_started_then_counts_down(tmp_path):
    console = Console(io.StringIO(), metadata=tmp_path, log_files=["run.log"], every_s=30)
    stats = {"build_kernel": 3, "tables": 1, "all": 1, "total": 5}
    lines = feed(
        console,
        record(0.0, LogEvent.RUN_INFO, "Job stats", stats=stats),
        record(0.0, LogEvent.JOB_STARTED, "Execute 2 jobs...", jobs=[1, 2]),
        record(0.0, LogEvent.JOB_INFO, jobid=1, rule_name="build_kernel"),
        record(0.1, LogEvent.JOB_INFO, jobid=2, rule_name="build_kernel"),
        record(10.0, LogEvent.JOB_FINISHED, job_id=1),
        record(10.0, LogEvent.JOB_STARTED, jobs=[3]),
        record(10.0, LogEvent.JOB_INFO, jobid=3, rule_name="build_kernel"),
        record(12.0, LogEvent.JOB_FINISHED, job_id=2),  # within 30 s of the last: no line
        error(20.0, 3, "build_kernel"),
    )
    assert lines == [
        "[tilesweep] 5 jobs in 2 stages; Snakemake's full log: run.log",
        "[tilesweep] build_kernel started: 3 jobs, no estimate yet",
        "[tilesweep] build_kernel 1/3 jobs, 10s elapsed, ~5s left (mean job 10s in this run, "
        "2 at once); other stages: to come tables (1); whole run ~5s left (2 at once), not "
        "counting tables (no job time yet)",
        "[tilesweep] build_kernel failed",
        "[tilesweep] build_kernel done: 3 jobs (1 failed) in 20s, mean job 11s; "
        "other stages: to come tables (1); whole run, not counting tables (no job time yet)",
    ]


def test_the_whole_run_estimate_sums_every_stage_left_at_its_measured_job_time(tmp_path):
    console = Console(io.StringIO(), metadata=tmp_path, every_s=0)
    console.earlier = {"tables": [4.0], "report": [2.0]}
    stats = {"bench": 4, "tables": 1, "report": 1, "all": 1, "total": 7}
    lines = feed(
        console,
        record(0.0, LogEvent.RUN_INFO, stats=stats),
        record(0.0, LogEvent.JOB_STARTED, jobs=[1, 2]),
        record(0.0, LogEvent.JOB_INFO, jobid=1, rule_name="bench"),
        record(0.0, LogEvent.JOB_INFO, jobid=2, rule_name="bench"),
        record(10.0, LogEvent.JOB_FINISHED, job_id=1),
    )
    # bench: 2 pending at 10 s and the running one 0 s left; tables 4 s, report 2 s, over 2.
    assert lines[-1].endswith("; whole run ~13s left (2 at once)"), lines[-1]


def test_the_last_job_ends_the_run_in_one_line_and_the_closing_lines_give_way(tmp_path):
    console = Console(io.StringIO(), metadata=tmp_path)
    lines = feed(
        console,
        record(0.0, LogEvent.RUN_INFO, stats={"tables": 1, "all": 1, "total": 2}),
        record(0.0, LogEvent.JOB_STARTED, jobs=[1]),
        record(0.0, LogEvent.JOB_INFO, jobid=1, rule_name="tables"),
        record(3.0, LogEvent.JOB_FINISHED, job_id=1),
        record(3.0, LogEvent.PROGRESS, done=1, total=2),
        record(3.0, LogEvent.JOB_STARTED, jobs=[0]),
        record(3.0, LogEvent.JOB_INFO, jobid=0, rule_name="all"),
        record(3.0, LogEvent.JOB_FINISHED, job_id=0),
        record(65.0, LogEvent.PROGRESS, done=2, total=2),
    )
    assert lines == [
        "[tilesweep] 2 jobs in 1 stage",
        "[tilesweep] tables started: 1 job, no estimate yet",
        "[tilesweep] tables done: 1 job in 3s; other stages: none",
        "[tilesweep] all 2 jobs done in 1m05s",
    ]
    assert console.hides(record(0.0, LogEvent.JOB_INFO, jobid=1, rule_name="tables"))
    assert console.hides(record(0.0, msg="Select jobs to execute..."))
    assert console.hides(record(0.0, msg="Complete log(s): run.log"))
    assert console.hides(error(0.0, 1, "tables")), "Console's `tables failed` line says it"
    assert not console.hides(record(0.0, msg="Complete log(s): run.log")), "after an error"
    assert not console.hides(record(0.0, msg="Exiting because a job execution failed."))


def test_an_event_it_cannot_read_gives_snakemakes_lines_back(tmp_path):
    console = Console(io.StringIO(), metadata=tmp_path)
    lines = feed(console, record(0.0, LogEvent.JOB_INFO, jobid=1))  # no rule_name
    assert len(lines) == 1 and lines[0].startswith("[tilesweep] stage lines stopped (")
    assert not console.hides(record(0.0, LogEvent.JOB_INFO, jobid=2, rule_name="tables"))


@pytest.mark.slow
def test_a_sweeps_console_is_a_line_per_stage_with_estimates_and_ends_naming_the_report(
    tiny_sweep, copy_of
):
    """Rerun the tiny sweep's decode and what follows it: estimates from the earlier run's
    durations first, then from this run's; no per-job blocks; the report named last."""
    work = copy_of(tiny_sweep)
    proc = snakemake(
        work, "--cores", "2", "--forcerun", "bench_decode", overrides=["experiment=tiny"]
    )
    console = proc.stderr.splitlines()
    ours = [ln for ln in console if ln.startswith("[tilesweep] ")]
    assert any(
        re.search(r"bench_decode started: 4 jobs, ~\S+ left \(mean job \S+ in an earlier run", ln)
        for ln in ours
    ), ours
    assert any(
        re.search(r"bench_decode 1/4 jobs, \S+ elapsed, ~\S+ left \(mean job \S+ in this run", ln)
        for ln in ours
    ), ours
    for stage in ("bench_decode", "tables", "verdict", "figures", "report"):
        assert any(ln.startswith(f"[tilesweep] {stage} done: ") for ln in ours), stage
    assert not any(ln.startswith(("Finished jobid", "localrule ", "rule ")) for ln in console)
    assert len(console) < 40, proc.stderr
    assert re.fullmatch(r"\[tilesweep\] all \d+ jobs done in \S+", console[-1]), console[-1]
    # stdout ends with the report's path, then the answer card (answer.json's, as both reports).
    out = proc.stdout.strip().splitlines()
    named = out.index("tilesweep: the report is results/report.html (report.md beside it)")
    assert out[named + 1].startswith("tilesweep: The answer: ")
    assert out[-1].startswith("tilesweep: Rests on: "), out[-1]
