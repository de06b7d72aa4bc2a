"""Killing a real sweep at any moment loses nothing finished and leaves nothing half-written."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import TINY, _finished_outputs, assert_whole, snakemake


def test_a_killed_then_interrupted_sweep_resumes_keeping_finished_cells(resumed_sweep):
    # The session's tiny sweep (conftest.resumed_sweep): kill -9 once the first launch check is
    # written, then Ctrl-C the resumed run once it has written a table of its own, then a plain
    # rerun. Neither later run rebuilt what a run before it finished (a rebuilt file keeps its
    # new mtime), and the sweep ended whole; test_workflow's nothing-to-do test plans it again.
    work, finished, after, failure = resumed_sweep
    if failure is not None:
        raise failure
    assert finished
    for path, mtime in finished.items():
        assert after[path] == mtime, f"{path} was rebuilt"
    assert (work / "results" / "report.md").exists()
    assert_whole(work / "results")


# Two jobs' blocks as Snakemake 9.27 logged them in a tiny sweep stopped with Ctrl-C: the verdict
# finished, the layout benchmark was cut short (its error, and no `Finished` line).
LOG = """\
localrule verdict:
    input: results/decode/baselines-fp8.csv, results/device/ceilings.json
    output: results/tables/verdict.csv (update), results/tables/card.json (update)
    log: results/logs/verdict.log
    jobid: 20
    reason: Missing output files: results/tables/card.json
    resources: tmpdir=/tmp
localrule bench_layout:
    output: results/layout/tp1-pp1-ep1.csv
    log: results/logs/bench_layout/tp1-pp1-ep1.log
    jobid: 17
    wildcards: layout=tp1-pp1-ep1
Select jobs to execute...
Finished jobid: 20 (Rule: verdict)
1 of 24 steps (4%) done
Terminating processes on user request, this might take some time.
Error in rule bench_layout:
    message: None
    jobid: 17
    output: results/layout/tp1-pp1-ep1.csv
localrule all:
    input: results/report.md
    jobid: 0
Finished jobid: 0 (Rule: all)
"""


def test_finished_means_a_job_the_log_records_as_finished():
    assert _finished_outputs(LOG) == {"results/tables/verdict.csv", "results/tables/card.json"}


def test_a_launch_check_cut_short_by_a_kill_does_not_rerun_the_verdict(tiny_sweep, copy_of):
    # kill -9 between a launch check's JSON and its .sum record (what the resumed sweep above
    # risks): the plan reruns that check (and the joins that read it), not the finished verdict,
    # which reads no launch check (its rebuild param was the whole ledger).
    work = copy_of(tiny_sweep)
    cell = next((work / "results" / "launch").rglob("*.json"))
    Path(f"{cell}.sum").unlink()
    plan = snakemake(work, "-n", overrides=TINY)
    stats = plan.stdout + plan.stderr
    assert re.search(r"^check_launch +1$", stats, re.M), stats[-2000:]
    assert not re.search(r"^verdict +\d+$", stats, re.M), stats[-2000:]
