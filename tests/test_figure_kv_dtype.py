"""A cited figure's KV-cache format (references.Figure.kv_dtype, issue 48): the launch's stated
format composes into the figure's deployment; none stated keeps the deployment's own."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_verdict, engine_figures
from tilesweep.config import compose, compose_groups, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.settings.cited_figures import Figure

EMPTY = pd.DataFrame()
# DeepSeek-V3 (MLA) on H200 at a long context: the KV cache is a sizeable part of each step.
FIGURE = {
    "engine": "SGLang",
    "version": "0.5.9",
    "model": "deepseek_v3",
    "hardware": "h200",
    "deployment": "fp8_all",
    "layout": {"tp": 8, "pp": 1, "ep": 1},
    "batch": 64,
    "input_len": 8192,
    "output_len": 1024,
    "speculative": "none",
    "tpot_ms": 30.0,
    "source": "a test figure",
}


def _row(fig: Figure) -> pd.Series:
    """Return the verdict row engine_figures composes for one figure."""
    base = compose_groups(fig.groups(), engine_figures.FIGURE_BASE)
    settings = engine_figures.figure_settings(base, fig)
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {}).iloc[0]


def test_an_fp8_kv_figure_composes_a_smaller_kv_term_than_the_same_figure_in_bf16():
    fp8, bf16, unstated = (_row(Figure(**FIGURE, kv_dtype=k)) for k in ("fp8", "bf16", ""))
    assert (fp8["kv_dtype"], bf16["kv_dtype"], unstated["kv_dtype"]) == ("fp8", "bf16", "bf16")
    # Same weights, same batch and context: only the KV bytes differ, so every memory term falls.
    assert fp8["floor_ms"] < bf16["floor_ms"] and fp8["memory_ms"] < bf16["memory_ms"]
    assert fp8["tpot_ms"] < bf16["tpot_ms"]
    assert unstated["tpot_ms"] == pytest.approx(bf16["tpot_ms"])  # default: conf/deployment's bf16


def test_the_figure_composes_as_its_own_overrides_do():
    fig = Figure(**FIGURE, kv_dtype="fp8")
    assert fig.overrides()[-1] == "deployment.kv_dtype=fp8"
    assert not any("kv_dtype" in o for o in Figure(**FIGURE).overrides())
    own = compose_settings(fig.overrides())
    base = compose_groups(fig.groups(), engine_figures.FIGURE_BASE)
    shared = engine_figures.figure_settings(base, fig)
    assert shared.as_dict()["deployment"] == own.as_dict()["deployment"]


def test_an_unknown_kv_dtype_is_refused_in_one_line():
    body = ",".join(
        f"{k}:{{tp:8,pp:1,ep:1}}" if k == "layout" else f"{k}:{v!r}".replace("'", '"')
        for k, v in {**FIGURE, "kv_dtype": "fp8_e5m2"}.items()
    )
    with pytest.raises(ConfigError) as err:
        compose(["references=none", f"references.figures=[{{{body}}}]"])
    text = str(err.value)
    assert text.startswith("references.figures[0].kv_dtype='fp8_e5m2'") and "\n" not in text
