"""docs/backends.md's engine recipe: its steps, followed as written, add an engine that is listed
and accepted in settings, whose wheel is read at its data file's paths, whose config files are
named by its own function, whose rows are produced, and whose kernel is checked on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT

from tilesweep import backends
from tilesweep.config import compose, compose_settings
from tilesweep.errors import ConfigError
from tilesweep.fused_moe.engines import dropins, vllm, wheels
from tilesweep.fused_moe.engines.base import Engine, get, load_data, names, unregister

DOC = ROOT / "docs" / "backends.md"
FOLDER = "src/tilesweep/fused_moe/engines/"
SETTINGS = "conf/backend_settings/fused_moe.yaml"
VLLM_KEPT = ROOT / wheels.FOLDER / "vllm-0.33.0"  # tools/fetch_engine_kernels.py makes it


def recipe_blocks() -> dict[str, str]:
    """Return the engine recipe's fenced blocks whose first line names a file, by that path."""
    text = DOC.read_text().split("\n## Adding an engine")[1]
    return dict(re.findall(r"^```\w+ (\S+)\n(.*?)^```", text, re.M | re.S))


def _merge(base: dict, added: dict) -> dict:
    """Return base with the recipe's entries added: lists extended, mappings updated."""
    out = dict(base)
    for key, value in added.items():
        if isinstance(value, list):
            out[key] = [*base[key], *value]
        elif isinstance(value, dict):
            out[key] = {**base[key], **value}
        else:
            raise AssertionError(f"{key}: the recipe adds entries to lists and mappings only")
    return out


@pytest.fixture
def recipe(tmp_path):
    """Follow the recipe's three steps (the module and its data file in a folder of their own,
    the settings in a copy of conf/); yield what they made; unregister the engine afterwards."""
    blocks = recipe_blocks()
    (module_path,) = [p for p in blocks if p.startswith(FOLDER) and p.endswith(".py")]
    (data_path,) = [p for p in blocks if p.startswith(FOLDER) and p.endswith(".yaml")]
    name = Path(module_path).stem
    assert Path(data_path).stem == name and name not in names()
    folder = tmp_path / "engine"
    folder.mkdir()
    # Steps 1 and 2: the module and its data file, imported as the registry imports its own.
    (folder / Path(data_path).name).write_text(blocks[data_path])
    module_file = folder / Path(module_path).name
    module_file.write_text(blocks[module_path])
    spec = importlib.util.spec_from_file_location(f"doc_engine_{name}", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        # Step 3: its entries in the fused-MoE settings.
        conf = tmp_path / "conf"
        shutil.copytree(ROOT / "conf", conf)
        target = conf / SETTINGS.removeprefix("conf/")
        merged = _merge(yaml.safe_load(target.read_text()), yaml.safe_load(blocks[SETTINGS]))
        target.write_text(yaml.safe_dump(merged, sort_keys=False))
        yield SimpleNamespace(
            name=name, conf=conf, module=module_file, data=folder / Path(data_path).name
        )
    finally:
        unregister(name)
        sys.modules.pop(spec.name, None)


def test_the_doc_holds_the_engine_steps():
    paths = recipe_blocks()
    assert [p for p in paths if p.startswith(FOLDER)] == [
        f"{FOLDER}vfork.py",
        f"{FOLDER}vfork.yaml",
    ]
    assert SETTINGS in paths


def test_every_shipped_engine_is_a_module_and_a_data_file_that_ship():
    declared = json.dumps(_package_data())
    for name in names():
        assert (ROOT / FOLDER / f"{name}.py").is_file(), name
        assert isinstance(get(name), Engine) and get(name).data == load_data(
            ROOT / FOLDER / f"{name}.yaml"
        )
    assert '"tilesweep.fused_moe.engines": ["*.yaml"]' in declared


def _package_data() -> dict:
    """Return pyproject.toml's [tool.setuptools.package-data]."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]


def test_the_recipe_engine_is_listed_and_its_settings_accepted(recipe):
    assert recipe.name in names() and get(recipe.name).name == recipe.name
    assert get(recipe.name).data == load_data(recipe.data)
    settings = compose_settings(["experiment=tiny"], conf_dir=recipe.conf)
    fused = settings.backend.fused_moe
    assert fused.engine_versions[recipe.name] == "1.0.0" and recipe.name in fused.engines
    with pytest.raises(ConfigError, match=r"engine_versions\.nowhere: unknown engine"):
        compose(["+backend.fused_moe.engine_versions.nowhere=v1"], conf_dir=recipe.conf)
    with pytest.raises(ConfigError, match=rf"engine_defaults\.{recipe.name}: missing"):
        compose([f"~backend.fused_moe.engine_defaults.{recipe.name}"], conf_dir=recipe.conf)


# A small wheel of the recipe's engine: its kernel module (a toy kernel and vLLM-style naming),
# its device-name helper (importing current_platform from the data file's platform_module) and
# one shipped table, each where the data file says.
KERNEL_MODULE = """
import triton


@triton.jit
def fused_moe_kernel(x_ptr, n):
    pass


def get_config_file_name(E: int, N: int, dtype: str | None, block_shape=None) -> str:
    device_name = get_device_name_as_file_name()
    dtype_selector = "" if not dtype else f",dtype={dtype}"
    block = ("" if not block_shape else f",block_shape={block_shape}").replace(" ", "")
    return f"E={E},N={N},device_name={device_name}{dtype_selector}{block}.json"
"""
PLATFORM = """
import re


@cache
def get_device_name_as_file_name(device_id: int = 0) -> str:
    from {platform} import current_platform

    return re.sub(r"[\\s/]+", "_", current_platform.get_device_name(device_id))
"""
TABLE = {"1": {"BLOCK_SIZE_M": 16}, "64": {"BLOCK_SIZE_M": 64}}


def _wheel(folder: Path, name: str, kernel_module: str = KERNEL_MODULE) -> Path:
    """Write the engine's 1.0.0 wheel at its data file's paths; return it."""
    data = get(name).data
    path = folder / f"{data.distribution}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(data.kernel.module, kernel_module)
        platform = PLATFORM.replace("{platform}", data.platform_module)
        archive.writestr(data.namers[0].module, platform)
        table = f"{data.tables.folder}E=8,N=16,device_name=X.json"
        archive.writestr(table, json.dumps(TABLE))
    return path


def test_its_wheel_is_read_where_its_data_file_says_and_files_named_by_its_own_function(
    recipe, tmp_path
):
    name, kept = recipe.name, tmp_path / "kept"
    out = wheels.extract(name, _wheel(tmp_path, name), kept)
    assert out == kept / f"{name}-1.0.0"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["functions"] == ["fused_moe_kernel"]
    assert manifest["module"] == get(name).data.kernel.module
    file = wheels.config_file_name(name, "1.0.0", 8, 16, "fp8_block", "Big GPU", kept)
    assert file == "E=8,N=16,device_name=Big_GPU,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert wheels.config_file_name(name, "1.0.0", 8, 16, "bf16", "X", kept) == (
        "E=8,N=16,device_name=X.json"
    )
    table, where = wheels.shipped_table(name, "1.0.0", "E=8,N=16,device_name=X.json", "3.6", kept)
    assert table == {1: {"BLOCK_SIZE_M": 16}, 64: {"BLOCK_SIZE_M": 64}}
    assert where.startswith(get(name).data.tables.folder)
    assert dropins.dropin_path(name, "1.0.0", file, "3.6.0") == f"{name}-1.0.0/{file}"
    with pytest.raises(ValueError, match=f"a vllm wheel, not {name}"):
        other = tmp_path / "vllm-1.0.0-py3-none-any.whl"
        shutil.copy(_wheel(tmp_path, name), other)
        wheels.extract(name, other, kept)


def test_its_rows_are_produced(recipe):
    name = recipe.name
    settings = compose_settings(["experiment=tiny"], conf_dir=recipe.conf)
    rows = backends.get("fused_moe").decoder.table_rows(settings, pd.DataFrame())
    mine = rows[rows["runner"] == f"engine:{name}"]
    assert mine["status"].tolist() == ["skipped"]
    assert mine["reason"].tolist() == [f"{name} is not installed"]
    # Its launch lays a batch out as the engine it kept (vLLM's, on the CPU).
    ids = torch.tensor([[3, 1], [1, 0], [2, 3]], dtype=torch.int32)
    for got, want in zip(get(name).blocks(ids, 4, 4), vllm.vllm_blocks(ids, 4, 4), strict=True):
        assert torch.equal(got, want)


CHECK = """
import importlib.util, json, sys
from pathlib import Path
from tilesweep.config import compose_settings
from tilesweep.fused_moe.engines import check, wheels
from tilesweep.fused_moe.engines.timer import Method

module, wheel, conf, name = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("doc_engine", module)
sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules[spec.name])
wheels.extract(name, wheel)  # into ./.engine_kernels, where the timer loads it from
settings = compose_settings(["model.hidden=256", "model.top_k=2"], conf_dir=conf)
config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
          "num_warps": 4, "num_stages": 2}
path = Path("E=8,N=128,device_name=NVIDIA_H200.json")
path.write_text(json.dumps({"1": config}))
rows = check.check_file(str(path), settings, 2, name, Method("cpu", check_experts=2))
print(rows.to_json(orient="records"))
"""


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's vLLM")
def test_its_kernel_is_checked_on_the_cpu(recipe, tmp_path):
    # The recipe's engine kept vLLM's kernel: its wheel carries vLLM 0.33's, verbatim.
    kernel = (VLLM_KEPT / "kernel.py").read_text()
    wheel = _wheel(tmp_path, recipe.name, kernel + KERNEL_MODULE.split("\n\n\n")[-1])
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    args = [str(recipe.module), str(wheel), str(recipe.conf), recipe.name]
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, *args], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = pd.DataFrame(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert set(rows["engine"]) == {recipe.name} and set(rows["routing"]) == {"uniform", "zipf"}
    assert rows["kernel_from"].str.startswith(f"{recipe.name}-1.0.0-py3-none-any.whl").all()
    assert set(rows["config_from"]) == {"file", "baseline", "baseline_again"}
    assert (rows["rel_err"] < 1e-2).all() and rows["timing"].eq("cpu (Triton interpreter)").all()
