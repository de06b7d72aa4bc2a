"""benchmarks/holdout/check.py: the held-out sets it reads and the arguments it refuses before
composing (each refusal one line, exit 2); no figure is composed or scored here."""

import csv
import importlib.util
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "holdout" / "check.py"
HOLDOUT2 = ROOT / "benchmarks" / "holdout2"  # scored, then spent (set 1 is in the corpus)
HOLDOUT3 = ROOT / "benchmarks" / "holdout3"  # session 62
HOLDOUT4 = ROOT / "benchmarks" / "holdout4"  # the scorer's default set (session 64)
SET2_LEAST = 233  # the least number of figures set 2 holds
SET3_LEAST = 329  # the least number of figures set 3 holds
PINNED = r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/.+#L\d+"  # a line at a commit
# a speculative launch: an InferenceX *_mtp[_slurm].sh script cited at a line of a commit
MTP_LAUNCH = r"InferenceX/blob/[0-9a-f]{40}/benchmarks/\S+_mtp(_slurm)?\.sh#L\d+"
SET3_UNCOMPOSABLE = 5  # its Kimi-K2.5 rows (no conf/model, no conf/deployment for INT4 experts)
SET1 = "(held-out set 1 of 2026-12-07, consumed in session 61)"  # how a folded note ends


def _module():
    spec = importlib.util.spec_from_file_location("holdout_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(CHECK), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _tmp_set(folder: Path) -> Path:
    """Write a one-figure set with the shared columns into `folder`; return the folder."""
    columns = _module().COLUMNS
    row = {c: "1" for c in columns} | {"id": "x", "speculative": "none", "tpot_ms": "9.5"}
    row["kv_dtype"] = ""
    with (folder / "figures.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerow(row)
    return folder


def test_the_default_set_is_the_fourth_one():
    """Set 1 was folded into the corpus, sets 2 and 3 seen: with no --set the scorer reads set 4."""
    mod = _module()
    assert Path(mod.parse_args([]).folder) == HOLDOUT4
    assert not (ROOT / "benchmarks" / "holdout" / "figures.csv").exists()


def test_a_set_parses_with_the_shared_columns(tmp_path):
    """A set in another folder reads through the same reader, one row per figure."""
    figs = _module().read_set(str(_tmp_set(tmp_path)))
    assert [f["id"] for f in figs] == ["x"] and figs[0]["tpot_ms"] == "9.5"


def test_a_set_may_state_each_figures_pcie_host_and_a_bad_one_is_refused(tmp_path):
    """A set with the host columns (set 4 on) passes them as the corpus' figures do; a value the
    corpus' figures cannot take is refused in one line before any composing."""
    mod = _module()
    folder = _tmp_set(tmp_path)
    rows = list(csv.DictReader((folder / "figures.csv").open()))
    for value, ok in (("one_shot_norm", True), ("sometimes", False)):
        with (folder / "figures.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=mod.COLUMNS + mod.HOST_COLUMNS)
            writer.writeheader()
            writer.writerow(rows[0] | {"topology": "switch_free", "pcie_allreduce": value})
        if not ok:
            with pytest.raises(ConfigError, match="pcie_allreduce='sometimes' is not one of"):
                mod.read_set(str(folder))
            continue
        (fig,) = mod.read_set(str(folder))
        got = mod.overrides(fig | {"moe_tp": ""}, [1])
        assert got[-2:] == [
            "deployment.topology=switch_free",
            "deployment.pcie_allreduce=one_shot_norm",
        ]


def test_the_second_set_parses_with_the_shared_columns():
    """Set 2 reads through the reader: the shared columns, a number for every TPOT and
    concurrency, speculative decoding off (or none stated)."""
    figs = _module().read_set(str(HOLDOUT2))
    assert len(figs) >= SET2_LEAST
    assert len({f["id"] for f in figs}) == len(figs)
    for f in figs:
        assert float(f["tpot_ms"]) > 0 and int(f["batch"]) >= 1
        assert f["speculative"].startswith("none")
        assert f["source_url"].startswith("https://")


def test_the_third_set_parses_with_the_shared_columns():
    """Set 3 reads through the same reader: one row per id, a number for every TPOT and
    concurrency, a source pinned to a commit; speculative decoding off (or none stated), or MTP
    where the note cites the pinned InferenceX *_mtp.sh launch that ran it (and only there)."""
    figs = _module().read_set(str(HOLDOUT3))
    assert len(figs) >= SET3_LEAST
    assert len({f["id"] for f in figs}) == len(figs)
    for f in figs:
        assert float(f["tpot_ms"]) > 0 and int(f["batch"]) >= 1
        mtp_cite = re.search(MTP_LAUNCH, f["note"])
        assert f["speculative"].startswith("mtp" if mtp_cite else "none"), f["id"]
        assert re.match(PINNED, f["source_url"]), f["id"]


def test_the_third_sets_uncomposable_rows_are_the_marked_ones():
    """holdout3 keeps the figures conf/ has no files for: exactly those its notes mark."""
    mod = _module()
    figs = mod.read_set(str(HOLDOUT3))
    flagged = {f["id"] for f in figs if mod.cannot_compose(f)}
    marked = {f["id"] for f in figs if "Cannot compose" in f["note"]}
    assert flagged == marked and len(flagged) == SET3_UNCOMPOSABLE


@pytest.mark.parametrize("later", [HOLDOUT3, HOLDOUT4])
def test_a_later_set_repeats_no_held_figure(later):
    """No set-3 (set-4) TPOT equals, to 0.01 ms, a corpus or earlier set's figure of its model x
    GPU x engine."""
    mod = _module()
    held = defaultdict(list)
    for fig in compose_settings([]).references.figures:
        held[fig.model, fig.hardware, fig.engine].append(float(fig.tpot_ms))
    for earlier in (HOLDOUT2, HOLDOUT3, HOLDOUT4)[: (HOLDOUT3, HOLDOUT4).index(later) + 1]:
        for f in mod.read_set(str(earlier)):
            held[f["model"], f["hardware"], f["engine"]].append(float(f["tpot_ms"]))
    for f in mod.read_set(str(later)):
        family = held[f["model"], f["hardware"], f["engine"]]
        assert all(abs(float(f["tpot_ms"]) - v) > 0.01 for v in family), f["id"]


def test_the_folded_first_set_composes_as_the_scorer_composed_it():
    """Set 1's 90 figures, now in the corpus, give the overrides check.py gave their rows (same
    model, GPU, formats, engine file, batch, load and layout; no prompt chunk it did not pass)."""
    mod = _module()
    folded = [f for f in compose_settings([]).references.figures if f.note.endswith(SET1)]
    assert len(folded) == 90
    for fig in folded:
        lay = fig.layout
        g = {"model": fig.model, "hardware": fig.hardware, "deployment": fig.deployment}
        g |= {"engine_config": fig.engine_name(), "input_len": fig.input_len}
        g |= {"output_len": fig.output_len, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep}
        g |= {"experts": lay.experts, "moe_tp": lay.moe_tp or "", "kv_dtype": fig.kv_dtype}
        g |= {"topology": fig.topology, "pcie_allreduce": fig.pcie_allreduce}
        assert mod.overrides(g, [fig.batch]) == fig.overrides(), fig.source


def test_a_speculative_figure_is_reported_not_composed():
    """A figure whose run decoded speculatively (MTP, EAGLE) is a labelled gap, not a score."""
    mod = _module()
    assert mod.speculative({"speculative": "none (the source says so)"}) == ""
    assert mod.speculative({"speculative": ""}) == ""
    why = mod.speculative({"speculative": "mtp (num_nextn_predict_layers 3)"})
    assert why == "not composed: speculative decoding ran (mtp (num_nextn_predict_layers 3))"


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
    figs = mod.read_set(str(HOLDOUT2))
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
        ("benchmarks/holdout/README.md", "README.md"),
    ],
)
def test_out_csv_refusals_still_hold_with_a_set(tmp_path, out, words):
    """OUT_CSV's refusals (a folder, a missing folder, a tracked file) hold with --set given."""
    run = _run("--set", str(_tmp_set(tmp_path)), out.format(tmp=tmp_path))
    assert run.returncode == 2
    assert words in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing").exists()
