"""A serving load's arriving prompts run their own attention (and the DSA indexer) at the
target's cited prefill-attention efficiency; the verdict says what each row rests on as data."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import answer_card, deployment_verdict
from tilesweep.columns import PROVENANCE_COLUMNS
from tilesweep.config import compose_settings
from tilesweep.plan import row_inputs
from tilesweep.plan.architecture import causal_pairs, prompt_attention

EMPTY = pd.DataFrame()


def test_causal_pairs_count_each_query_up_to_its_window():
    assert causal_pairs(4, 4) == 1 + 2 + 3 + 4
    assert causal_pairs(4, 2) == 1 + 2 + 2 + 2
    assert causal_pairs(4, 100) == causal_pairs(4, 4)


def test_a_dsa_prompt_attends_its_top_k_and_its_indexer_scores_every_earlier_token():
    settings = compose_settings(["deployment.input_len=8192", "deployment.output_len=1024"])
    model, dep = settings.model, settings.deployment
    core = prompt_attention(model, dep, heads=8, sliding=False)
    att = model.attention
    per_pair = 2 * (att.qk_nope_head_dim + att.qk_rope_head_dim + att.v_head_dim)
    assert core["flops"] == pytest.approx(8 * causal_pairs(8192, 2048) * per_pair)
    index = 2 * att.index_n_heads * att.index_head_dim * causal_pairs(8192, 8192)
    assert core["index_flops"] == pytest.approx(index)


def _row(overrides: list[str]) -> pd.Series:
    """Return the verdict's one row for the overrides (TP8, one batch)."""
    base = ["deployment.batches=[16]", "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    settings = compose_settings([*base, *overrides])
    return deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {}).iloc[0]


def test_longer_prompts_cost_a_serving_step_more_where_attention_is_cited_and_say_so():
    h200 = ["hardware=h200", "deployment=fp8_all", "deployment.output_len=1024"]
    short = _row([*h200, "deployment.input_len=1024"])
    long = _row([*h200, "deployment.input_len=8192"])
    assert long["prefill_ms"] > 4 * short["prefill_ms"] > 0  # 8x the rows, and 40x the pairs
    assert "their attention at e_math 0.75 (FlashAttention-3" in row_inputs.row_words(long)
    rtx = _row(["deployment.input_len=1024", "deployment.output_len=1024"])
    assert "their attention not charged: hardware[rtx_pro_6000] cites no" in row_inputs.row_words(
        rtx
    )


def test_each_verdict_row_carries_its_provenance_as_columns_and_the_card_as_fields():
    settings = compose_settings(["deployment.batches=[1,8]"])
    verdict = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
    fits = verdict[verdict["fits_memory"] == "yes"]
    for column in PROVENANCE_COLUMNS:
        assert fits[column].astype(str).str.len().gt(0).all(), column
    assert fits["load"].str.startswith("decode only, 8192 tokens").all()
    assert fits["collectives"].str.contains("topology: switch").all()
    card = answer_card.build(settings, verdict)
    saved = answer_card.AnswerCard.from_dict(card.to_dict())
    assert saved.provenance == card.provenance
    # The verdict's provenance columns, and the card header's engine, formats and fit file.
    assert set(card.provenance) == {*PROVENANCE_COLUMNS, "engine", "formats", "fit_file"}
