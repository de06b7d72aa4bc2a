"""All-reduce figures per GPU count (conf/hardware interconnect_model): a count gets its own cited
figures, each in-graph series names its machine, and a count without figures is refused in one
line rather than borrowed from another count."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.deployment_refusals import refusal
from tilesweep.plan.interconnect import collective_time, topology_numbers
from tilesweep.plan.topology import with_engine_allreduce

KIB = 1 << 10
EMPTY = pd.DataFrame()


def _settings(hardware: str, tp: int, engine: str = "sglang"):
    """Return the composed settings of Mixtral 8x7B (bf16, fits two B200s) at TP `tp`."""
    return compose_settings(
        [
            f"hardware={hardware}",
            "model=mixtral_8x7b",
            "deployment=bf16",
            f"engine={engine}",
            f"grid.layouts=[{{tp:{tp},pp:1,ep:1}}]",
            "references=none",
            "question=none",
        ]
    )


def _b200_two(engine: str = "sglang"):
    """Return B200's topology figures with the engine's all-reduce table attached."""
    settings = _settings("b200", 2, engine)
    return topology_numbers(with_engine_allreduce(settings.hardware, settings.engine))[0]


def test_b200_two_gpus_take_the_cited_one_shot_inside_its_sizes():
    numbers = _b200_two()
    # [aic-b200-vllm] 64 KiB: 7.31 us; 192 KiB on the line from 128 KiB (7.77) to 256 KiB (7.82).
    ms, label = collective_time("all_reduce", 2, 64 * KIB, numbers)
    assert ms == pytest.approx(7.31e-3)
    assert label.startswith("sglang: one_shot") and "[aic-b200-vllm]" in label
    ms, _ = collective_time("all_reduce", 2, 192 * KIB, numbers)
    assert ms == pytest.approx((7.77 + 7.82) / 2 * 1e-3)
    # Below the first cited size the first size's time stands (an upper figure).
    assert collective_time("all_reduce", 2, 8 * KIB, numbers)[0] == pytest.approx(7.31e-3)


def test_b200_two_gpus_past_the_one_shot_take_ncclls_own_two_gpu_figures():
    numbers = _b200_two()
    figures = numbers.all_reduce.by_gpus[2]
    # SGLang's two-shot from 512 KiB has no cited 2-GPU series: NCCL's 2-GPU line, wire factor 1.
    ms, label = collective_time("all_reduce", 2, 1024 * KIB, numbers)
    assert ms == pytest.approx((figures.latency_us + 1024 * KIB / (figures.busbw_gbs * 1e3)) * 1e-3)
    assert "no cited two_shot figure at 2 GPUs" in label and "NCCL's model" in label
    # The lean step (NCCL only) reads the same 2-GPU figures, never the 4- or 8-GPU ones.
    lean = _b200_two("lean")
    assert collective_time("all_reduce", 2, 0, lean) == (figures.latency_us * 1e-3, "model")
    assert figures != numbers.all_reduce.by_gpus[4]


def test_a_tp2_b200_verdict_composes_and_names_its_source():
    rows = deployment_verdict.deployment_table(_settings("b200", 2), EMPTY, EMPTY, EMPTY, {})
    assert set(rows["layout"]) == {"tp2-pp1-ep1"}
    assert rows["comm_ms"].map(math.isfinite).all() and (rows["comm_ms"] > 0).all()
    words = rows["collectives"].iloc[0]
    assert "one_shot 2 GPUs [aic-b200-vllm] NVIDIA B200, 2 and 4 GPUs of one node" in words


def test_a_count_without_figures_is_refused_in_one_line_not_borrowed():
    # A100 holds 2- and 8-GPU figures: TP4 is refused, naming what it has.
    text = refusal(_settings("a100", 4))
    assert "\n" not in text and "no all_reduce figures for 4 GPUs (has 2, 8)" in text
    assert refusal(_settings("b200", 2)) is None


def test_b200_four_gpus_one_shot_is_cited_and_its_two_shot_stays_ncclls():
    settings = _settings("b200", 4)
    numbers = topology_numbers(with_engine_allreduce(settings.hardware, settings.engine))[0]
    ms, label = collective_time("all_reduce", 4, 128 * KIB, numbers)
    assert ms == pytest.approx(8.22e-3) and "[aic-b200-vllm]" in label
    # SGLang's two-shot from 256 KiB: no cited 4-GPU series, NCCL's 4-GPU line, said so.
    _, label = collective_time("all_reduce", 4, 512 * KIB, numbers)
    assert "no cited two_shot figure at 4 GPUs" in label and "NCCL's model" in label


def test_a100_two_gpus_compose_on_ncclls_own_two_gpu_line():
    settings = _settings("a100", 2)
    assert refusal(settings) is None
    numbers = topology_numbers(with_engine_allreduce(settings.hardware, settings.engine))[0]
    two, eight = numbers.all_reduce.by_gpus[2], numbers.all_reduce.by_gpus[8]
    ms, label = collective_time("all_reduce", 2, 64 * KIB, numbers)
    # No engine lists an sm_80 table: NCCL's 2-GPU line (wire factor 1), never the 8-GPU one.
    assert ms == pytest.approx((two.latency_us + 64 * KIB / (two.busbw_gbs * 1e3)) * 1e-3)
    assert "lists no all-reduce algorithm for sm_80 at 2 GPUs" in label
    assert (two.latency_us, two.busbw_gbs) != (eight.latency_us, eight.busbw_gbs)
