"""The all-reduce as engines run it in their CUDA graphs (plan.allreduce): the engine file's
algorithm by message size, the hardware file's in-graph time of that algorithm, the next slower
cited one or NCCL's model where none is cited, and the files' one-line refusals."""

from __future__ import annotations

import copy
import re
from functools import cache

import pytest

from tilesweep.config import compose, validate
from tilesweep.errors import ConfigError
from tilesweep.plan import allreduce
from tilesweep.plan.interconnect import collective_time, topology_numbers
from tilesweep.plan.topology import with_engine_allreduce
from tilesweep.settings import HardwareSpec
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.hardware_spec import OneShotFigures, Topology
from tilesweep.settings.strict import check

KIB, MIB = 1 << 10, 1 << 20


@cache
def _composed(*overrides: str) -> dict:
    return compose([*overrides, "references=none"])


def _settings(*overrides: str) -> dict:
    """Return a fresh copy of the composed settings (each composed once a run)."""
    return copy.deepcopy(_composed(*overrides))


@pytest.fixture(scope="module")
def engines():
    return {e: EngineSettings.model_validate(_settings(f"engine={e}")["engine"]) for e in ENGINES}


ENGINES = ("sglang", "vllm", "tensorrtllm", "lean")


def _picks(
    engine: EngineSettings, arch: str, n: int, sizes: list[int], token_bytes: int = 14336
) -> list[str]:
    """Return the algorithm each size takes (a table by tokens reads hidden 7168's 14,336 B)."""
    steps = allreduce.engine_steps(engine, arch)[n]
    return [allreduce.algorithm_at(steps, size, token_bytes)[0] for size in sizes]


@pytest.mark.parametrize(
    ("engine", "arch", "n", "sizes", "algorithms"),
    [
        # SGLang 0.5.23, sm_90, 8 GPUs: FlashInfer's fused one-shot while 2 x 8 x bytes <= 42 MiB,
        # then two-shot to custom all-reduce v2's 16 MiB workspace, then NCCL.
        ("sglang", "sm_90", 8, [12 * KIB, 2752512, 2752513, 16 * MIB, 16 * MIB + 1],
         ["one_shot", "one_shot", "two_shot", "two_shot", "nccl"]),
        # sm_100 takes MNNVL: one-shot while 8 x bytes <= 1 MiB.
        ("sglang", "sm_100", 8, [128 * KIB, 128 * KIB + 1], ["one_shot", "two_shot"]),
        ("sglang", "sm_90", 4, [8 * MIB, 8 * MIB + 1], ["one_shot", "two_shot"]),
        # vLLM 0.34.0, sm_90, 8 GPUs: MNNVL one-shot to 128 KiB, fused two-shot to 0.5 MiB, torch
        # symmetric memory to 64 MiB, NCCL past it.
        ("vllm", "sm_90", 8, [128 * KIB, 200 * KIB, 512 * KIB + 1, 64 * MIB, 64 * MIB + 1],
         ["one_shot", "two_shot", "symm_mem", "symm_mem", "nccl"]),
        ("vllm", "sm_100", 8, [1 * MIB, 128 * MIB + 1], ["two_shot", "nccl"]),
        ("vllm", "sm_90a", 4, [256 * KIB, 4 * MIB, 16 * MIB, 33 * MIB],
         ["one_shot", "two_shot", "symm_mem", "nccl"]),
        # TensorRT-LLM AUTO, sm_90, 8 GPUs, hidden 7168 (14,336 B a token): one-shot to 127
        # tokens, NCCL from 128.
        ("tensorrtllm", "sm_90", 8, [127 * 14336, 128 * 14336], ["one_shot", "nccl"]),
        ("tensorrtllm", "sm_90", 2, [15 * 14336, 16 * 14336, 32 * 14336, 16_000_001],
         ["one_shot", "two_shot", "one_shot", "nccl"]),
    ],
)  # fmt: skip
def test_each_engine_picks_its_algorithm_by_size_from_its_own_table(
    engines, engine, arch, n, sizes, algorithms
):
    assert _picks(engines[engine], arch, n, sizes) == algorithms


def test_tensorrtllm_switches_at_its_tables_token_counts_whatever_the_hidden_size(engines):
    trt = engines["tensorrtllm"]
    # Qwen3's hidden 4096 (8,192 B a token) at 8 GPUs: NCCL from 128 tokens, 1 MiB, where a
    # byte threshold written for hidden 7168 would still say one-shot.
    assert _picks(trt, "sm_90", 8, [127 * 8192, 128 * 8192], 8192) == ["one_shot", "nccl"]
    # 4 GPUs: two-shot from 512 tokens, NCCL past the 8,000,000 B workspace (976 tokens).
    sizes = [511 * 8192, 512 * 8192, 976 * 8192, 977 * 8192]
    assert _picks(trt, "sm_90", 4, sizes, 8192) == ["one_shot", "two_shot", "two_shot", "nccl"]
    with pytest.raises(ValueError, match="needs the model's bytes per token"):
        allreduce.algorithm_at(allreduce.engine_steps(trt, "sm_90")[8], 1024)


def test_steps_by_tokens_must_take_larger_messages_each():
    def swap(settings):
        steps = settings["engine"]["allreduce"]["sm_90"]["by_gpus"][4]
        steps[0]["max_tokens"], steps[1]["max_tokens"] = 1023, 511

    assert "(max_tokens, max_bytes) must ascend" in _refused(swap, engine="tensorrtllm")


def test_the_lean_step_and_an_unlisted_arch_have_no_table(engines):
    assert allreduce.engine_steps(engines["lean"], "sm_90") == {}
    assert allreduce.engine_steps(engines["sglang"], "sm_120") == {}


def _hardware(hardware: str) -> HardwareSpec:
    return HardwareSpec.model_validate(_settings(f"hardware={hardware}")["hardware"])


def _target(hardware: str, engine: EngineSettings) -> HardwareSpec:
    return with_engine_allreduce(_hardware(hardware), engine)


def _nccl_model_ms(numbers: Topology, n: int, nbytes: float) -> float:
    figures = numbers.all_reduce.by_gpus[n]
    return (figures.latency_us + 2 * (n - 1) / n * nbytes / (figures.busbw_gbs * 1e3)) * 1e-3


def test_an_all_reduce_takes_the_engines_algorithm_at_its_cited_in_graph_time(engines):
    numbers, _ = topology_numbers(_target("h200", engines["sglang"]))
    # 32 KiB on 8 GPUs: one-shot, [sglang#22734]'s 7.21 us at exactly that size.
    ms, label = collective_time("all_reduce", 8, 32 * KIB, numbers)
    assert ms == pytest.approx(7.21e-3)
    assert label.startswith("sglang: one_shot to 2752512 B") and "[sglang#22734]" in label
    # 24 KiB: on the line between 16 KiB (6.37 us) and 32 KiB (7.21 us).
    ms, _ = collective_time("all_reduce", 8, 24 * KIB, numbers)
    assert ms == pytest.approx((6.37 + 7.21) / 2 * 1e-3)
    # 2.5 MiB is still one-shot, past its cited 1 MiB: the next slower cited, two-shot
    # ([vllm#24111], between 2 MiB at 28 us and 3 MiB at 44 us), and the label says so.
    ms, label = collective_time("all_reduce", 8, 2.5 * MIB, numbers)
    assert ms == pytest.approx(36e-3) and "timed as two_shot" in label and "past" in label
    # 20 MiB is past SGLang's steps: NCCL, past NCCL's cited 1 MiB: NCCL's model.
    ms, label = collective_time("all_reduce", 8, 20 * MIB, numbers)
    assert ms == pytest.approx(_nccl_model_ms(numbers, 8, 20 * MIB))
    assert "past its steps" in label and "NCCL's model" in label


def test_vllm_takes_symmetric_memory_where_its_code_does(engines):
    numbers, _ = topology_numbers(_target("h200", engines["vllm"]))
    ms, label = collective_time("all_reduce", 8, 1 * MIB, numbers)
    assert ms == pytest.approx(17e-3) and label.startswith("vllm: symm_mem")
    sglang, _ = topology_numbers(_target("h200", engines["sglang"]))
    assert collective_time("all_reduce", 8, 1 * MIB, sglang)[0] == pytest.approx(14.01e-3)


def test_an_algorithm_with_no_cited_figure_takes_ncclls_and_says_so(engines):
    # B200 at 8 GPUs: SGLang's two-shot from 128 KiB has no in-graph series: NCCL's model.
    numbers, _ = topology_numbers(_target("b200", engines["sglang"]))
    ms, label = collective_time("all_reduce", 8, 200 * KIB, numbers)
    assert ms == pytest.approx(_nccl_model_ms(numbers, 8, 200 * KIB))
    assert "no cited two_shot figure at 8 GPUs" in label and "NCCL's model" in label
    # Below the one cited size, that size's time (an upper figure).
    assert collective_time("all_reduce", 8, 14 * KIB, numbers)[0] == pytest.approx(8.7e-3)
    # A count the engine's table lacks for this arch takes NCCL's model and names why.
    sm_100 = engines["sglang"].allreduce["sm_100"]
    only_eight = sm_100.model_copy(update={"by_gpus": {8: sm_100.by_gpus[8]}})
    engine = engines["sglang"].model_copy(update={"allreduce": {"sm_100": only_eight}})
    numbers, _ = topology_numbers(_target("b200", engine))
    ms, label = collective_time("all_reduce", 4, 64 * KIB, numbers)
    assert ms == pytest.approx(_nccl_model_ms(numbers, 4, 64 * KIB))
    assert "sglang lists no all-reduce algorithm for sm_100 at 4 GPUs" in label


def test_pcie_and_the_lean_step_keep_ncclls_figures(engines):
    hw = _hardware("rtx_pro_6000")
    assert with_engine_allreduce(hw, engines["sglang"]) is hw
    h200 = _hardware("h200")
    assert with_engine_allreduce(h200, engines["lean"]) is h200
    numbers, _ = topology_numbers(h200)
    ms, label = collective_time("all_reduce", 8, 32 * KIB, numbers)
    assert label == "model" and ms == pytest.approx(_nccl_model_ms(numbers, 8, 32 * KIB))


def test_the_verdicts_words_name_the_steps_and_each_series_machine(engines):
    words = allreduce.describe(_target("h200", engines["vllm"]))
    assert words.startswith("vllm's all-reduce on sm_90 by message size")
    assert (
        "8 GPUs one_shot to 128 KiB, two_shot to 512 KiB, symm_mem to 64 MiB, NCCL above" in words
    )
    assert "symm_mem 8 GPUs [vllm#24111] 8x H100 SXM in one node" in words
    assert "next slower" in words


def _refused(edit, hardware: str = "h200", engine: str = "sglang") -> str:
    settings = _settings(f"hardware={hardware}", f"engine={engine}")
    edit(settings)
    with pytest.raises(ConfigError) as caught:
        validate(settings)
    text = str(caught.value)
    assert "\n" not in text
    return text


def _steps(settings) -> list:
    return settings["engine"]["allreduce"]["sm_90"]["by_gpus"][8]


def _series(settings, algorithm: str) -> dict:
    """Return an algorithm's in-graph series by GPU count in the settings' h200 file."""
    return _in_graph(settings)[algorithm]["by_gpus"]


def _in_graph(settings) -> dict:
    top = settings["hardware"]["interconnect_model"]["topologies"]["nvswitch"]
    return top["all_reduce"]["in_graph"]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: _steps(s)[1].update(max_bytes=1024), "max_bytes must ascend strictly"),
        (lambda s: _steps(s)[0].update(max_bytes=0), "max_bytes=0"),
        (lambda s: _steps(s)[0].update(algorithm="ring"), "algorithm='ring'"),
        (lambda s: _steps(s).clear(), "no algorithm; list at least one step"),
        (lambda s: s["engine"]["allreduce"]["sm_90"]["by_gpus"].update({1: [dict(_steps(s)[0])]}),
         "a GPU count must be an integer of at least 2"),
        (lambda s: s["engine"]["allreduce"].update(hopper={}), "engine.allreduce"),
    ],
)  # fmt: skip
def test_a_bad_engine_table_is_refused_in_one_line(edit, says):
    text = _refused(edit)
    assert text.startswith("engine") and says in text


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: _series(s, "one_shot")[8]["points"].reverse(), "bytes must ascend strictly"),
        (lambda s: _series(s, "one_shot")[8]["points"][1].__setitem__(1, 1.0),
         "a larger message cannot take less time"),
        (lambda s: _series(s, "one_shot")[8]["points"][0].__setitem__(1, 0),
         "points[0][1]=0: must be more than 0"),
        (lambda s: _series(s, "two_shot")[8].update(source="nowhere"),
         "two_shot.by_gpus.8.source='nowhere': not among sources"),
        (lambda s: _series(s, "symm_mem").update({1: _series(s, "symm_mem")[8]}),
         "a GPU count must be"),
        (lambda s: _in_graph(s)["sources"]["vllm#24111"].pop("machine"), "missing key 'machine'"),
        # 1 MiB over 8 GPUs in 2 us is 918 GB/s of bus bandwidth: no NVLink4 GPU moves that.
        (lambda s: _series(s, "nccl")[8].update(points=[[1 << 20, 2.0]]),
         "nccl on 8 GPUs: 1048576 B in 2 us is 918 GB/s bus bandwidth, above the 450 GB/s link"),
    ],
)  # fmt: skip
def test_a_bad_in_graph_figure_is_refused_in_one_line(edit, says):
    text = _refused(edit)
    assert text.startswith("hardware.interconnect_model.topologies.nvswitch.all_reduce.in_graph")
    assert says in text


def test_every_in_graph_point_is_below_its_link_and_names_one_machine():
    for hardware in ("h100", "h200", "b200"):
        spec = _settings(f"hardware={hardware}")["hardware"]
        graph = spec["interconnect_model"]["topologies"]["nvswitch"]["all_reduce"]["in_graph"]
        for algorithm in allreduce.FALLBACK:
            for n, series in (graph.get(algorithm) or {"by_gpus": {}})["by_gpus"].items():
                assert graph["sources"][series["source"]]["machine"], (hardware, algorithm, n)
                for nbytes, us in series["points"]:
                    busbw = 2 * (n - 1) / n * nbytes / (us * 1e3)
                    assert busbw < spec["interconnect_gbs"], (hardware, algorithm, n, nbytes)


def test_the_latency_sensitivity_scales_every_in_graph_time_and_keeps_the_sizes():
    from tilesweep.plan import sensitivity

    hw = HardwareSpec.model_validate(_settings("hardware=h200")["hardware"])
    late = sensitivity.scaled_hardware(hw, "interconnect_latency", 2.0)
    base = hw.interconnect_model.topologies["nvswitch"].all_reduce.in_graph
    got = late.interconnect_model.topologies["nvswitch"].all_reduce.in_graph
    pairs = list(zip(base.series(), got.series(), strict=True))
    assert len(pairs) == 6 and got.sources == base.sources
    for (alg, n, before), (alg2, n2, after) in pairs:
        assert (alg, n) == (alg2, n2)
        assert after.points == [[b, 2 * t] for b, t in before.points]


@pytest.mark.parametrize(
    ("points", "says"),
    [
        ([[1024, 5.0], [512, 6.0]], "points=[1024, 512]: bytes must ascend strictly"),
        ([[1024, 5.0], [1024, 6.0]], "points=[1024, 1024]: bytes must ascend strictly"),
        ([[1024, 5.0], [65536, 6.0]], "points=[1024, 65536]: bytes must be at most max_bytes"),
    ],
)
def test_one_shot_points_ascend_up_to_max_bytes(points, says):
    """One-shot points share the in-graph series' ascending check (strict.ascending)."""
    data = {"latency_us": 5.0, "max_bytes": 32768, "points": points}
    with pytest.raises(ConfigError, match=re.escape(says)):
        check(OneShotFigures, data, "one_shot.by_gpus.8")
    assert check(OneShotFigures, dict(data, points=[[1024, 5.0], [32768, 6.0]])).max_bytes == 32768
