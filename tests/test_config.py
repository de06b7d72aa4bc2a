"""Composing every config group, and one-line errors for bad input."""

from __future__ import annotations

import pytest
from conftest import fast_sample

from tilesweep.command_config import parse_overrides
from tilesweep.config import CONF_DIR, compose
from tilesweep.errors import ConfigError


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_default_is_the_brief():
    settings = compose()
    assert settings["model"]["name"] == "glm5"
    assert settings["model"]["hidden"] == 6144
    assert settings["grid"]["targets"] == ["rtx_pro_6000", "h200", "b200"]
    assert settings["catalog"]["rtx_pro_6000"]["smem_per_block_optin"] == 101_376
    assert settings["catalog"]["h200"]["smem_per_block_optin"] == 232_448


@pytest.mark.slow  # composes every option of six groups
@pytest.mark.parametrize("group", ["hardware", "model", "grid", "backend", "bench", "experiment"])
def test_every_group_option_composes(group):
    # gpt-oss's hidden size (2880) takes K tiles of 64 at most: the grid must suit the model.
    extra = ["grid.tiles=[{m:16,n:64,k:64}]"] if group == "model" else []
    for option in _options(group):
        settings = compose([f"{group}={option}", *extra])
        assert settings["grid"]["tiles"], option


def test_override_reaches_the_grid():
    settings = compose(
        ["model=deepseek_v3", "grid.targets=[h200]", "grid.tokens_per_expert=[16,32]"]
    )
    assert settings["model"]["hidden"] == 7168
    assert settings["grid"]["targets"] == ["h200"]
    assert settings["grid"]["tokens_per_expert"] == [16, 32]


@pytest.mark.parametrize(
    ("override", "message"),
    fast_sample(
        [
            ("hardware=h300", "h300"),
            ("model=glm9", "glm9"),
            ("grid.targets=[h300]", "grid.targets[0]='h300': unknown hardware; valid: "),
            ("grid.tiles=[{m:24,n:64,k:64}]", "grid.tiles[0].m=24: must be a power of two"),
            ("grid.tiles=[{m:0,n:64,k:64}]", "grid.tiles[0].m=0: must be at least 16"),
            (
                "grid.tiles=[{m:64,n:64,k:4096}]",
                "grid.tiles[0].k=4096: does not divide model.hidden",
            ),
            ("grid.stages=[0]", "grid.stages[0]=0: must be between 1 and 16"),
            ("grid.stages=[1000000]", "grid.stages[0]=1000000: must be between 1 and 16"),
            ("grid.warps=[64]", "grid.warps[0]=64: must be between 1 and 32"),
            ("model.hidden=" + "1" + "0" * 30, "model.hidden=1" + "0" * 30 + ": must be between 1"),
            ("model.routed_experts=0", "model.routed_experts=0: must be between 1 and 65,536"),
            ("grid.tokens_per_expert=[0,16]", "grid.tokens_per_expert[0]=0: must be between 1"),
            ("grid.layouts=[{tp:4,pp:2,ep:1,world:4}]", "grid.layouts[0].world=4: tp*pp*ep"),
            ("grid.layouts=[{tp:3,pp:1,ep:1}]", "grid.layouts[0].tp=3: does not divide"),
            (
                "grid.tokens_per_expert=[abc]",
                "grid.tokens_per_expert[0]='abc': expected an integer",
            ),
            ("deployment.fit_batches=[1,8,64]", "deployment.fit_batches=[1, 8, 64]: at most two"),
            ("deployment.fit_batches=[8,8]", "deployment.fit_batches=[8, 8]: at most two distinct"),
            ("deployment.fit_batches=[0]", "deployment.fit_batches[0]=0: must be at least 1"),
            ("grid.dtypes=[fp4]", "grid.dtypes[0]='fp4': allowed: bf16, fp8"),
            (
                "grid.colour=red",
                "bad config: Could not override 'grid.colour' (no key 'colour' there)",
            ),
            (
                "references.figures={a: 1}",
                "references.figures={a: 1} (Cannot merge a mapping with a list)",
            ),
            ("+grid.colour=red", "grid.colour: unknown key"),
            ("grid.layouts=[{tp:1,pp:1}]", "grid.layouts[0]: missing key 'ep'"),
            ("grid.tiles=[]", "grid.tiles=[]: give at least one"),
            ("grid.layouts=[]", "grid.layouts=[]: give at least one"),
            ("grid.warps=[]", "grid.warps=[]: give at least one"),
            ("backend.cutlass.stages=[]", "backend.cutlass.stages=[]: give 'auto'"),
            ("backend.cutlass.dtype_by_arch.sm_90=fp16", "dtype_by_arch.sm_90='fp16': allowed"),
            (
                "backend.cutlass.extra_stages.0.arch=sm_121",
                "backend.cutlass.extra_stages[0].arch='sm_121': allowed: sm_90, sm_100, sm_120",
            ),
            (
                "backend.cutlass.extra_stages.0.stages=[0]",
                "backend.cutlass.extra_stages[0].stages[0]=0: must be at least 1",
            ),
            (
                "backend.cutlass.extra_stages.0.stages=[auto]",
                "backend.cutlass.extra_stages[0].stages[0]='auto': expected an integer",
            ),
            (
                "backend.cutlass.extra_stages.0.stages=[]",
                "extra_stages[0].stages=[]: give at least one",
            ),
            (
                "backend.cutlass.extra_stages.0.epilogues=[fused]",
                "backend.cutlass.extra_stages[0].epilogues[0]='fused': allowed: default, finalize",
            ),
            (
                "backend.cutlass.extra_stages=[{arch:sm_120}]",
                "extra_stages[0]: missing key 'tiles'",
            ),
            ("model.shared_experts=-1", "model.shared_experts=-1: must be at least 0"),
            (
                "bench.collective_sweep_factor=0",
                "bench.collective_sweep_factor=0: must be at least 1",
            ),
            ("bench.step_moe_layers=0", "bench.step_moe_layers=0: must be at least 1"),
            (
                "bench.kernel_timeout_s=0",
                "bench.kernel_timeout_s=0: must be more than 0 and at most 604,800",
            ),
            ("bench.zipf_alpha=-1", "bench.zipf_alpha=-1: must be more than 0"),
            ("bench.collective_sweep_max_bytes=8", "collective_sweep_max_bytes=8: less than"),
            ("bench.step_runner=cublas", "bench.step_runner='cublas': allowed: auto"),
        ]
    ),
)
def test_bad_input_is_one_line_naming_the_value(override, message):
    with pytest.raises(ConfigError) as err:
        compose([override])
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_a_sweep_with_no_kernel_backend_is_refused():
    with pytest.raises(ConfigError, match="triton and cutlass are both disabled"):
        compose(["backend.triton.enabled=false", "backend.cutlass.enabled=false"])


def test_unknown_hardware_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        compose(["grid.targets=[h300]"])
    for name in ("h200", "rtx_pro_6000", "b200", "a100"):
        assert name in str(err.value)


def test_hydra_unknown_group_option_lists_choices():
    with pytest.raises(ConfigError) as err:
        compose(["model=glm9"])
    assert "glm5" in str(err.value) and "\n" not in str(err.value)


def test_parse_overrides_accepts_list_and_json_string():
    assert parse_overrides(None) == []
    assert parse_overrides(["a=1", "b=2"]) == ["a=1", "b=2"]
    assert parse_overrides('["grid.batch=[16,32]"]') == ["grid.batch=[16,32]"]
    assert parse_overrides("model=glm5") == ["model=glm5"]
    with pytest.raises(ConfigError):
        parse_overrides("[not json")


# Typed config (tilesweep.settings): every refusal is one line that starts with the dotted key.
@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("bench.kernel_timeout_s=inf", "bench.kernel_timeout_s=inf"),
        ("bench.zipf_alpha=nan", "bench.zipf_alpha=nan"),
        ("bench.power_period_s=-inf", "bench.power_period_s=-inf"),
        ("deployment.kernel_gap_us=nan", "deployment.kernel_gap_us=nan"),
        ("backend.fused_moe.graph_fill_ms=inf", "backend.fused_moe.graph_fill_ms=inf"),
        ("hardware.memory_bandwidth_gbs=inf", "hardware.memory_bandwidth_gbs=inf"),
    ],
)
def test_nan_and_inf_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert str(err.value) == f"{key}: must be a finite number"


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_in_a_hardware_file_are_refused(tmp_path, value):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    path = conf / "hardware" / "l40s.yaml"
    text = path.read_text()
    assert "\nmemory_gb: " in text
    head, tail = text.split("\nmemory_gb: ", 1)
    path.write_text(f"{head}\nmemory_gb: {value} #{tail}")
    with pytest.raises(ConfigError) as err:
        compose([], conf)
    text = str(err.value)
    assert text.startswith("hardware[l40s].memory_gb=") and "must be a finite number" in text
    assert "\n" not in text


@pytest.mark.parametrize(
    "key",
    fast_sample(
        [
            "colour",
            "model.colour",
            "model.attention.colour",
            "grid.colour",
            "grid.tiles[0].colour",
            "grid.layouts[0].colour",
            "bench.colour",
            "deployment.colour",
            "hardware.colour",
            "backend.triton.colour",
            "backend.torch.colour",
            "backend.cutlass.colour",
            "backend.cutlass.extra_stages[0].colour",
            "backend.fused_moe.colour",
            "backend.fused_moe.space.colour",
        ]
    ),
)
def test_an_unknown_key_is_refused_in_every_group(key):
    override = "+" + key.replace("[0]", ".0") + "=red"
    with pytest.raises(ConfigError) as err:
        compose([override])
    text = str(err.value)
    assert text.startswith(f"{key}: unknown key; allowed: ") and "\n" not in text


@pytest.mark.parametrize(
    "key",
    fast_sample(
        [
            "bench.warmup",
            "model.hidden",
            "model.attention.heads",
            "grid.stages[0]",
            "grid.tiles[0].m",
            "deployment.context_len",
            "hardware.cc",
            "backend.fused_moe.finalists",
        ]
    ),
)
def test_a_bool_where_an_integer_is_expected_is_refused(key):
    dotted = key.replace("[0]", ".0")
    with pytest.raises(ConfigError) as err:
        compose([f"{dotted}=true"])
    assert str(err.value) == f"{key}=True: expected an integer"


def test_an_unknown_hardware_is_refused_as_the_readme_quotes():
    with pytest.raises(ConfigError) as err:
        compose(["grid.targets=[h300]"])
    assert str(err.value) == (
        "grid.targets[0]='h300': unknown hardware; "
        "valid: a100, b200, h100, h200, l40s, rtx_5090, rtx_pro_6000"
    )
