"""End to end: a tiny sweep runs for real, and only what a change touches reruns."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, snakemake

from tilesweep import rerun_keys
from tilesweep.plan import row_inputs
from tilesweep.report_paths import FIGURE_CATEGORIES

TINY = ["experiment=tiny"]
TILES = "grid.tiles=[{m:16,n:64,k:64},{m:128,n:256,k:128}]"


def planned_jobs(work, overrides) -> dict[str, int]:
    """Return {rule: count} of the jobs a dry run would execute."""
    out = snakemake(work, "-n", "--quiet", "rules", overrides=overrides).stdout
    jobs = {}
    for line in out.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


@pytest.mark.slow
def test_tiny_sweep_writes_all_five_outputs_with_real_numbers(tiny_sweep):
    results = tiny_sweep / "results"
    launch = pd.read_csv(results / "tables" / "launch.csv")
    assert set(launch["target"]) == {"rtx_pro_6000", "h200"}
    ok = launch[launch["status"] == "ok"]
    assert (ok["smem_bytes"] > 0).all() and (ok["regs"] > 0).all()
    assert launch["smem_model_bytes"].notna().all()
    decode = pd.read_csv(results / "tables" / "decode.csv")
    timed = decode[decode["status"] == "ok"]
    assert not timed.empty and (timed["time_ms"] > 0).all()
    assert set(timed["bound"]) <= {"memory", "math"}
    assert timed["device"].str.startswith("cpu").all()
    untimed = decode[decode["runner"].str.startswith("triton:")]
    assert (untimed["status"] == "unsupported").all()
    engines = decode[decode["runner"].str.startswith("engine:")]  # beside the project's kernels
    assert set(engines["runner"]) == {"engine:vllm", "engine:sglang"}
    assert (engines["status"] == "skipped").all() and engines["reason"].notna().all()
    collective = pd.read_csv(results / "tables" / "collective.csv")
    measured = collective[collective["status"] == "ok"]
    assert (measured[measured["collective"] == "all_reduce"]["backend"] == "gloo").all()
    # The verdict is for the deployment the config names (8 RTX PRO 6000 for the brief), not for
    # this CPU: composed from the model alone here, and GLM-5 fits neither TP1 nor TP2 of 96 GB.
    verdict = pd.read_csv(results / "tables" / "verdict.csv")
    assert set(verdict["hardware"]) == {"rtx_pro_6000"}
    # The layouts that fit are composed with the fit shipped from the kept H200 run, and say so.
    fitting = verdict[verdict["fits_memory"] == "yes"]
    assert set(fitting["source"]) <= {"composed"}
    assert (
        row_inputs.column_words(fitting)
        .str.contains("shipped as docs/examples/h200/fit.json")
        .all()
    )
    assert set(verdict[verdict["fits_memory"] == "no"]["source"]) <= {"model"}
    assert set(verdict["bound"]) <= {
        "memory",
        "math",
        "communication",
        "launch",
        "mixed",
        "kernel-limited",
        "does-not-fit",
    }
    unfit = verdict[verdict["fits_memory"] == "no"]
    assert not unfit.empty and unfit["tpot_ms"].isna().all()
    assert (unfit["bound"] == "does-not-fit").all()
    # The CPU's own whole steps appear only as the check of the method.
    check = pd.read_csv(results / "tables" / "check.csv")
    assert (check["measured_ms"].dropna() > 0).all() and check["device"].str.startswith("cpu").all()
    report = (results / "report.md").read_text()
    first = ("## The brief's question", "## Verdict for the deployment", "## Which kernels launch")
    for section in (*first, "## Decode", "## Collectives", "## Power as evidence"):
        assert section in report
    # The answer card first, the verdict at a glance, the brief's panel, then the machine.
    assert report.index("**The answer.**") < report.index("## The verdict at a glance")
    assert report.index("## The verdict at a glance") < report.index("## The brief's question")
    assert report.index("## The brief's question") < report.index("## The machine that ran")


# The four rules that join the results: each runs once when any measurement changed.
STAGE5 = {"tables": 1, "verdict": 1, "figures": 1, "report": 1}


@pytest.mark.slow
def test_nothing_changed_means_nothing_to_do(tiny_sweep):
    assert planned_jobs(tiny_sweep, TINY) == {}


@pytest.mark.slow
def test_changing_one_tile_reruns_only_that_tile(tiny_sweep, copy_of):
    work = copy_of(tiny_sweep)
    changed = TILES.replace("{m:16,n:64,k:64}", "{m:32,n:64,k:64}")
    jobs = planned_jobs(work, [*TINY, changed])
    # one build per architecture, one check per target, one benchmark, then the tables, the
    # verdict, the figures and the report
    assert jobs == {
        "build_kernel": 2,
        "check_launch": 2,
        "bench_decode": 1,
        **STAGE5,
        "all": 1,
    }


@pytest.mark.slow
def test_changing_one_batch_reruns_benchmarks_not_builds(tiny_sweep, copy_of):
    work = copy_of(tiny_sweep)
    jobs = planned_jobs(work, [*TINY, "grid.tokens_per_expert=[1,32]"])
    assert "build_kernel" not in jobs and "check_launch" not in jobs
    assert jobs["bench_decode"] == 4  # two Triton kernels and the baselines' two (bf16, fp8)
    assert jobs["bench_collective"] >= 1
    assert all(jobs[rule] == 1 for rule in STAGE5)


@pytest.mark.slow
def test_changing_one_layout_reruns_only_its_collectives(tiny_sweep, copy_of):
    work = copy_of(tiny_sweep)
    jobs = planned_jobs(work, [*TINY, "grid.layouts=[{tp:1,pp:1,ep:1},{tp:1,pp:1,ep:2}]"])
    assert "build_kernel" not in jobs and "bench_decode" not in jobs
    assert jobs.get("bench_collective") == 1
    assert all(jobs[rule] == 1 for rule in STAGE5)


@pytest.mark.slow
def test_a_new_triton_version_rebuilds_kernels(tiny_sweep, copy_of):
    work = copy_of(tiny_sweep)
    from importlib.metadata import version

    installed = version("triton")
    meta = work / ".snakemake" / "metadata"
    rewritten = 0
    for path in meta.iterdir():
        target = base64.b64decode(path.name.replace("@", "/")).decode()
        if "/build/triton/" in target:
            record = json.loads(path.read_text())
            params = record["params"]
            # the build's toolchain param reads 'triton <version>'
            old, new = f"triton {installed}", "triton 0.0.1-older"
            if isinstance(params, list):
                record["params"] = [p.replace(old, new) for p in params]
            else:
                record["params"] = params.replace(old, new)
            path.write_text(json.dumps(record))
            rewritten += 1
    assert rewritten == 4
    jobs = planned_jobs(work, TINY)
    assert jobs["build_kernel"] == 4
    assert jobs["check_launch"] == 4


def test_code_hash_follows_content_not_mtime(tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("x = 1\n")
    monkeypatch.setattr(rerun_keys, "PACKAGE_DIR", tmp_path)
    before = rerun_keys.code_hash("mod.py")
    (tmp_path / "mod.py").touch()
    assert rerun_keys.code_hash("mod.py") == before
    (tmp_path / "mod.py").write_text("x = 2\n")
    assert rerun_keys.code_hash("mod.py") != before


@pytest.mark.slow
def test_bad_override_stops_before_any_job(tmp_path):
    proc = snakemake(tmp_path, "--cores", "1", overrides=["grid.targets=[h300]"], check=False)
    assert proc.returncode != 0
    assert "grid.targets[0]='h300': unknown hardware; valid:" in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


def test_code_hash_follows_imports(tmp_path, monkeypatch):
    pkg = tmp_path
    (pkg / "steps").mkdir()
    (pkg / "steps" / "a.py").write_text("from tilesweep import helper\n")
    (pkg / "helper.py").write_text("from tilesweep.deep import thing\n")
    (pkg / "deep.py").write_text("thing = 1\n")
    monkeypatch.setattr(rerun_keys, "PACKAGE_DIR", pkg)
    before = rerun_keys.code_hash("steps/a.py")
    (pkg / "deep.py").write_text("thing = 2\n")
    assert rerun_keys.code_hash("steps/a.py") != before


@pytest.mark.slow
def test_cpu_benchmarks_never_overlap_another_job(tiny_sweep):
    """Builds run side by side, but a CPU benchmark holds every core: nothing perturbs it."""
    results = tiny_sweep / "results"
    benches = []
    for path in (results / "decode").glob("*.csv"):
        frame = pd.read_csv(path)
        benches.append((frame["job_start_utc"].iloc[0], frame["job_end_utc"].iloc[0], path.name))
    builds = []
    for path in (results / "build" / "triton").rglob("build.json"):
        record = json.loads(path.read_text())
        builds.append((record["job_start_utc"], record["job_end_utc"], path.parent.name))
    assert benches and builds
    for start, end, name in benches:
        for b_start, b_end, build in builds:
            assert b_end <= start or b_start >= end, f"{build} ran during the {name} benchmark"
        for o_start, o_end, other in benches:
            if other != name:
                assert o_end <= start or o_start >= end, f"{other} overlapped {name}"


@pytest.mark.slow
def test_a_kept_example_is_re_rendered_by_snakemake_alone(tmp_path):
    """`--config example=FOLDER` runs only the tuning replay, verdict, figure and report rules,
    on the folder's own measured tables and journals and with its own overrides; nothing is
    measured, and a deleted tune table and the project kernel's picks come back byte for byte
    (under project_kernel/, with their README, never in an engine's layout)."""
    import filecmp
    import shutil

    from tilesweep.fused_moe.backend import PROJECT_KERNEL

    source = ROOT / "docs" / "examples" / "h200"
    kept = tmp_path / "h200"
    shutil.copytree(source, kept)
    (kept / "report.md").unlink()
    (kept / "tune_work" / "tune_bf16.csv").unlink()
    shutil.rmtree(kept / "tune_work" / PROJECT_KERNEL / "bf16")
    plan = snakemake(tmp_path, "-n", "--forceall", "--config", f"example={kept}")
    rules = ("tune_replay", "verdict", "figures", "report")
    assert {rule for rule in rules if f"rule {rule}:" in plan.stdout} == set(rules)
    assert "bench_" not in plan.stdout and "rule tables:" not in plan.stdout
    snakemake(tmp_path, "--cores", "2", "--config", f"example={kept}")
    table = Path("tune_work", "tune_bf16.csv")
    assert filecmp.cmp(kept / table, source / table, shallow=False)
    configs = Path("tune_work", PROJECT_KERNEL, "bf16")
    made = sorted(p.name for p in (kept / configs).glob("[!.]*"))  # not Snakemake's timestamp
    assert made == sorted(p.name for p in (source / configs).glob("[!.]*"))
    for name in made:
        assert filecmp.cmp(kept / configs / name, source / configs / name, shallow=False)
    text = (kept / "report.md").read_text()
    assert "re-rendered from the GPU run's tables" in text
    assert sorted(p.stem for p in (kept / "plots").glob("*.png")) == sorted(FIGURE_CATEGORIES)


def test_no_fraction_stands_on_a_ceiling_below_what_the_device_measured(tiny_sweep):
    """A decode row's rate above its measured ceiling (here the CPU) gets no fraction and says
    why; every fraction shown is of a ceiling at or above the rate measured beside it."""
    from tilesweep.stages.decode import ABOVE_CEILING

    decode = pd.read_csv(tiny_sweep / "results" / "tables" / "decode.csv")
    ok = decode[decode["status"] == "ok"]
    assert len(ok)
    for rate, ceiling, frac in (("tflops", "ceiling_matmul_tflops", "frac_matmul_peak"),
                                ("gbs", "ceiling_copy_gbs", "frac_copy_bw")):  # fmt: skip
        shown = ok[ok[frac].notna()]
        assert (shown[rate] <= shown[ceiling] * ABOVE_CEILING).all(), rate
        above = ok[ok[rate] > ok[ceiling] * ABOVE_CEILING]
        assert above[frac].isna().all()
        # (astype: with no row above its ceiling the empty column is float, not text)
        assert above["roofline_gap"].astype(str).str.contains("above the measured").all()


def test_the_report_refuses_a_damaged_kept_table_naming_it(tmp_path):
    """R01-R08 (issue 50, round five): a kept example's table (no .sum record, only parsed)
    with no verdict row, without a column the report reads, or with text where a number goes,
    and a question panel that is not JSON, are refused naming the file; the report once said
    'no layout fits' of an empty verdict and drew a batch 'abc'."""
    from tilesweep.errors import CellError
    from tilesweep.stages.report import _tables
    from tilesweep.stages.verdict import read_panel

    kept = ROOT / "docs" / "examples" / "h200"
    verdict, decode, engines = (tmp_path / f"{n}.csv" for n in ("verdict", "decode", "engines"))
    verdict.write_text((kept / "verdict.csv").read_text().splitlines()[0] + "\n")
    pd.read_csv(kept / "decode.csv").drop(columns=["time_ms"]).to_csv(decode, index=False)
    pd.read_csv(kept / "engines.csv").assign(batch="abc").to_csv(engines, index=False)
    for name, path, says in (
        ("verdict", verdict, "no rows (a verdict has one per layout and batch)"),
        ("decode", decode, "no time_ms column"),
        ("engines", engines, "batch='abc' is not a number"),
    ):
        with pytest.raises(CellError, match=re.escape(f"{path}: {says}")):
            _tables({name: [str(path)]}, (name,))
    good = _tables({"verdict": [str(kept / "verdict.csv")]}, ("verdict",))
    assert len(good["verdict"]) == len(pd.read_csv(kept / "verdict.csv"))
    pd.read_csv(kept / "verdict.csv").assign(tpot_ms=float("inf")).to_csv(verdict, index=False)
    with pytest.raises(CellError, match="tpot_ms=.?inf.? is not a finite number of at least 0"):
        _tables({"verdict": [str(verdict)]}, ("verdict",))
    (tmp_path / "check.csv").mkdir()
    with pytest.raises(CellError, match="check.csv: not a readable table .a folder, not a table"):
        _tables({"check": [str(tmp_path / "check.csv")]}, ("check",))
    panel = tmp_path / "question.json"
    panel.write_text("{not json")
    with pytest.raises(CellError, match="question.json: not readable JSON"):
        read_panel(str(panel))
