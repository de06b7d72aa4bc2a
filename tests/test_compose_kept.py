"""The test processes keep each composition (conftest.py): a kept one is handed out as a copy,
and an edited config file composes afresh, as a new process would compose it."""

from __future__ import annotations

import shutil

import pytest
from conftest import ROOT

from tilesweep.config import compose
from tilesweep.errors import ConfigError


def test_a_kept_composition_is_a_copy_and_an_edited_file_composes_afresh(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    first = compose(["references=none"], conf)
    first["model"]["hidden"] = 1  # one caller's change reaches no other caller
    first["catalog"]["h200"]["memory_bandwidth_gbs"] = 1
    again = compose(["references=none"], conf)
    assert again["model"]["hidden"] == 6144
    assert again["catalog"]["h200"]["memory_bandwidth_gbs"] == 4800
    hardware = conf / "hardware" / "h200.yaml"
    hardware.write_text(
        hardware.read_text().replace("memory_bandwidth_gbs: 4800", "memory_bandwidth_gbs: 4801")
    )
    assert compose(["references=none"], conf)["catalog"]["h200"]["memory_bandwidth_gbs"] == 4801
    model = conf / "model" / "glm5.yaml"
    model.write_text(model.read_text().replace("hidden: 6144", "hidden: 6144.5"))
    with pytest.raises(ConfigError, match="model.hidden"):  # a refusal is composed every time
        compose(["references=none"], conf)
    with pytest.raises(ConfigError, match="model.hidden"):
        compose(["references=none"], conf)
