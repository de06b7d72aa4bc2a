"""The typed settings object: compose_settings() gives the validated RootSettings, and its plain
containers are compose()'s, key for key and byte for byte as JSON (the rules' rerun keys)."""

import json

import pytest

from tilesweep import grid
from tilesweep.config import CONF_DIR, compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.settings import HardwareSpec, RootSettings

OVERRIDE_SETS = [
    [],
    ["hardware=b200"],
    ["model=deepseek_v3"],
    ["experiment=tiny"],
    *(
        [["experiment=h200_example"]]
        if (CONF_DIR / "experiment" / "h200_example.yaml").exists()
        else []
    ),
]


@pytest.mark.parametrize("overrides", OVERRIDE_SETS, ids=lambda o: " ".join(o) or "default")
def test_as_dict_is_the_plain_config(overrides):
    plain = compose(overrides)
    settings = compose_settings(overrides)
    assert isinstance(settings, RootSettings)
    dumped = settings.as_dict()
    assert dumped == plain
    # JSON is the rerun key: 900 must not come back as 900.0, nor an unset key as its default
    assert grid.canonical(dumped) == grid.canonical(plain)
    assert json.dumps(dumped, sort_keys=True) == json.dumps(plain, sort_keys=True)
    # a section written straight from the model is the same JSON as its plain mapping
    for key in ("model", "bench", "deployment", "engine", "grid", "hardware", "catalog"):
        section = getattr(settings, key)
        assert grid.canonical({key: section}) == grid.canonical({key: plain[key]})
    layouts = {"layouts": settings.grid.layouts}  # a list of models inside a plain mapping
    assert grid.canonical(layouts) == grid.canonical({"layouts": plain["grid"]["layouts"]})


@pytest.mark.parametrize("overrides", OVERRIDE_SETS, ids=lambda o: " ".join(o) or "default")
def test_a_rule_param_reads_back_as_the_same_settings(overrides):
    settings = compose_settings(overrides)
    text = grid.canonical(settings)
    # JSON writes the GPU counts of by_gpus as strings, which the model refuses: from_json
    # restores them, so the param validates to the same object and writes the same text.
    with pytest.raises(ValueError):
        RootSettings.model_validate(json.loads(text))
    back = RootSettings.from_json(text)
    assert back.as_dict() == settings.as_dict()
    assert grid.canonical(back) == text
    ar = back.catalog["h200"].interconnect_model.topologies["nvswitch"].all_reduce
    assert list(ar.by_gpus) == sorted(ar.by_gpus) and all(type(n) is int for n in ar.by_gpus)


def test_typed_access():
    settings = compose_settings(["hardware=b200"])
    assert settings.hardware.name == "b200"
    assert settings.model.hidden == compose(["hardware=b200"])["model"]["hidden"]
    assert all(isinstance(spec, HardwareSpec) for spec in settings.catalog.values())
    assert settings.catalog["b200"].arch == settings.hardware.arch


def test_refusals_stay_one_line():
    with pytest.raises(ConfigError) as err:
        compose_settings(["bench.kernel_timeout_s=-1"])
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("bench.kernel_timeout_s=-1")


def _old_tune_json(plain: dict) -> str:
    """Return the tune rules' param as Sweep wrote it from the plain config before the typed one."""
    from tilesweep import backends

    return grid.canonical(
        {
            "model": plain["model"],
            "grid": {"layouts": plain["grid"]["layouts"]},
            "backend": {  # each enabled tuner's own section
                b.name: plain["backend"][b.name]
                for b in backends.registered()
                if b.tuner and plain["backend"].get(b.name, {}).get("enabled")
            },
            "bench": {k: plain["bench"][k] for k in ("zipf_alpha", "seed")},
            "catalog": plain["catalog"],
        }
    )


@pytest.mark.parametrize("kernel_list", ["lean", "engine"])
def test_sweep_params_are_the_plain_configs_json(kernel_list):
    from tilesweep.pipeline import Sweep

    # planned for one H200 (no GPU needed): the GPU-only params (tuning, the step's tables)
    overrides = ["device=h200x1", f"bench.step_kernel_list={kernel_list}"]
    sweep = Sweep(overrides, CONF_DIR)
    plain = compose(overrides)
    assert sweep.settings_json() == grid.canonical(plain)
    assert sweep.tune_settings_json() == _old_tune_json(plain)
    dep = plain["deployment"]
    assert sweep.check_settings_json() == grid.canonical(
        {
            "model": plain["model"],
            "deployment": {k: dep.get(k) for k in ("fit_batches", "attention_table")},
        }
    )
    layout = sweep.layouts["layout"].iloc[0]
    cell = json.loads(sweep.layout_step_cell(layout))
    assert grid.canonical(cell["model"]) == grid.canonical(plain["model"])
    assert grid.canonical(cell["bench"]) == grid.canonical(
        {k: v for k, v in plain["bench"].items() if k in cell["bench"]}
    )
    if kernel_list == "engine":
        assert grid.canonical(cell["engine"]) == grid.canonical(plain["engine"])
    kernel = sweep.kernels["kernel"].iloc[0]
    bench = json.loads(sweep.bench_cell(kernel))["bench"]  # 900 read back stays 900, not 900.0
    assert grid.canonical(bench) == grid.canonical(plain["bench"])
