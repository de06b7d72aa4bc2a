"""docs/backends.md is a recipe: its steps, followed as written, add a working backend."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys

import pytest
import yaml
from conftest import ROOT

from tilesweep import backends, grid
from tilesweep.config import compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.stages.build import build_kernel
from tilesweep.stages.launch import launch_row

DOC = ROOT / "docs" / "backends.md"


def recipe_blocks() -> dict[str, str]:
    """Return the backend recipe's fenced blocks whose first line names a file, by that file's
    path (the engine recipe after it: tests/test_engines_doc.py)."""
    text = DOC.read_text().split("\n## Adding an engine")[0]
    return dict(re.findall(r"^```\w+ (\S+)\n(.*?)^```", text, re.M | re.S))


@pytest.fixture
def recipe(tmp_path):
    """Follow the doc's three steps in a copy of conf/; yield the conf folder, the backend's name
    and its settings file; unregister the backend afterwards."""
    blocks = recipe_blocks()
    (module_path,) = [p for p in blocks if p.startswith("src/tilesweep/backends/")]
    (settings_path,) = [p for p in blocks if p.startswith("conf/backend_settings/")]
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    # Step 1: the module, imported as the registry's discovery imports its own modules.
    module_file = tmp_path / "doc_backend.py"
    module_file.write_text(blocks[module_path])
    before = {b.name for b in backends.registered()}
    spec = importlib.util.spec_from_file_location("doc_backend", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_backend"] = module
    spec.loader.exec_module(module)
    (name,) = {b.name for b in backends.registered()} - before
    try:
        # Step 2: its settings file.
        (conf / settings_path.removeprefix("conf/")).write_text(blocks[settings_path])
        # Step 3: its line under the backend group's defaults, before _self_.
        group = conf / "backend" / "all.yaml"
        text = group.read_text()
        assert "  - _self_\n" in text
        group.write_text(
            text.replace("  - _self_\n", blocks["conf/backend/all.yaml"] + "  - _self_\n")
        )
        yield conf, name, yaml.safe_load(blocks[settings_path])
    finally:
        backends.unregister(name)
        sys.modules.pop("doc_backend", None)


def test_the_doc_holds_the_three_steps():
    paths = recipe_blocks()
    assert any(p.startswith("src/tilesweep/backends/") for p in paths)
    assert any(p.startswith("conf/backend_settings/") for p in paths)
    assert "conf/backend/all.yaml" in paths


def test_the_recipe_registers_a_backend_with_validated_settings(recipe):
    conf, name, section = recipe
    assert name in [b.name for b in backends.registered()]
    settings = compose_settings(["experiment=tiny"], conf_dir=conf)
    mine = settings.backend.section(name)  # its own model, read by attribute
    assert type(mine) is backends.get(name).settings_model
    assert {key: getattr(mine, key) for key in section} == section
    assert name in [b.name for b in backends.enabled(settings)]
    off = compose_settings(["experiment=tiny", f"backend.{name}.enabled=false"], conf_dir=conf)
    assert name not in [b.name for b in backends.enabled(off)]
    with pytest.raises(ConfigError, match=rf"backend\.{name}\.warps: unknown key"):
        compose(["experiment=tiny", f"+backend.{name}.warps=4"], conf_dir=conf)


def test_the_recipe_backend_is_built_and_launch_checked(recipe, tmp_path):
    conf, name, _ = recipe
    settings = compose_settings(["experiment=tiny"], conf_dir=conf)
    launches = grid.launch_cells(settings)
    mine = launches[launches["backend"] == name]
    assert len(mine) > 0
    assert set(mine["target"]) == set(settings.grid.targets)
    cell = mine.iloc[0].to_dict()
    build_cell = {k: cell[k] for k in grid.build_cells(settings).columns}
    record = build_kernel(json.dumps(build_cell), str(tmp_path / "build" / "build.json"))
    assert record["status"] == "ok" and record["source"] == "model"
    row = launch_row(cell, settings.as_dict()["catalog"][cell["target"]], record)
    assert row["status"] in {"ok", "launch"} and row["smem_bytes"] == record["smem_bytes"]


def test_a_section_without_a_model_is_an_unknown_backend(recipe):
    conf, name, _ = recipe
    cls = backends.get(name).__class__
    backends.unregister(name)
    cls.settings_model = None  # the old docs' `schema` dict did this
    backends.register(cls)
    with pytest.raises(ConfigError, match=rf"backend\.{name}: unknown backend"):
        compose(["experiment=tiny"], conf_dir=conf)
