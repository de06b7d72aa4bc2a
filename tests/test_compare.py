"""`tilesweep compare A B`: what changed beyond the noise between two results folders."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import snakemake

from tilesweep import compare
from tilesweep.cells import write_cell_table
from tilesweep.cli import main

TILESWEEP = str(Path(sys.executable).with_name("tilesweep"))


def cli(*args: str) -> subprocess.CompletedProcess:
    """Run the installed `tilesweep` console script; return the finished process."""
    return subprocess.run([TILESWEEP, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def second_sweep(tmp_path_factory) -> Path:
    """Return a work folder holding a second, independent tiny sweep."""
    work = tmp_path_factory.mktemp("tiny_again")
    snakemake(work, "--cores", "2", overrides=["experiment=tiny"])
    return work


# ---- the rules -------------------------------------------------------------------------------


def test_a_timed_change_counts_only_beyond_both_spreads():
    assert compare.measure_change(1.0, 1.2, 0.3, 0.1, 0.1) == (False, "spread")
    assert compare.measure_change(1.0, 1.5, 0.3, 0.1, 0.1) == (True, "spread")
    assert compare.measure_change(1.0, 1.05, math.nan, 0.01, 0.1) == (False, "threshold")
    assert compare.measure_change(1.0, 1.2, math.nan, math.nan, 0.1) == (True, "threshold")
    assert compare.measure_change(1.0, math.nan, 0.1, 0.1, 0.1) == (True, "presence")


def decode_rows(time_ms: float, p10: float, p90: float, repeats: int = 20) -> pd.DataFrame:
    """Return one timed decode row."""
    return pd.DataFrame(
        [
            {
                "runner": "triton:k",
                "dtype": "bf16",
                "op": "down",
                "routing": "uniform",
                "tokens_per_expert": 16,
                "status": "ok",
                "bound": "memory",
                "time_ms": time_ms,
                "time_p10_ms": p10,
                "time_p90_ms": p90,
                "repeats": repeats,
            }
        ]
    )


def test_decode_time_within_the_spread_is_noise_and_outside_is_not():
    a = decode_rows(1.00, 0.95, 1.10)
    near = compare.compare_table("decode", a, decode_rows(1.08, 1.00, 1.12), 0.1)
    far = compare.compare_table("decode", a, decode_rows(1.30, 1.25, 1.35), 0.1)
    time_near = near[near["metric"] == "time_ms"].iloc[0]
    time_far = far[far["metric"] == "time_ms"].iloc[0]
    assert (time_near["beyond"], time_near["basis"]) == (False, "spread")
    assert (time_far["beyond"], time_far["basis"]) == (True, "spread")
    one_repeat = compare.compare_table("decode", a, decode_rows(1.08, 1.08, 1.08, 1), 0.1)
    assert one_repeat[one_repeat["metric"] == "time_ms"].iloc[0]["basis"] == "threshold"


def test_a_damaged_spread_or_time_never_hides_a_change():
    """A p90 of 1e308 (or inf, or a p10 below zero) is no spread: the change falls to the
    threshold; a negative or infinite time always differs, said so."""
    a = decode_rows(1.00, 0.95, 1.10)
    for p10, p90 in ((0.5, 1e308), (0.5, math.inf), (-5.0, 6.0), (2.0, 3.0)):
        got = compare.compare_table("decode", a, decode_rows(1.50, p10, p90), 0.1)
        row = got[got["metric"] == "time_ms"].iloc[0]
        assert (row["beyond"], row["basis"]) == (True, "threshold"), (p10, p90)
    for bad in (-1.0, math.inf):
        got = compare.compare_table("decode", a, decode_rows(bad, 0.95, 1.10), 0.1)
        row = got[got["metric"] == "time_ms"].iloc[0]
        assert row["beyond"] and row["basis"] == "not a time (negative or infinite)", bad


def test_a_relative_error_gone_to_inf_or_nan_counts_as_changed_and_is_named():
    """C081/C085: a decode row whose rel_err went from 0.0017 to inf (or NaN) changed, named as
    a wrong or damaged result; one that crossed the dtype's tolerance changed too; noise in a
    passing error did not."""
    a = decode_rows(1.00, 0.95, 1.10).assign(rel_err=0.0017)
    for bad in (math.inf, math.nan, -math.inf):
        got = compare.compare_table("decode", a, a.assign(rel_err=bad), 0.1)
        row = got[got["metric"] == "rel_err"].iloc[0]
        assert row["beyond"] and "not a number (inf or NaN)" in row["basis"], bad
    crossed = compare.compare_table("decode", a, a.assign(rel_err=0.5), 0.1)
    assert crossed[crossed["metric"] == "rel_err"].iloc[0]["beyond"]
    noise = compare.compare_table("decode", a, a.assign(rel_err=0.0019), 0.1)
    assert not noise[noise["metric"] == "rel_err"].iloc[0]["beyond"]
    assert not noise["beyond"].any()


def test_any_launch_change_counts_and_new_rows_are_listed():
    a = pd.DataFrame(
        {
            "backend": ["triton", "triton"],
            "target": ["h200", "h200"],
            "kernel": ["k1", "k2"],
            "status": ["ok", "ok"],
            "fits": ["optin", "default"],
            "smem_bytes": [99328, 11264],
        }
    )
    b = a.copy()
    b.loc[0, "smem_bytes"] = 99329
    b.loc[1, ["fits", "status"]] = ["no", "launch"]
    b = pd.concat([b, a.iloc[[0]].assign(kernel="k3")], ignore_index=True)
    changes = compare.compare_table("launch", a, b, 0.5)
    beyond = changes[changes["beyond"]]
    assert set(zip(beyond["label"], beyond["metric"], strict=True)) == {
        ("triton h200 k1", "smem_bytes"),
        ("triton h200 k2", "fits"),
        ("triton h200 k2", "status"),
        ("triton h200 k3", "row"),
    }


def test_a_table_with_rows_in_one_run_only_is_named_not_skipped():
    tune = pd.DataFrame(
        {"dtype": ["bf16"], "experts": [256], "n": [2048], "m": [1], "routing": ["uniform"],
         "runner": ["fused_moe"], "source": ["finalist"], "config": ["c"], "op": ["both"],
         "status": ["ok"], "tuned": [True], "time_ms": [0.1]}
    )  # fmt: skip
    changes = compare.compare_table("tune", pd.DataFrame(), tune, 0.1)
    assert changes[["metric", "basis", "label"]].values.tolist() == [
        ["table", "only in B", "1 rows"]
    ]
    run = compare.Run(Path("."), {}, {})
    text = compare.format_changes(changes, run, run, 0.1)
    assert "tune: only in B (1 rows); nothing to compare" in text
    # Both runs with the table: its timed values are compared like the decode table's.
    slower = tune.assign(time_ms=0.2)
    moved = compare.compare_table("tune", tune, slower, 0.1)
    assert moved.loc[moved["metric"] == "time_ms", "beyond"].item()


# ---- two real results folders ----------------------------------------------------------------


@pytest.mark.slow
def test_compare_two_real_runs(tiny_sweep, second_sweep, tmp_path):
    out = tmp_path / "diff"
    proc = cli("compare", str(tiny_sweep / "results"), str(second_sweep), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for table in ("device", "launch", "decode", "collective", "verdict", "check"):
        assert f"\n{table}: " in proc.stdout
    # The same compiler builds the same kernels: their launch checks must agree exactly.
    assert "launch: 0 of" in proc.stdout
    changes = pd.read_csv(out / "changes.csv")
    assert {"launch", "decode", "collective", "verdict"} <= set(changes["table"])
    timed = changes[(changes["table"] == "decode") & (changes["metric"] == "time_ms")]
    assert not timed.empty
    assert pd.to_numeric(timed["a"]).gt(0).all() and pd.to_numeric(timed["b"]).gt(0).all()
    assert (out / "changes.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.txt").read_text() in proc.stdout


@pytest.mark.slow
def test_compare_flags_an_edited_run_and_fails_on_request(tiny_sweep, tmp_path):
    edited = tmp_path / "edited"
    for part in ("tables", "device"):
        shutil.copytree(tiny_sweep / "results" / part, edited / part)
    launch = pd.read_csv(edited / "tables" / "launch.csv")
    launch.loc[0, "smem_bytes"] += 1024
    # Written with its record, as another run's job would (compare refuses a table of a recorded
    # run whose record it contradicts or lacks).
    write_cell_table(edited / "tables" / "launch.csv", launch)

    same = cli("compare", str(tiny_sweep), str(tiny_sweep), "--fail-on-change")
    assert same.returncode == 0, same.stdout
    counts = re.findall(r"(\d+) of (\d+) values changed", same.stdout)
    # The ceilings, launch, decode, collective, verdict, check and power tables (the tune table
    # is empty on a machine without a GPU, and the engines table in the tiny experiment, which
    # cites no engine figures: nothing to compare).
    assert len(counts) == 7 and all(moved == "0" for moved, _ in counts)

    moved = cli("compare", str(tiny_sweep), str(edited), "--fail-on-change")
    assert moved.returncode == 1
    assert "launch: 1 of" in moved.stdout
    before = int(launch.loc[0, "smem_bytes"]) - 1024
    assert f"smem_bytes: {before:,} -> {before + 1024:,}" in moved.stdout


def test_compare_refuses_a_folder_without_tables(tmp_path, capsys):
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert "no tables/" in capsys.readouterr().err


def test_compare_refuses_a_table_damaged_after_its_job_wrote_it(tmp_path, capsys):
    """A table whose .sum record it no longer matches (edited, cut short, its record a folder)
    is one line naming it, never compared as if it were that run's."""
    from tilesweep.cells import summary_path, write_cell_table

    old = pd.DataFrame({"engine": ["SGLang"], "batch": [8], "composed_tpot_ms": [10.0]})
    table = tmp_path / "a" / "tables" / "engines.csv"
    table.parent.mkdir(parents=True)
    write_cell_table(table, old)  # an engines table of before tpot_low_ms: compared as it is
    (tmp_path / "b" / "tables").mkdir(parents=True)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    capsys.readouterr()
    table.write_text("engine,engine\n1,2\n")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"{table}: " in err and "where its job wrote" in err and err.count("\n") == 1
    summary_path(table).unlink()
    summary_path(table).mkdir()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "record is unreadable" in capsys.readouterr().err
