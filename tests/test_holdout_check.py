"""benchmarks/holdout/check.py: the held-out sets it reads and the arguments it refuses before
composing (each refusal one line, exit 2); no figure is composed or scored here."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "holdout" / "check.py"
SETS = {"holdout": 90, "holdout2": 233}  # the least number of figures each set holds


def _module():
    spec = importlib.util.spec_from_file_location("holdout_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(CHECK), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_set_parses_with_the_shared_columns(name):
    """Both sets read through one reader: the shared columns, a number for every TPOT and
    concurrency, speculative decoding off (or none stated)."""
    figs = _module().read_set(str(ROOT / "benchmarks" / name))
    assert len(figs) >= SETS[name]
    assert len({f["id"] for f in figs}) == len(figs)
    for f in figs:
        assert float(f["tpot_ms"]) > 0 and int(f["batch"]) >= 1
        assert f["speculative"].startswith("none")
        assert f["source_url"].startswith("https://")


def test_cannot_compose_names_the_missing_conf_file():
    """A figure of a model or GPU conf/ has no file for is reported, not composed."""
    mod = _module()
    g = {"model": "qwen3_235b_a22b", "hardware": "h200", "deployment": "fp8_all"}
    assert mod.cannot_compose({**g, "engine_config": "vllm"}) == ""
    why = mod.cannot_compose({**g, "hardware": "gb200", "engine_config": "vllm"})
    assert why == "cannot compose: no conf/hardware/gb200.yaml"


def test_the_second_sets_uncomposable_rows_are_the_marked_ones():
    """holdout2 keeps the figures of models and GPUs conf/ lacks: exactly those its notes mark."""
    mod = _module()
    figs = mod.read_set(str(ROOT / "benchmarks" / "holdout2"))
    flagged = {f["id"] for f in figs if mod.cannot_compose(f)}
    marked = {f["id"] for f in figs if "Cannot compose" in f["note"]}
    assert flagged == marked and len(flagged) == 5


def test_refuses_a_folder_without_figures(tmp_path):
    """--set naming a folder with no figures.csv: one line, exit 2."""
    run = _run("--set", str(tmp_path), str(tmp_path / "out.csv"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"holdout: --set={tmp_path}: no figures.csv there; name a held-out set's folder"
    ]


def test_refuses_a_set_with_other_columns(tmp_path):
    """A figures.csv with other columns is refused before anything is composed."""
    (tmp_path / "figures.csv").write_text("id,tpot_ms\nx,1.0\n")
    run = _run("--set", str(tmp_path), str(tmp_path / "out.csv"))
    assert run.returncode == 2
    assert "figures.csv's columns are not id,source_url" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ("{tmp}", "a folder, where a file goes"),
        ("{tmp}/missing/out.csv", "does not exist"),
        ("benchmarks/holdout/figures.csv", "figures.csv"),
    ],
)
def test_out_csv_refusals_still_hold_with_a_set(tmp_path, out, words):
    """OUT_CSV's refusals (a folder, a missing folder, a tracked file) hold with --set given."""
    run = _run("--set", "benchmarks/holdout", out.format(tmp=tmp_path))
    assert run.returncode == 2
    assert words in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists()
