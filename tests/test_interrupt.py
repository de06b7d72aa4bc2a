"""Killing a real sweep at any moment loses nothing finished and leaves nothing half-written."""

from __future__ import annotations

from conftest import assert_whole


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
