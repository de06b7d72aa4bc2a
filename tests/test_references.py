"""Engines' own published figures (conf/references): validated before any job, and set beside
the verdict composed for the same model, layout, batch and context on the engine's GPUs."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT, fast_sample

from tilesweep import deployment_verdict, engine_figures, references
from tilesweep.columns import ENGINE_COLUMNS
from tilesweep.config import compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.report.headlines import engine_line

CPU_HERE = {"device": "cpu (x86_64, 2 threads)", "device_kind": "cpu", "copy_gbs": 12.0,
            "matmul_tflops": {"bf16": 0.3}}  # fmt: skip
ONE = {
    "engine": "SGLang",
    "version": "1",
    "model": "deepseek_v3",
    "hardware": "h200",
    "deployment": "fp8_all",
    "layout": {"tp": 8, "pp": 1, "ep": 1},
    "batch": 8,
    "context_len": 1536,
    "speculative": "none",
    "tpot_ms": 12.8,
    "source": "a test",
}


def _with(**change) -> list[str]:
    """Return overrides citing one figure, ONE with `change` applied."""
    fig = {**ONE, **change}
    lay = fig["layout"]
    layout = ",".join(f"{k}:{v}" for k, v in lay.items())
    body = ",".join(
        f"{k}:{{{layout}}}" if k == "layout" else f"{k}:{v!r}".replace("'", '"')
        for k, v in fig.items()
    )
    return ["references=none", f"references.figures=[{{{body}}}]"]


def test_the_published_figures_validate_and_name_their_sources():
    figures = compose_settings([]).references.figures
    assert figures, "conf/references/published.yaml cites at least one figure"
    assert all(f.source and f.tpot_ms > 0 for f in figures)
    assert compose_settings(["references=none"]).references.figures == []


@pytest.mark.parametrize(
    ("change", "message"),
    fast_sample(
        [
            ({"model": "gpt5"}, "references.figures[0].model='gpt5': unknown model; valid:"),
            ({"hardware": "h300"}, "references.figures[0].hardware='h300': unknown hardware"),
            ({"deployment": "int4"}, "references.figures[0].deployment='int4': unknown deployment"),
            ({"tpot_ms": -1.0}, "references.figures[0].tpot_ms=-1.0"),
            ({"batch": 0}, "references.figures[0].batch=0"),
            ({"engine": "Nosuch"}, "references.figures[0].engine='nosuch': unknown engine; valid:"),
            ({"context_len": 0}, "references.figures[0]: give input_len and output_len"),
            ({"role": "both"}, "references.figures[0].role='both'"),
        ]
    ),
)
def test_a_bad_figure_is_one_line_before_any_job(change, message):
    with pytest.raises(ConfigError) as err:
        compose(_with(**change))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unknown_key_is_refused():
    with pytest.raises(ConfigError, match=r"references\.figures\[0\]\.gpus: unknown key"):
        compose(_with(gpus=8))


def test_each_figure_is_composed_on_its_own_gpus_with_the_verdicts_fit():
    settings = compose_settings(_with())
    table = engine_figures.engine_table(
        settings, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    )
    assert list(table.columns) == ENGINE_COLUMNS and len(table) == 1
    row = table.iloc[0]
    # Composed as the verdict composes that deployment: the same figure from deployment_table.
    alone = compose_settings(settings.references.figures[0].overrides())
    direct = deployment_verdict.deployment_table(
        alone, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    ).iloc[0]
    assert (row.model, row.hardware, row.layout, row.batch) == ("deepseek_v3", "h200",
                                                                "tp8-pp1-ep1", 8)  # fmt: skip
    assert row.composed_tpot_ms == pytest.approx(direct.tpot_ms)
    assert row.composed_over_engine == pytest.approx(direct.tpot_ms / 12.8)
    assert row.engine_over_floor == pytest.approx(12.8 / direct.floor_ms)
    assert row.composed_source == "composed"  # the shipped H200 fit, not the bare roofline
    # The sweep's own deployment is untouched: GLM-5 on the RTX PRO 6000 stays the verdict's.
    assert settings.model.name == "glm5"


def test_no_figures_no_rows_and_no_line():
    table = engine_figures.engine_table(
        compose_settings(["references=none"]),
        pd.DataFrame(),
        pd.DataFrame(),
        pd.DataFrame(),
        CPU_HERE,
    )
    assert table.empty and list(table.columns) == ENGINE_COLUMNS
    assert engine_line(table) == ""


def test_the_answer_line_gives_the_corpus_error_and_its_denominator():
    table = engine_figures.engine_table(
        compose_settings(_with()), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), CPU_HERE
    )
    line = engine_line(table)
    ratio = table.iloc[0].composed_over_engine
    assert "Against 1 engine figures no fitted term saw" in line
    assert f"range {ratio:.2f}-{ratio:.2f}x" in line and "composed over measured" in line
    assert table.iloc[0].error_pct == pytest.approx(100 * (ratio - 1))


def test_train_rows_are_left_out_of_the_error():
    table = engine_figures.engine_table(
        compose_settings(_with(role="train")),
        pd.DataFrame(),
        pd.DataFrame(),
        pd.DataFrame(),
        CPU_HERE,
    )
    got = references.corpus_summary(table)
    assert got["train_rows"] == 1 and got["test_rows"] == 0 and got["composed"] == 0
    assert engine_line(table) == ""


def _figures(*rows: tuple) -> pd.DataFrame:
    """Return an engines table of one deployment at (layout, batch, TPOT, composed) rows."""
    base = {c: "" for c in ENGINE_COLUMNS} | {"input_len": 1024, "output_len": 1024,
                                              "context_len": 1536, "role": "test"}  # fmt: skip
    table = pd.DataFrame(
        [
            base | {"layout": lay, "batch": b, "engine_tpot_ms": t, "composed_over_engine": c}
            for lay, b, t, c in rows
        ]  # fmt: skip
    )
    table["source_check"] = references.source_checks(table)
    return table


def test_a_figure_slower_than_its_deployment_at_more_concurrency_is_flagged_not_dropped():
    table = _figures(
        ("tp8", 4, 22.73, 0.50),  # its source has 12.8 ms at concurrency 8: contradicted
        ("tp8", 8, 12.80, 1.10),
        ("tp8", 16, 12.00, 1.05),  # 6% faster than at 8: within the noise allowed
        ("ep8", 2, 30.00, 1.00),  # another layout: not the same deployment
    )
    flagged = table["source_check"].str.startswith("contradicted")
    assert flagged.tolist() == [True, False, False, False]
    assert "12.8 ms at concurrency 8" in table["source_check"][0]
    got = references.corpus_summary(table)
    assert got["composed"] == 4 and got["in_band"] == 3 and got["contradicted"] == 1
    kept = got["uncontradicted"]
    assert kept["composed"] == 3 and kept["in_band"] == 3 and kept["ratio_min"] == 1.0
    line = engine_line(table)
    assert "1 contradicted" in line and "without which 3 of 3 are within the band" in line


def test_the_card_says_how_far_to_trust_a_pick_from_its_family_or_the_corpus_spread():
    engines = pd.DataFrame(
        {
            "model": ["m", "m", "other"],
            "hardware": ["gpu", "gpu", "gpu"],
            "engine": ["SGLang", "SGLang", "vLLM"],
            "role": ["test", "test", "test"],
            "composed_over_engine": [0.9, 1.5, 1.0],
            "in_band": [True, False, True],
        }
    )
    families = references.family_errors(engines)
    assert list(families["figures"]) == [2, 1] and list(families["in_band"]) == [1, 1]
    own = references.trust_words(engines, "m", "gpu", "sglang")
    assert "2 cited SGLang figures of m on gpu" in own and "0.90-1.50" in own
    unseen = references.trust_words(engines, "m", "gpu", "vllm")
    assert "no cited figure of m on gpu with vllm" in unseen and "2 families" in unseen


def test_the_corpus_reads_as_hydra_would_read_it():
    """figures_from reads with libyaml under OmegaConf's scalar rules: the same values as
    OmegaConf's own parse of the file."""
    from omegaconf import OmegaConf

    path = ROOT / "conf" / "references" / "corpus" / "published.yaml"
    raw = {"references": {"figures_from": "corpus/published.yaml", "figures": []}}
    references.read_figures_from(raw, ROOT / "conf")
    assert raw["references"]["figures"] == OmegaConf.to_container(OmegaConf.load(path))["figures"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["references.figures_from=../model/glm5.yaml"], "not a .yaml file under conf/references"),
        (["references.figures_from=nosuch.yaml"], "'nosuch.yaml': cannot read it"),
        (["references.figures_from=none.yaml"], "the file holds no `figures:` list"),
        (["references.figures=[{engine:x}]"], "the figures are given inline too"),
        (["references.figures.0.batch=2"], "not overridden one by one"),
    ],
)
def test_a_bad_figures_file_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_settings(overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_figures_file_with_a_key_twice_is_refused(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "references" / "corpus" / "published.yaml").write_text(
        "figures:\n- engine: a\n  engine: b\n"
    )
    with pytest.raises(ConfigError, match="duplicate key engine at line 3"):
        compose([], conf)


def test_the_engine_check_says_whether_each_figure_lies_inside_the_verdicts_band(corpus_engines):
    done = corpus_engines[corpus_engines["composed_tpot_ms"].notna()]
    assert done["inside_tpot_band"].isna().equals(done["tpot_low_ms"].isna())
    done = done[done["tpot_low_ms"].notna()]  # rows with a band (the rest have none to be in)
    assert len(done) > 30
    low, high, tpot = done["tpot_low_ms"], done["tpot_high_ms"], done["engine_tpot_ms"]
    assert (done["inside_tpot_band"] == ((low <= tpot) & (tpot <= high))).all()
    assert (
        (low <= done["composed_tpot_ms"] + 1e-9) & (done["composed_tpot_ms"] <= high + 1e-9)
    ).all()
    families = references.family_errors(corpus_engines)
    assert families["inside_tpot_band"].sum() == done["inside_tpot_band"].sum()
    assert families["with_tpot_band"].sum() == len(done)


def test_a_figures_file_edited_keeping_size_and_mtime_is_read_again(tmp_path):
    """The per-process cache keys the figures file by its bytes, not its mtime and size."""
    import os
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    path = conf / "references" / "corpus" / "published.yaml"
    first = compose([], conf)["references"]["figures"][0]["tpot_ms"]
    stat = path.stat()
    text = path.read_text()
    old = f"tpot_ms: {first}"
    new = f"tpot_ms: {first + 1:.{len(str(first).split('.')[-1])}f}"
    assert old in text and len(old) == len(new)
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert compose([], conf)["references"]["figures"][0]["tpot_ms"] == pytest.approx(first + 1)


def test_a_figures_file_that_is_a_pipe_or_an_alias_bomb_is_one_short_line(tmp_path):
    """A FIFO blocked the read forever; a YAML alias bomb's value was a 25 MB line."""
    import os
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    corpus = conf / "references" / "corpus" / "published.yaml"
    corpus.unlink()
    os.mkfifo(corpus)
    with pytest.raises(ConfigError, match="not a plain file"):
        compose([], conf)
    corpus.unlink()
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for name, inner in zip("bcdefg", "abcdef", strict=True):
        rows.append(f"{name}: &{name} [{', '.join([f'*{inner}'] * 9)}]")
    corpus.write_text("\n".join([*rows, f"figures: [{', '.join(['*g'] * 9)}]"]) + "\n")
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    assert "expected a mapping" in str(err.value) and len(str(err.value)) < 400
