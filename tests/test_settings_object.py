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
