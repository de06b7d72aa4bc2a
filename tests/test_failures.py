"""`tilesweep failed` lists exactly the per-cell files holding failed rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tilesweep.cli import main
from tilesweep.failures import failed_outputs, failed_rows


def _results(tmp_path):
    res = tmp_path / "results"
    (res / "build" / "triton" / "sm_90" / "k1").mkdir(parents=True)
    (res / "build" / "triton" / "sm_90" / "k1" / "build.json").write_text(
        json.dumps({"status": "compile", "reason": "ptxas error"})
    )
    (res / "build" / "triton" / "sm_90" / "k2").mkdir(parents=True)
    (res / "build" / "triton" / "sm_90" / "k2" / "build.json").write_text(
        json.dumps({"status": "ok"})
    )
    (res / "decode").mkdir()
    pd.DataFrame({"status": ["ok", "timeout"]}).to_csv(res / "decode" / "a.csv", index=False)
    pd.DataFrame({"status": ["ok", "unsupported"]}).to_csv(res / "decode" / "b.csv", index=False)
    (res / "launch" / "triton" / "h200").mkdir(parents=True)
    (res / "launch" / "triton" / "h200" / "k1.json").write_text(json.dumps({"status": "launch"}))
    return res


def test_failed_outputs_skip_ok_unsupported_and_launch_results(tmp_path):
    res = _results(tmp_path)
    names = [p.relative_to(res).as_posix() for p in failed_outputs(res)]
    assert names == ["build/triton/sm_90/k1/build.json", "decode/a.csv"]
    only = failed_outputs(res, {"timeout"})
    assert [p.name for p in only] == ["a.csv"]


def test_cli_prints_paths_and_rejects_a_missing_folder(tmp_path, capsys):
    res = _results(tmp_path)
    assert main(["failed", str(res), "--status", "compile"]) == 0
    assert capsys.readouterr().out.strip().endswith("k1/build.json")
    assert main(["failed", str(tmp_path / "nope")]) == 2
    assert "no per-cell outputs here" in capsys.readouterr().err


def test_a_work_folder_finds_its_results_and_bad_arguments_are_refused(tmp_path, capsys):
    """`failed .` from the project folder reads ./results (a timeout row is not missed); an
    unknown --status is one line; a tune table's timeout and an unreadable file are failures."""
    res = _results(tmp_path)
    (res / "tune").mkdir()
    pd.DataFrame({"status": ["ok", "timeout"]}).to_csv(res / "tune" / "bf16.csv", index=False)
    (res / "tune" / ".work" / "bf16").mkdir(parents=True)
    (res / "tune" / ".work" / "bf16" / "spec.json").write_text("{}")
    (res / "decode" / "c.csv").write_text("")
    assert main(["failed", str(tmp_path), "--status", "timeout"]) == 0
    out = capsys.readouterr().out.split()
    assert [Path(p).relative_to(res).as_posix() for p in out] == ["decode/a.csv", "tune/bf16.csv"]
    assert main(["failed", str(tmp_path), "--status", "timout"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'timout': not a status" in err
    assert "decode/c.csv" in {p.relative_to(res).as_posix() for p in failed_outputs(res)}


def test_a_missing_status_is_a_failure_with_its_reason(tmp_path):
    res = tmp_path / "results"
    (res / "decode").mkdir(parents=True)
    pd.DataFrame({"status": ["ok", None]}).to_csv(res / "decode" / "a.csv", index=False)
    pd.DataFrame({"time_ms": [1.0]}).to_csv(res / "decode" / "b.csv", index=False)
    (res / "build").mkdir()
    (res / "build" / "c.json").write_text(json.dumps({"reason": "?"}))
    rows = failed_rows(res)
    assert [(p.name, s) for p, s in zip(rows["path"], rows["status"], strict=True)] == [
        ("c.json", "missing"),
        ("a.csv", "missing"),
        ("b.csv", "missing"),
    ]
    assert list(rows["reason"]) == [
        "no status recorded",
        "no status recorded",
        "the file has no status column",
    ]
    assert [p.name for p in failed_outputs(res, {"missing"})] == ["c.json", "a.csv", "b.csv"]


def test_a_record_replaced_by_a_folder_is_listed_as_failed(tmp_path):
    res = tmp_path / "results"
    (res / "decode" / "cell.csv").mkdir(parents=True)
    (res / "decode" / "cell.csv" / "inside").write_text("x")
    assert failed_outputs(res) == [res / "decode" / "cell.csv"]


def test_a_cell_cut_to_its_header_is_listed_as_damaged(tmp_path):
    """N044: a cell's CSV cut to its header (its .sum says its job wrote a row), or a header-only
    CSV with no record, is failed and named; a cell whose record says it holds no row is not."""
    from tilesweep.cells import write_cell_table

    res = tmp_path / "results"
    (res / "collective").mkdir(parents=True)
    cut, bare, none = (res / "collective" / f"{n}.csv" for n in ("cut", "bare", "none"))
    write_cell_table(cut, pd.DataFrame({"status": ["ok"], "time_ms": [1.0]}))
    cut.write_text(cut.read_text().splitlines()[0] + "\n")
    bare.write_text("status,time_ms\n")
    write_cell_table(none, pd.DataFrame({"status": [], "time_ms": []}))
    rows = failed_rows(res)
    reasons = dict(zip((p.name for p in rows["path"]), rows["reason"], strict=True))
    assert set(reasons) == {"cut.csv", "bare.csv"}
    assert reasons["cut.csv"].startswith("damaged: ")
    assert "bytes where its job wrote" in reasons["cut.csv"]
    assert "a header and no rows" in reasons["bare.csv"]


def test_a_damaged_launch_record_is_listed_but_a_launch_that_does_not_fit_is_not(tmp_path):
    """A launch record is the answer whatever its status; one edited after its job wrote it, or
    replaced by a folder, is damaged like any stage's."""
    from tilesweep.cells import write_cell_json

    folder = tmp_path / "results" / "launch" / "triton" / "h200"
    folder.mkdir(parents=True)
    edited, fits_not, kept = (folder / f"{n}.json" for n in ("edited", "fits_not", "kept"))
    write_cell_json(edited, {"status": "ok", "fits": "default"})
    edited.write_text(edited.read_text().replace('"default"', '"optin"'))
    write_cell_json(fits_not, {"status": "launch", "fits": "no"})
    write_cell_json(kept, {"status": "ok", "fits": "default"})
    (folder / "gone.json").mkdir()
    rows = failed_rows(tmp_path / "results")
    reasons = dict(zip((p.name for p in rows["path"]), rows["reason"], strict=True))
    assert set(reasons) == {"edited.json", "gone.json"}
    assert reasons["edited.json"].startswith("damaged: ")
    assert reasons["gone.json"] == "a folder where the record goes"
