"""An engine's arriving prompts as it schedules them (conf/engine prefill, plan.prompt_load): a
separate prefill pass per chunk that decoding requests wait for, or chunks mixed into the step."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tilesweep import deployment_verdict, engine_figures
from tilesweep.config import compose_groups, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.plan import row_inputs
from tilesweep.plan.prompt_load import PromptLoad, chunk_tokens, prompt_chunks, prompt_load
from tilesweep.plan.step_time import StepCase, loaded_step
from tilesweep.settings.cited_figures import Figure

EMPTY = pd.DataFrame()
QWEN_H200 = [
    "model=qwen3_235b_a22b",
    "hardware=h200",
    "deployment=fp8_all",
    "deployment.input_len=4000",
    "deployment.output_len=100",
    "deployment.batches=[6]",
    "grid.layouts=[{tp:4,pp:1,ep:1}]",
]


def test_a_prompt_is_cut_into_chunks_of_the_engines_size_the_last_the_remainder():
    assert prompt_chunks(4000, 8192) == [4000]
    assert prompt_chunks(20000, 8192) == [8192, 8192, 3616]
    assert prompt_chunks(16384, 8192) == [8192, 8192]
    assert prompt_chunks(3000, 0) == [3000]


def test_sglang_picks_its_chunk_by_the_gpus_memory():
    settings = compose_settings(["engine=sglang"])
    chunks = settings.engine.prefill.chunks
    assert chunk_tokens(chunks, 141) == 8192  # H200: under 160 GiB
    assert chunk_tokens(chunks, 80) == 8192
    assert chunk_tokens(chunks, 180) == 16384  # B200: past 160 GiB
    assert chunk_tokens(chunks, 24) == 4096
    load = prompt_load(settings.engine, compose_settings(["hardware=h200"]).hardware, "fp8")
    measured = settings.engine.prefill.expert_gemm["h200"]["fp8"].e_math
    assert (load.schedule, load.chunk, load.expert_e_math) == ("separate", 8192, measured)
    assert 0.15 < measured < 0.3  # SGLang's fused_moe at 8,192 prompt rows, H200 tables


def test_chunk_bounds_that_do_not_end_unbounded_are_refused():
    bad = "engine.prefill.chunks=[{below_gib:60,tokens:4096},{below_gib:160,tokens:8192}]"
    with pytest.raises(ConfigError, match="only the last chunk has below_gib null"):
        compose_settings([bad])
    with pytest.raises(ConfigError, match="not a GPU of conf/hardware"):
        compose_settings(["+engine.prefill.expert_gemm.h999={fp8:{e_math:0.1,cite:x}}"])


def _prefill_ms(prompt: PromptLoad, input_len: int = 4000) -> float:
    """Return the roofline prefill share of the Qwen3 H200 TP4 batch-6 step under `prompt`."""
    settings = compose_settings([*QWEN_H200, f"deployment.input_len={input_len}"])
    args = (settings.model, settings.deployment, settings.hardware, settings.grid.layouts[0], 6)
    _, prefill = loaded_step(StepCase(*args, prompt=prompt))
    return prefill


def test_a_separate_pass_reads_the_weights_again_so_it_costs_more_than_mixing_in():
    mixed = _prefill_ms(PromptLoad("mixed", 8192))
    separate = _prefill_ms(PromptLoad("separate", 8192))
    assert separate > mixed > 0


def test_smaller_separate_chunks_read_the_weights_more_often():
    whole = _prefill_ms(PromptLoad("separate", 8192), input_len=8000)
    chunked = _prefill_ms(PromptLoad("separate", 1000), input_len=8000)
    assert chunked > whole


def test_the_cited_prompt_efficiency_of_the_expert_gemms_slows_the_prompt_and_is_said():
    cited = deployment_verdict.deployment_table(
        compose_settings(QWEN_H200), EMPTY, EMPTY, EMPTY, {}
    ).iloc[0]
    off = "~engine.prefill.expert_gemm"
    plain = deployment_verdict.deployment_table(
        compose_settings([*QWEN_H200, off]), EMPTY, EMPTY, EMPTY, {}
    ).iloc[0]
    assert cited["prefill_ms"] > 1.2 * plain["prefill_ms"] > 0
    words = row_inputs.row_words(cited)
    assert "a prefill pass of its own, chunks of 8192 tokens" in words
    assert "expert GEMMs at e_math 0.231 at prompt rows (measured on one H100" in words
    assert "expert GEMMs at the fit's e_math" in row_inputs.row_words(plain)


def test_an_engine_that_does_not_chunk_takes_the_whole_prompt_at_once():
    settings = compose_settings(["engine=tensorrtllm", "hardware=h200"])
    load = prompt_load(settings.engine, settings.hardware, "fp8")
    assert (load.schedule, load.chunk, load.expert_e_math) == ("mixed", 0, None)
    assert "the whole prompt at once" in load.words


def test_the_launchs_chunk_wins_over_the_engine_files_table_and_is_named():
    settings = compose_settings([*QWEN_H200, "deployment.prefill_chunk=1000"])
    load = prompt_load(settings.engine, settings.hardware, "fp8", settings.deployment.prefill_chunk)
    assert load.chunk == 1000
    assert "chunks of 1000 tokens (deployment.prefill_chunk, as launched; the engine file" in (
        load.words
    )
    whole = prompt_load(settings.engine, settings.hardware, "fp8", -1)
    assert (whole.chunk, "the whole prompt at once" in whole.words) == (0, True)
    table = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {}).iloc[0]
    assert "chunks of 1000 tokens (deployment.prefill_chunk" in row_inputs.row_words(table)


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (["deployment.prefill_chunk=-2"], "prefill_chunk"),
        (["deployment.prefill_chunk=4096"], "a serving load's chunk"),
        ([*QWEN_H200, "engine=vllm_0_7", "deployment.prefill_chunk=4096"], "has no prefill rule"),
    ],
)
def test_a_chunk_nothing_can_take_is_refused_in_one_line(overrides, why):
    with pytest.raises(ConfigError, match=why) as refused:
        compose_settings(overrides)
    assert "\n" not in str(refused.value)


FIGURE = {
    "engine": "SGLang",
    "version": "0.5.23",
    "model": "qwen3_235b_a22b",
    "hardware": "h200",
    "deployment": "fp8_all",
    "layout": {"tp": 4, "pp": 1, "ep": 1},
    "batch": 6,
    "input_len": 4000,
    "output_len": 100,
    "speculative": "none",
    "tpot_ms": 20.0,
    "source": "a test figure",
}


def test_a_figures_stated_chunk_composes_as_the_deployment_override_does():
    fig = Figure(**FIGURE, prefill_chunk=1000)
    assert "deployment.prefill_chunk=1000" in fig.overrides()
    assert not any("prefill_chunk" in o for o in Figure(**FIGURE).overrides())
    own = compose_settings(fig.overrides())
    base = compose_groups(fig.groups(), engine_figures.FIGURE_BASE)
    shared = engine_figures.figure_settings(base, fig)
    assert shared.as_dict()["deployment"] == own.as_dict()["deployment"]
    row = deployment_verdict.deployment_table(shared, EMPTY, EMPTY, EMPTY, {}).iloc[0]
    unstated = engine_figures.figure_settings(base, Figure(**FIGURE))
    plain = deployment_verdict.deployment_table(unstated, EMPTY, EMPTY, EMPTY, {}).iloc[0]
    assert row["prefill_ms"] > plain["prefill_ms"] > 0  # 4000 tokens in 4 passes, not 1
    assert "chunks of 1000 tokens (deployment.prefill_chunk" in row_inputs.row_words(row)
    assert "chunks of 8192 tokens (conf/engine/sglang.yaml" in row_inputs.row_words(plain)


def test_a_figures_chunk_without_prompts_or_a_prefill_rule_is_refused():
    decode_only = FIGURE | {"input_len": 0, "output_len": 0, "context_len": 4000}
    with pytest.raises(ValueError, match="prefill_chunk"):
        Figure(**decode_only, prefill_chunk=1000)
    old = Figure(**FIGURE | {"engine_config": "vllm_0_7"}, prefill_chunk=1000)
    base = compose_groups(old.groups(), engine_figures.FIGURE_BASE)
    with pytest.raises(ConfigError, match="vllm_0_7.yaml has no prefill rule"):
        engine_figures.figure_settings(base, old)


def test_every_corpus_chunk_cites_the_line_of_the_launch_that_sets_it():
    figures = [f for f in compose_settings([]).references.figures if f.prefill_chunk]
    assert figures
    for fig in figures:
        said = re.search(
            rf"prefill_chunk {fig.prefill_chunk} as the launch sets it, ([^;]+)", fig.note
        )
        assert said and re.search(r"/blob/[0-9a-f]{40}/\S+#L\d+", said.group(1)), fig.source
