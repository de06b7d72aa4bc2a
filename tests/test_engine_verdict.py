"""The verdict as an engine runs it: one bandwidth reference on both ends (no part above the
target's datasheet), an engine's kernel list and host time, the serving load, the attention mode
per architecture, the corpus of engine figures and `tilesweep verdict`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tilesweep import (
    deployment_fit,
    deployment_refusals,
    deployment_verdict,
    engine_figures,
    references,
)
from tilesweep.cli import main
from tilesweep.config import compose, compose_groups, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.io import PROJECT_ROOT
from tilesweep.plan import engine_profile, part_timers, row_inputs
from tilesweep.plan.launch_fit import on_datasheet
from tilesweep.settings.engine_spec import Host, KernelFloor

ROOT = Path(__file__).resolve().parents[1]
EMPTY = pd.DataFrame()
FIT = json.loads((ROOT / "docs/examples/h200/fit.json").read_text())


def verdict(overrides: list[str]) -> pd.DataFrame:
    """Return the verdict composed from the shipped fit, as a CPU machine composes it."""
    settings = compose_settings([*overrides, "references=none"])
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})


def test_the_fit_goes_on_the_datasheet_and_never_above_it():
    h200 = compose_settings(["references=none"]).catalog["h200"]
    fit, label = on_datasheet(FIT, h200)
    copy = FIT["ceilings"]["copy_gbs"]
    # e_bw 1.026 of the measured copy bandwidth (4,252 GB/s) is 0.909 of the datasheet's 4,800.
    raw = FIT["groups"]["expert_gemm"]["e_bw"]
    assert fit["groups"]["expert_gemm"]["e_bw"] == pytest.approx(raw * copy / 4800)
    every = [*fit["groups"].values(), fit["device-wide"]]
    assert max(g["e_bw"] for g in every) <= 1.0 and max(g["e_math"] for g in every) <= 1.0
    assert FIT["groups"]["embedding"]["e_bw"] > 1  # a cached part measured above the copy rate
    assert "fractions of the datasheet on both ends" in label


@pytest.mark.slow  # composes every GPU with three models
def test_no_part_of_a_verdict_runs_above_its_targets_datasheet():
    composed = 0
    catalog = compose(["references=none"])["catalog"]
    for hardware in catalog:
        for model, deployment in [("glm5", "fp8_all"), ("deepseek_v3", "fp8_all"),
                                  ("gpt_oss_120b", "mxfp4_experts")]:  # fmt: skip
            table = verdict([f"hardware={hardware}", f"model={model}",
                             f"deployment={deployment}", "grid.tiles=[{m:16,n:16,k:16}]",
                             "deployment.input_len=1024",
                             "deployment.output_len=1024"])  # fmt: skip
            done = table[table["tpot_ms"].notna()]
            composed += len(done)
            assert (done["peak_part_of_datasheet"] <= 1 + 1e-9).all(), (hardware, model)
            assert (done["tpot_ms"] >= done["floor_ms"]).all(), (hardware, model)
            # A row with no time says why: it does not fit, or a figure is missing.
            rest = table[table["tpot_ms"].isna()]
            assert ((rest["fits_memory"] == "no") | rest["bound"].str.startswith("gap")).all()
    assert composed > 100


def test_the_kept_tables_have_no_part_above_the_datasheet():
    for path in [ROOT / "docs/examples/h200/verdict.csv"]:
        table = pd.read_csv(path)
        assert "peak_part_of_datasheet" in table, f"{path}: re-render the example"
        done = table[table["tpot_ms"].notna()]
        assert (done["peak_part_of_datasheet"] <= 1 + 1e-9).all()


def test_an_engines_kernel_list_replaces_the_lean_steps_count():
    model = compose_settings(["model=deepseek_v3", "references=none"]).model
    lean = engine_profile.profile(compose_settings(["engine=lean"]).engine, model)
    assert lean.launches is None and lean.host_ms == 0
    for name in ("sglang", "vllm", "tensorrtllm"):
        engine = compose_settings([f"engine={name}", "references=none"]).engine
        fp8 = engine_profile.profile(engine, model, "fp8")
        bf16 = engine_profile.profile(engine, model, "bf16")
        assert fp8.launches and "engine-faithful kernel count" in fp8.label
        assert engine_profile.family(model) in engine.families
        # activation quantisation runs only for quantised weights
        assert sum(fp8.extra.values()) > sum(bf16.extra.values())
        for family in engine.families.values():
            for where in ("per_layer", "per_moe_layer", "per_dense_layer", "per_step"):
                assert all(k.cite for k in getattr(family, where))
    # An engine whose code was not read (no families): the lean step's count, labelled.
    unread = {"name": "other", "version": "x", "families": {}}
    unread = compose_settings(["engine=sglang"]).engine.model_copy(update=unread)
    unread = engine_profile.profile(unread, model)
    assert unread.launches is None and "no kernel list read for other" in unread.label


def test_fit_batches_that_nothing_fits_at_are_refused_or_named(capsys):
    """`tilesweep verdict` times no step: deployment.fit_batches is refused in one line there;
    a sweep that composes from the shipped fit says the batches were not applied."""
    settings = compose_settings(["deployment.fit_batches=[1,64]", "references=none"])
    assert "tilesweep verdict times no step" in deployment_refusals.unused_fit_batches(settings)
    assert deployment_refusals.unused_fit_batches(compose_settings([])) is None
    empty = pd.DataFrame()
    _, _, label = deployment_fit.verdict_fit(settings, empty, {}, {})
    assert "deployment.fit_batches=[1, 64] not applied" in label
    assert main(["verdict", "--no-engines", "deployment.fit_batches=[1,64]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "composes from the shipped fit" in err, err


def test_an_attention_table_the_verdict_command_cannot_use_is_refused_naming_its_device(capsys):
    """C311: `tilesweep verdict` measures nothing, so an attention table (read only on the
    device that measured it) would go unused: refused in one line naming the table's device."""
    table = "docs/examples/h200/mla_tune/mla_tune.csv"
    settings = compose_settings([f"deployment.attention_table={table}", "hardware=rtx_pro_6000"])
    why = deployment_refusals.unused_attention_table(settings)
    assert "measured on NVIDIA H200" in why and "hardware=rtx_pro_6000" in why
    assert deployment_refusals.unused_attention_table(compose_settings([])) is None
    args = ["verdict", "--no-engines", f"deployment.attention_table={table}"]
    assert main([*args, "hardware=rtx_pro_6000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "would go unused" in err


def test_a_family_whose_moe_layers_launch_no_expert_gemm_is_refused():
    """T13 (issue 50, round five): tensorrtllm's gqa_moe per_moe_layer emptied composed a step
    with no expert kernels counted; an MoE family must list its expert GEMMs."""
    from tilesweep.config import validate

    settings = compose(["engine=tensorrtllm", "model=qwen3_235b_a22b", "references=none"])
    settings["engine"]["families"]["gqa_moe"]["per_moe_layer"] = []
    with pytest.raises(ConfigError, match="gqa_moe.per_moe_layer=.*lists no expert_gemm kernel"):
        validate(settings)


def test_every_engine_has_a_gqa_moe_list_whose_quantisation_follows_the_weights():
    model = compose_settings(["model=qwen3_235b_a22b", "references=none"]).model
    assert engine_profile.family(model) == "gqa_moe"
    for name in ("sglang", "vllm", "tensorrtllm"):
        engine = compose_settings([f"engine={name}", "references=none"]).engine
        fp8 = engine_profile.profile(engine, model, "fp8")
        bf16 = engine_profile.profile(engine, model, "bf16")
        assert "engine-faithful kernel count" in fp8.label, name
        assert sum(fp8.extra.values()) > sum(bf16.extra.values()), name
        assert fp8.launches["attention_gqa"] > 0 and fp8.launches["expert_gemm"] >= 4, name
    # TensorRT-LLM's bf16 MoE runs its gated activation as a kernel of its own; under fp8 block
    # scales the runner quantises each GEMM's input around it (3 kernels in place of 1).
    engine = compose_settings(["engine=tensorrtllm", "references=none"]).engine
    moe = engine.families["gqa_moe"].per_moe_layer
    assert [k.count for k in moe if k.only_for == ["fp8"]] == [3]
    assert [k.count for k in moe if k.only_for == ["bf16"]] == [1]


def test_the_engine_adds_its_kernels_and_host_time():
    base = ["hardware=h200", "model=deepseek_v3", "deployment=fp8_all", "deployment.batches=[1]",
            "grid.layouts=[{tp:8,pp:1,ep:1}]"]  # fmt: skip
    lean = verdict([*base, "engine=lean"]).iloc[0]
    sglang = verdict([*base, "engine=sglang"]).iloc[0]
    assert lean["host_ms"] == 0 and lean["engine"] == "lean"
    assert sglang["host_ms"] == compose(["engine=sglang"])["engine"]["host"]["ms"]
    # One host rule: no engine adds host time by default; a cited or measured figure set in
    # the engine file is what a row carries.
    assert compose(["engine=vllm"])["engine"]["host"]["ms"] == 0.0
    vllm = verdict([*base, "engine=vllm", "engine.host.ms=0.4", "engine.host.source=cited"])
    assert vllm.iloc[0]["host_ms"] == 0.4 and "0.4 ms per step (cited" in vllm.iloc[0]["host_rule"]
    assert "all-reduce: sglang's all-reduce on sm_90 by message size" in row_inputs.row_words(
        sglang
    )
    assert "all-reduce: NCCL" in row_inputs.row_words(lean)
    # The engine's own count, not the project's: more kernels a layer than the lean step's,
    # its small ones at a small kernel's cost.
    settings = compose_settings(["model=deepseek_v3", "engine=sglang"])
    # on the row's H200 (sm_90): the MoE lists are per architecture (only_arch)
    prof = engine_profile.profile(settings.engine, settings.model, "fp8", "sm_90")
    per_moe_layer = (
        sum(v for k, v in prof.launches.items() if k not in ("dense_gemm", "embedding", "lm_head"))
        + prof.extra["per_layer"] + prof.extra["per_moe_layer"]
    )  # fmt: skip
    lean_moe_layer = sum(
        g["launches_per_occurrence"] for g in FIT["groups"].values()
        if set(g["kinds"]) & {"norm", "attention_proj", "attention", "router", "expert_gemm",
                              "shared_gemm"}
    )  # fmt: skip
    assert per_moe_layer > lean_moe_layer
    assert sglang["other_ms"] != lean["other_ms"]
    assert "kernel list: engine-faithful kernel count (sglang" in row_inputs.row_words(sglang)
    assert sglang["tpot_ms"] == pytest.approx(
        sglang[["memory_ms", "math_ms", "comm_ms", "other_ms", "host_ms"]].sum()
    )


def test_a_serving_load_adds_the_other_requests_prompts_and_sets_the_context():
    base = ["hardware=h200", "model=deepseek_v3", "deployment=fp8_all",
            "deployment.batches=[1,16]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]  # fmt: skip
    loaded = verdict([*base, "deployment.input_len=1024", "deployment.output_len=1024"])
    assert set(loaded["context_len"]) == {1024 + 512}
    one, sixteen = loaded.iloc[0], loaded.iloc[1]
    assert one["prefill_ms"] == 0  # its own prompt is its time to first token, not its TPOT
    assert sixteen["prefill_ms"] > 0
    assert "load: serving, 1024 in / 1024 out" in row_inputs.row_words(sixteen)
    decode = verdict([*base, "deployment.context_len=1536"])
    assert (decode["prefill_ms"] == 0).all()
    assert row_inputs.column_words(decode).str.contains("load: decode only").all()
    assert sixteen["tpot_ms"] > decode.iloc[1]["tpot_ms"]


def test_attention_follows_the_engine_on_the_targets_architecture():
    engine = compose_settings(["engine=sglang"]).engine
    by_arch = engine.attention_by_arch
    for arch, mode in by_arch.items():
        if arch != "default":
            assert engine_profile.attention_mode(engine, arch)[0] == mode
    row = verdict(["hardware=rtx_pro_6000", "engine=sglang", "deployment.batches=[1]"]).iloc[0]
    want = by_arch.get("sm_120", by_arch.get("default", "dsa"))
    assert f"attention: {want} (" in row_inputs.row_words(row)
    pinned = verdict(["deployment.attention=dsa", "deployment.batches=[1]"]).iloc[0]
    assert "attention: dsa (deployment.attention)" in row_inputs.row_words(pinned)


def test_the_band_spans_the_other_attention_the_engines_builds_run_there():
    base = ["hardware=rtx_pro_6000", "engine=sglang", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    base += ["deployment.batches=[1,8]", "deployment.context_len=1024"]
    also = compose_settings(["engine=sglang"]).engine.attention_band_by_arch["sm_120"]
    spanned = verdict(base)
    dsa = verdict([*base, "deployment.attention=dsa"])
    dense = verdict([*base, f"deployment.attention={also.mode}"])
    assert (spanned["tpot_ms"] == dsa["tpot_ms"]).all()  # the point is the code's own mode
    for end, pick in (("tpot_low_ms", min), ("tpot_high_ms", max)):
        for i in range(len(spanned)):
            ends = [dsa.at[i, end], dense.at[i, end], dense.at[i, "tpot_ms"]]
            assert spanned.at[i, end] == pytest.approx(pick([spanned.at[i, end], *ends]))
    # dense at one sequence drops the indexer's kernels and bf16 weights: the band's low end
    assert spanned.at[0, "tpot_low_ms"] < dsa.at[0, "tpot_low_ms"]
    assert f"also span {also.mode} (" in row_inputs.row_words(spanned.iloc[0])
    assert f"also span {also.mode} (" not in row_inputs.row_words(dsa.iloc[0])


def test_sglang_before_its_indexer_fusion_launches_the_split_indexer_on_every_dsa_layer():
    glm5 = compose_settings(["model=glm5", "references=none"]).model
    deepseek = compose_settings(["model=deepseek_v3", "references=none"]).model
    fused, split = (
        compose_settings([f"engine={name}", "references=none"]).engine
        for name in ("sglang", "sglang_dsa_unfused")
    )
    assert split.families["mla_moe"] == fused.families["mla_moe"]  # DeepSeek-V3: no indexer
    one = {e.name: engine_profile.profile(e, glm5, "fp8", "sm_90") for e in (fused, split)}
    a, b = one["sglang"], one["sglang_dsa_unfused"]
    assert b.launches["indexer"] == a.launches["indexer"] + 1  # wk and weights_proj unfused
    assert b.extra["per_layer"] - a.extra["per_layer"] == 11  # 13 small kernels for 2 fused
    assert (
        engine_profile.profile(split, deepseek, "fp8").extra
        == engine_profile.profile(fused, deepseek, "fp8").extra
    )
    lay = "grid.layouts=[{tp:8,pp:1,ep:1}]"
    common = ["model=glm5", "hardware=h200", "deployment=fp8_all", lay, "deployment.batches=[4]"]
    step = {n: verdict([*common, f"engine={n}"]).at[0, "tpot_ms"] for n in ("sglang", split.name)}
    assert step[split.name] > step["sglang"] + 1.0  # 12 more launches a layer, 936 a step


def test_the_corpus_is_wide_enough_and_every_figure_composes_or_says_why(corpus_engines):
    figures = compose_settings([]).references.figures
    assert len(figures) >= 30
    assert len({f.hardware for f in figures}) >= 3
    assert len({f.model for f in figures}) >= 2
    assert len({f.engine for f in figures}) >= 2
    assert all(f.source and (f.input_len or f.context_len) for f in figures)
    engines = corpus_engines
    assert len(engines) == len(figures)
    missing = engines[engines["composed_tpot_ms"].isna()]
    assert (missing["gap"].str.len() > 0).all()  # a labelled gap, never a silent NaN
    got = references.corpus_summary(engines)
    assert got["composed"] + got["gaps"] == got["test_rows"]


# With the engine check the command composes every cited figure (the whole corpus): slow. The
# fast tier runs the same command with --no-engines.
@pytest.mark.parametrize("engines", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_tilesweep_verdict_writes_tp8_rows_in_seconds(tmp_path, capsys, engines):
    start = time.perf_counter()
    rc = main(["verdict", "hardware=h200", "model=deepseek_v3", "deployment=fp8_all",
               "deployment.batches=[4,8,16,32,64]", "deployment.input_len=1024",
               "deployment.output_len=1024", "--out", str(tmp_path / "v"),
               *([] if engines else ["--no-engines"])])  # fmt: skip
    took = time.perf_counter() - start
    assert rc == 0, capsys.readouterr().err
    table = pd.read_csv(tmp_path / "v/verdict.csv")
    tp8 = table[table["layout"] == "tp8-pp1-ep1"]
    assert sorted(tp8["batch"]) == [4, 8, 16, 32, 64] and tp8["tpot_ms"].notna().all()
    assert (tmp_path / "v/engines.csv").is_file() == engines
    print(f"tilesweep verdict took {took:.1f} s")  # the target (under a minute) is a benchmark


def test_tilesweep_verdict_refuses_bad_input_in_one_line(tmp_path, capsys, monkeypatch):
    """Each as `tilesweep verdict` runs from the checkout, in this process (main): an exception
    other than its refusal would end the test here as it would print a traceback there."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "taken" / "verdict.csv").mkdir(parents=True)
    (tmp_path / "taken" / "verdict.csv" / "kept").write_text("mine")
    kept = PROJECT_ROOT / "docs/examples/h200/verdict.csv"
    before = kept.read_bytes()
    cases = [
        (["verdict", "hardware=h300", "--out", str(tmp_path / "v")], "unknown"),
        (["verdict", "--out", str(tmp_path / "file")], "a file, not a folder"),
        (["verdict", "--out", ""], "empty"),
        (["verdict", "--out", str(tmp_path / "taken")], "is a folder, where a file goes"),
        (["verdict", "--out", "docs/examples/h200"], "--force"),
        (["verdict", "--out", "/proc/self"], "cannot write there"),
    ]
    monkeypatch.chdir(PROJECT_ROOT)
    for argv, why in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("tilesweep: ") and err.count("\n") == 1, err
        assert why in err, err
    assert (tmp_path / "taken" / "verdict.csv" / "kept").read_text() == "mine"
    assert kept.read_bytes() == before


def test_force_writes_only_into_a_kept_example_never_the_project_source(capsys):
    """N008: --force is for the kept examples only: --force --out conf/hardware (or src, tests,
    workflow, tools, docs/examples itself) is refused in one line and writes nothing."""
    from tilesweep.io import check_out_file, check_out_folder

    before = sorted(p.name for p in (PROJECT_ROOT / "conf/hardware").iterdir())
    for where in ("conf/hardware", "src", "tests", "workflow", "tools", "docs/examples"):
        assert main(["verdict", "--no-engines", "--force", "--out", where]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a kept example" in err, where
        with pytest.raises(ConfigError, match="--force writes only under docs/examples"):
            check_out_file(f"{where}/x.csv", force=True)
    assert sorted(p.name for p in (PROJECT_ROOT / "conf/hardware").iterdir()) == before
    assert check_out_folder("docs/examples/h200", force=True) == Path("docs/examples/h200")


def test_the_verdict_composes_a_model_the_sweep_tiles_do_not_divide(capsys):
    """gpt_oss_120b's hidden=2880 is no multiple of the default tiles' k=128: the sweep refuses
    it (it would time those tiles), the verdict (which times no tile) composes it."""
    with pytest.raises(ConfigError, match=r"grid.tiles\[0\].k=128: does not divide model.hidden"):
        compose_settings(["model=gpt_oss_120b"])
    assert main(["verdict", "--no-engines", "model=gpt_oss_120b", "deployment.batches=[1]"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The answer: gpt_oss_120b on ") and "TPOT" in out
    # A tile the user names is still checked.
    assert (
        main(["verdict", "--no-engines", "model=gpt_oss_120b", "grid.tiles=[{m:16,n:16,k:128}]"])
        == 2
    )
    assert "does not divide model.hidden=2880" in capsys.readouterr().err


def test_tilesweep_verdict_prints_the_card_and_writes_nothing_without_out(tmp_path, capsys):
    rc = main(["verdict", "--no-engines", "deployment.batches=[1,8]", "question.tpot_target_ms=30"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("The answer: ") and "TPOT <= 30 ms" in out and "Rests on: " in out
    assert "Wrote" not in out


def test_import_engine_tables_takes_a_good_archive_and_refuses_a_climbing_one(tmp_path):
    """The kept tables as a device call brings them back import whole (a check in a pipe once
    refused every archive under pipefail); a member path with '..' is refused in one line."""
    import shutil
    import tarfile

    root = tmp_path / "root"
    (root / "tools").mkdir(parents=True)
    (root / "docs" / "examples" / "h200").mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "tools/import_engine_tables.sh", root / "tools")
    (root / "src").symlink_to(PROJECT_ROOT / "src")
    (root / ".venv").symlink_to(Path(sys.executable).parents[1])
    kept = PROJECT_ROOT / "docs/examples/h200/engine_tables"
    for name, extra in (("good", None), ("climb", "tables/../../escape.csv")):
        folder = tmp_path / name
        folder.mkdir()
        with tarfile.open(folder / "engine_tables.tgz", "w:gz") as tar:
            tar.add(kept / "dropins.csv", "tables/dropins.csv")
            tar.add(kept / "checks", "tables/checks")
            if extra:
                tar.add(kept / "dropins.csv", extra)
        (folder / "tables.log").write_text("log\n")
        (folder / "gpus.csv").write_text("name\nNVIDIA H200\n")
    script = root / "tools/import_engine_tables.sh"
    done = subprocess.run(["bash", str(script), str(tmp_path / "climb")], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2 and "climbs out" in done.stderr, done.stderr
    done = subprocess.run(["bash", str(script), str(tmp_path / "good")], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = root / "docs/examples/h200/engine_tables"
    assert (got / "dropins.csv").is_file() and (got / "gpus.csv").is_file()
    assert sorted(p.name for p in (got / "checks").iterdir()) == sorted(
        p.name for p in (kept / "checks").iterdir()
    )


def test_import_engine_tables_refuses_a_bad_folder_before_touching_the_kept_tables(tmp_path):
    kept = PROJECT_ROOT / "docs/examples/h200/engine_tables"
    before = sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "engine_tables.tgz").write_bytes(b"not an archive")
    (tmp_path / "bad" / "tables.log").write_text("")
    script = PROJECT_ROOT / "tools/import_engine_tables.sh"
    for args in ([], ["/nonexistent"], [str(tmp_path / "empty")], [str(tmp_path / "bad")]):
        done = subprocess.run(
            ["bash", str(script), *args], capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == before
    assert not list(tmp_path.glob("docs")) and not list(kept.parent.glob(".engine_tables.*"))


def test_a_figure_composed_from_its_groups_settings_equals_its_own_compose():
    figures = compose_settings([]).references.figures
    first = figures[1]
    other = next(
        f for f in figures[2:]
        if (f.model, f.hardware, f.deployment, f.engine_name())
        == (first.model, first.hardware, first.deployment, first.engine_name())
        and (f.batch, f.input_len) != (first.batch, first.input_len)
    )  # fmt: skip
    shared = engine_figures.figure_settings(compose_settings(first.overrides()), other)
    own = compose_settings(other.overrides())
    for key in ("deployment", "grid", "model", "engine", "hardware"):
        assert shared.as_dict()[key] == own.as_dict()[key], key


@pytest.mark.slow
def test_a_figure_composed_from_its_group_files_equals_a_hydra_compose_of_its_groups():
    # One figure of each group (model x GPU x formats x engine): the group files read after one
    # Hydra compose give the settings a Hydra compose of the figure's own overrides gives.
    groups = {}
    for fig in compose_settings([]).references.figures:
        groups.setdefault(tuple(fig.groups().values()), fig)
    assert len(groups) >= 10
    for fig in groups.values():
        fast = engine_figures.figure_settings(
            compose_groups(fig.groups(), engine_figures.FIGURE_BASE), fig
        )
        own = compose_settings(fig.overrides())
        for key in ("deployment", "model", "engine", "hardware"):
            assert fast.as_dict()[key] == own.as_dict()[key], (fig.groups(), key)
        assert fast.grid.layouts == own.grid.layouts


def test_a_deployment_that_cannot_be_composed_is_refused_in_one_line_naming_the_fix():
    refused = {
        ("hardware=a100", "engine=tensorrtllm", "deployment=bf16"): "no attention kernel on sm_80",
        ("hardware=h200",): "use deployment=fp8_all",
        ("hardware=a100",): "use deployment=bf16",
    }
    for overrides, why in refused.items():
        line = deployment_refusals.refusal(compose_settings(list(overrides)))
        assert line and why in line and "\n" not in line, overrides
    # An engine file without the model's family (every engine in conf now has all three).
    settings = compose_settings(["engine=tensorrtllm"])
    families = {k: v for k, v in settings.engine.families.items() if k != "mla_dsa_moe"}
    bare = settings.model_copy(
        update={"engine": settings.engine.model_copy(update={"families": families})}
    )
    line = deployment_refusals.refusal(bare)
    assert "no kernel list for the mla_dsa_moe family" in line and "\n" not in line
    composes = [
        [],
        ["hardware=b200"],
        ["hardware=h200", "deployment=fp8_all"],
        ["engine=tensorrtllm"],
        ["model=glm5", "engine=tensorrtllm", "hardware=h200", "deployment=fp8_all"],
        ["model=deepseek_v3", "engine=tensorrtllm", "deployment=fp8_all"],
        ["model=qwen3_235b_a22b", "engine=tensorrtllm", "hardware=h200", "deployment=fp8_all"],
    ]
    for overrides in composes:
        assert deployment_refusals.refusal(compose_settings(overrides)) is None, overrides


@pytest.mark.slow  # a process of its own: imports the CLI and composes (the refusal above is fast)
def test_the_verdict_command_refuses_a_deployment_that_cannot_be_composed_in_one_line():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tilesweep.cli",
            "verdict",
            "engine=tensorrtllm",
            "hardware=a100",
            "deployment=bf16",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no attention kernel on sm_80" in done.stderr and "Traceback" not in done.stderr


def test_a_fitted_host_term_is_what_the_code_fits_on_its_train_rows_only(corpus_engines):
    engines = corpus_engines
    for name in ("sglang", "vllm", "tensorrtllm"):
        host = compose([f"engine={name}"])["engine"]["host"]
        label = {"sglang": "SGLang", "vllm": "vLLM", "tensorrtllm": "TensorRT-LLM"}[name]
        train = engines[(engines["engine"] == label) & (engines["role"] == "train")]
        if host["source"] == "fitted":
            assert not train.empty
            assert references.fit_host_ms(engines, label) == pytest.approx(host["ms"], abs=0.01)
        else:
            assert train.empty  # no fitted term: no row is kept out of the error
    got = references.corpus_summary(engines)
    assert got["train_rows"] == int((engines["role"] == "train").sum())


def test_the_kept_report_lists_every_drop_in_file_with_its_ratios():
    kept = ROOT / "docs/examples/h200"
    dropins = pd.read_csv(kept / "engine_tables/dropins.csv")
    report = (kept / "report.md").read_text()
    section = report.split("## Files to drop into vLLM and SGLang", 1)[1].split("\n## ", 1)[0]
    for path in dropins["path"]:
        assert path in section, path
    assert "worst_x_baseline" in section and "geomean_x_baseline_m_ge_1024" in section


def test_an_engine_kernel_no_figure_times_is_a_labelled_gap_and_runs_on_its_arch_only():
    """SGLang with b12x 0.6.0's MoE (conf/engine/sglang_b12x.yaml): below 128 routed pairs its
    rows are SGLang's; from 128 (16 GLM-5 sequences) the untimed dynamic kernel leaves a gap
    naming it; on a GPU its kernels do not run on, one line."""
    lay = "grid.layouts=[{tp:8,pp:1,ep:1}]"
    plain = verdict(["deployment.batches=[8,16]", lay])
    b12x = verdict(["engine=sglang_b12x", "deployment.batches=[8,16]", lay])
    assert b12x["tpot_ms"].iloc[0] == pytest.approx(plain["tpot_ms"].iloc[0])
    assert b12x["tpot_ms"].iloc[1] != b12x["tpot_ms"].iloc[1]  # NaN, not another kernel's time
    assert b12x["bound"].iloc[1].startswith("gap")
    gaps = row_inputs.of(b12x.iloc[1])["gaps"]
    assert "b12x 0.6.0's dynamic TP MoE kernel from 128 routed pairs" in gaps
    assert plain["tpot_ms"].iloc[1] > 0
    why = deployment_refusals.refusal(compose_settings(["engine=sglang_b12x", "hardware=h200"]))
    assert why and "runs on sm_120 only" in why and "\n" not in why


def test_an_early_2025_release_composes_with_its_own_list_host_and_archs():
    """vLLM 0.7.4.dev181 as dstack ran DeepSeek-R1 on H200 (conf/engine/vllm_0_7.yaml): V0's
    synchronous loop adds its cited host time, the unfused norms and absorbed projections launch
    more kernels than 0.34's list, and a model family or GPU the release's list lacks refuses in
    one line; SGLang 0.4.3.post2 (sglang_0_4) likewise has DeepSeek only."""
    base = ["hardware=h200", "deployment=fp8_all", "model=deepseek_v3"]
    base += ["deployment.batches=[8]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    today = verdict([*base, "engine=vllm"])
    then = verdict([*base, "engine=vllm_0_7"])
    assert then["host_ms"].iloc[0] == pytest.approx(4.0) and today["host_ms"].iloc[0] == 0.0
    assert then["tpot_ms"].iloc[0] - 4.0 > today["tpot_ms"].iloc[0]
    assert "vllm_0_7 0.7.4.dev181" in then["kernel_list"].iloc[0]
    for engine in ("vllm_0_7", "sglang_0_4"):
        why = deployment_refusals.refusal(
            compose_settings([f"engine={engine}", "hardware=h200", "deployment=fp8_all"])
        )
        assert why and "no kernel list for the mla_dsa_moe family" in why and "\n" not in why
        why = deployment_refusals.refusal(
            compose_settings([f"engine={engine}", "hardware=b200", "model=deepseek_v3"])
        )
        assert why and "runs on sm_80, sm_89, sm_90 only" in why and "\n" not in why


def test_an_eager_release_exposes_its_cpu_issue_beyond_the_gpu_step():
    """TensorRT-LLM's PyTorch backend at 9b931c0f (conf/engine/tensorrtllm_0_17.yaml) decodes
    without CUDA graphs: its CPU issues every kernel of the list (all-reduces included) at
    host.eager_launch_us, and only the part beyond the GPU step is exposed; an eager cost without
    its source is refused."""
    base = ["hardware=h200", "deployment=fp8_all", "model=deepseek_v3", "engine=tensorrtllm_0_17"]
    base += ["deployment.batches=[4,32]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    rows = verdict(base)
    settings = compose_settings(base)
    prof = engine_profile.profile(settings.engine, settings.model, "fp8", "sm_90")
    stage = {"dense": settings.model.dense_layers, "moe": settings.model.moe_layers}
    issue_ms = prof.issued(stage) * 6.31e-3
    assert 1500 < prof.issued(stage) < 4000 and prof.eager_launch_ms == pytest.approx(6.31e-3)
    gpu = rows["tpot_ms"] - rows["host_ms"]
    exposed = (issue_ms - gpu).clip(lower=0)
    assert rows["host_ms"].tolist() == pytest.approx(exposed.tolist())
    assert rows["host_ms"].iloc[0] > 0 and rows["host_ms"].iloc[1] < rows["host_ms"].iloc[0]
    assert prof.host_for(1e3, stage) == 0.0 and prof.host_for(0.0, stage) == pytest.approx(issue_ms)
    with pytest.raises(ValueError, match="eager_cite"):
        Host.model_validate({"ms": 0, "source": "none", "cite": "x", "eager_launch_us": 6.0})


def test_a_cited_kernel_floor_holds_each_layer_to_its_calls_least_times():
    """vLLM 0.7's block-FP8 GEMMs (conf/engine/vllm_0_7.yaml kernel_floors): a part of a floored
    kind takes at least the sum of its calls' cited least times a layer, a part already slower
    keeps its own time, and the step grows by no more than the floors' total."""
    base = ["hardware=h200", "deployment=fp8_all", "model=deepseek_v3", "engine=vllm_0_7"]
    base += ["deployment.batches=[4]", "grid.layouts=[{tp:8,pp:1,ep:1}]", "references=none"]
    settings = compose_settings(base)
    bare = settings.model_copy(
        update={"engine": settings.engine.model_copy(update={"kernel_floors": []})}
    )
    floored = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
    plain = deployment_verdict.deployment_table(bare, EMPTY, EMPTY, EMPTY, {})
    model = settings.model
    layers = {"attention_proj": model.dense_layers + model.moe_layers}
    layers |= {"shared_gemm": model.moe_layers, "dense_gemm": model.dense_layers}
    most = sum(layers[f.kind] * sum(f.calls_us) for f in settings.engine.kernel_floors) * 1e-3
    grew = floored["tpot_ms"].iloc[0] - plain["tpot_ms"].iloc[0]
    assert 0 < grew < most
    part = {"kind": "attention_proj", "bytes": 0.0, "flops": 0.0, "dtype": "bf16", "count": 1}
    fast = part_timers.floored_timer(part_timers.roofline_timer, "attention_proj", 0.05, "why")
    assert fast(part, settings.hardware)["memory_ms"] == pytest.approx(0.05)
    slow = dict(part, bytes=4.8e9)  # 1 ms at the H200's 4.8 TB/s: far above the floor
    assert fast(slow, settings.hardware)["memory_ms"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="calls_us"):
        KernelFloor.model_validate(
            {"kind": "attention_proj", "calls_us": [], "kernel": "k", "cite": "c"}
        )
    # The figures are of sm_90 kernels: on another architecture the part keeps its own time.
    kwargs = {"timer": part_timers.roofline_timer}
    deployment_verdict._engine_terms(settings.engine, "sm_89", 0, kwargs, {})
    assert kwargs["timer"] is part_timers.roofline_timer
    deployment_verdict._engine_terms(settings.engine, "sm_90", 0, kwargs, {})
    assert kwargs["timer"](part, settings.hardware)["memory_ms"] > 0


def test_an_engine_timed_on_a_gpu_takes_its_own_expert_curve_there_only():
    """engine.grouped_gemm_efficiency (a release's own MoE kernel timed on a GPU) takes the place
    of the hardware file's curve for that GPU and format, says so in the row, and moves the step;
    another GPU or format keeps the hardware's."""
    base = ["hardware=h200", "deployment=fp8_all", "model=deepseek_v3", "engine=vllm_0_7"]
    base += ["deployment.batches=[16]", "grid.layouts=[{tp:8,pp:1,ep:1}]", "references=none"]
    settings = compose_settings(base)
    hardware_curve = settings.hardware.grouped_gemm_efficiency["fp8"]
    slower = hardware_curve.model_copy(
        update={
            "points": [
                p.model_copy(update={"low": p.low / 2, "high": p.high / 2})
                for p in hardware_curve.points
            ]
        }  # fmt: skip
    )

    def table(curves: dict) -> pd.DataFrame:
        engine = settings.engine.model_copy(update={"grouped_gemm_efficiency": curves})
        own = settings.model_copy(update={"engine": engine})
        return deployment_verdict.deployment_table(own, EMPTY, EMPTY, EMPTY, {})

    plain = table({})
    mine = table({"h200": {"fp8": slower}})
    elsewhere = table({"b200": {"fp8": slower}, "h200": {"nvfp4": slower}})
    assert "engine[vllm_0_7].grouped_gemm_efficiency" in mine["expert_efficiency"].iloc[0]
    assert "hardware[h200].grouped_gemm_efficiency" in plain["expert_efficiency"].iloc[0]
    assert mine["tpot_ms"].iloc[0] > plain["tpot_ms"].iloc[0]
    assert elsewhere["tpot_ms"].iloc[0] == pytest.approx(plain["tpot_ms"].iloc[0])
