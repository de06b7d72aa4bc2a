"""One Status enum for every status a stage writes, and one rule for the fastest correct runner."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from tilesweep.columns import SETTLED, Status, fastest_runner, status_of
from tilesweep.isolate import Isolated

SRC = Path(__file__).resolve().parents[1] / "src" / "tilesweep"
# A status literal as the code writes it: "status": "x", status = "x" ... else "y", base_row(.., "x"
WRITTEN = (
    r'"status":\s*"(\w+)"',
    r'status\s*=\s*"(\w+)"\s+if\b[^\n]*else\s+"(\w+)"',
    r'base_row\([^,]+,\s*"(\w+)"',
    r'Isolated\("(\w+)"',
    r'build\.get\("status",\s*"(\w+)"\)',
)


def written_statuses() -> set[str]:
    """Return every status literal the package writes into a row."""
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        for pattern in WRITTEN:
            for match in re.finditer(pattern, text):
                found |= {g for g in match.groups() if g}
    return found


def test_every_status_a_stage_writes_is_a_member():
    written = written_statuses()
    assert {"ok", "compile", "launch", "runtime", "timeout", "crash", "skipped"} <= written
    assert written <= {s.value for s in Status}, written - {s.value for s in Status}
    assert Isolated("error", "x").kind == Status.ERROR  # decode writes the isolation's kind


def test_status_is_a_string_and_missing_is_never_ok():
    assert Status.OK == "ok" and f"{Status.TIMEOUT}" == "timeout"
    assert pd.Series(["ok", "launch"]).eq(Status.OK).tolist() == [True, False]
    assert status_of(None) is Status.MISSING and status_of(math.nan) is Status.MISSING
    assert status_of("") is Status.MISSING and Status.MISSING not in SETTLED
    with pytest.raises(ValueError):
        status_of("fine")


def rows(*records: tuple) -> pd.DataFrame:
    """Return decode-like rows (runner, op, tokens_per_expert, time_ms, status)."""
    return pd.DataFrame(records, columns=["runner", "op", "tokens_per_expert", "time_ms", "status"])


def test_fastest_runner_ignores_failed_rows_and_missing_times():
    frame = rows(
        ("a", "down", 1, 2.0, "ok"),
        ("b", "down", 1, 0.5, "launch"),  # failed: faster, but not correct
        ("c", "down", 1, math.nan, "ok"),  # no time
        ("d", "down", 1, 1.5, None),  # no status
        ("e", "down", 2, math.nan, "ok"),  # a group with nothing timed is absent
        ("f", "gate_up", 1, 3.0, "ok"),
    )
    best = fastest_runner(frame, by=["op", "tokens_per_expert"])
    assert best[["op", "tokens_per_expert", "runner"]].values.tolist() == [
        ["down", 1, "a"],
        ["gate_up", 1, "f"],
    ]
    assert fastest_runner(frame).iloc[0]["runner"] == "a"  # no groups: one row


def test_fastest_runner_breaks_ties_by_name_not_row_order():
    forward = rows(("z", "down", 1, 1.0, "ok"), ("y", "down", 1, 1.0, "ok"))
    backward = forward.iloc[::-1]
    for frame in (forward, backward):
        assert fastest_runner(frame, by=["op"]).iloc[0]["runner"] == "y"


def test_fastest_runner_on_empty_or_columnless_tables():
    assert fastest_runner(pd.DataFrame(), by=["op"]).empty
    assert fastest_runner(rows().drop(columns=["status"]), by=["op"]).empty
    per_expert = rows(("a", "down", 1, 9.0, "ok"), ("b", "down", 1, 5.0, "ok")).assign(
        per_expert_ms=[1.0, 2.0]
    )
    assert fastest_runner(per_expert, time="per_expert_ms").iloc[0]["runner"] == "a"
