"""The engines' own kernels: extracted from a wheel with their hashes, loaded back, laid out and
launched as vLLM launches them, and an engine config file read as the engines name it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import fast_sample

from tilesweep.errors import ConfigError
from tilesweep.fused_moe.engines import check, dropins, search, vllm, wheels
from tilesweep.fused_moe.engines.base import data
from tilesweep.fused_moe.engines.base import names as engine_names
from tilesweep.fused_moe.engines.check import judge, read_file
from tilesweep.fused_moe.section import EngineDefaults, Rule, Space

ROOT = Path(__file__).resolve().parents[1]
# The names vLLM's and SGLang's own get_config_file_name give every format (made by
# `tools/fetch_engine_kernels.py --names tests/data/engine_names.json` from the pinned wheels).
NAMES = json.loads((ROOT / "tests/data/engine_names.json").read_text())
MODULE = """
import torch
from vllm.platforms import current_platform  # never executed: only the kernels are taken
from vllm.triton_utils import tl, triton


def not_a_kernel(x):
    return x + 1


@triton.jit
def scale_row(x, factor):
    return x * factor


@triton.jit
def fused_moe_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, scale_row(tl.load(x_ptr + offs, mask=mask), 2.0), mask=mask)


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
    from vllm.platforms import current_platform

    return re.sub(r"[\\s/]+", "_", current_platform.get_device_name(device_id))
"""
TABLE = {"1": {"BLOCK_SIZE_M": 16}, "64": {"BLOCK_SIZE_M": 64}, "triton_version": "3.6.0"}


def _wheel(tmp_path: Path, version: str = "9.9.1") -> Path:
    """Write a small vllm wheel holding MODULE where vLLM keeps its fused-MoE kernel."""
    path = tmp_path / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(data("vllm").kernel.module, MODULE)
        archive.writestr(data("vllm").namers[0].module, PLATFORM)
        archive.writestr(data("vllm").tables.folder + "E=8,N=16,device_name=X.json",
                         json.dumps(TABLE))  # fmt: skip
        archive.writestr("vllm/__init__.py", "")
    return path


def test_the_kernels_are_extracted_with_their_hashes_and_nothing_else(tmp_path):
    out = wheels.extract("vllm", _wheel(tmp_path), tmp_path / "kept")
    assert out == tmp_path / "kept" / "vllm-9.9.1"
    text = (out / "kernel.py").read_text()
    assert "def fused_moe_kernel" in text and "def scale_row" in text
    assert "not_a_kernel" not in text and "current_platform" not in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["functions"] == ["fused_moe_kernel", "scale_row"]
    assert manifest["version"] == "9.9.1" and manifest["wheel"].startswith("vllm-9.9.1")
    import hashlib

    assert manifest["kernel_py_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert manifest["module_sha256"] == hashlib.sha256(MODULE.encode()).hexdigest()
    # The shipped tables and the naming functions come along, hashed.
    table = json.dumps(TABLE).encode()
    assert manifest["tables"] == {"E=8,N=16,device_name=X.json": hashlib.sha256(table).hexdigest()}
    names = (out / "names.py").read_bytes()
    assert manifest["names_py_sha256"] == hashlib.sha256(names).hexdigest()
    assert b"def get_config_file_name" in names and b"def get_device_name_as_file_name" in names


def test_files_are_named_by_the_engines_own_function_and_its_shipped_table_found(tmp_path):
    kept = tmp_path / "kept"
    wheels.extract("vllm", _wheel(tmp_path), kept)
    name = wheels.config_file_name("vllm", "9.9.1", 8, 16, "fp8_block", "Big GPU", kept)
    assert name == "E=8,N=16,device_name=Big_GPU,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert "vllm.platforms" not in sys.modules  # the platform it was given is gone again
    table, where = wheels.shipped_table("vllm", "9.9.1", "E=8,N=16,device_name=X.json",
                                                "3.6.0", kept)  # fmt: skip
    assert table == {1: {"BLOCK_SIZE_M": 16}, 64: {"BLOCK_SIZE_M": 64}}
    assert where.startswith(data("vllm").tables.folder + "E=8,N=16,device_name=X.json (sha256")
    assert wheels.nearest(table, 20) == {"BLOCK_SIZE_M": 16}
    assert wheels.nearest(table, 40) == {"BLOCK_SIZE_M": 64}
    none, why = wheels.shipped_table("vllm", "9.9.1", "E=9.json", "3.6.0", kept)
    assert none is None and "default rule" in why
    shipped = kept / "vllm-9.9.1" / "configs" / "E=8,N=16,device_name=X.json"
    shipped.write_text("{}")
    with pytest.raises(LookupError, match="differs from its manifest"):
        wheels.shipped_table("vllm", "9.9.1", shipped.name, "3.6.0", kept)


def test_a_wheel_without_the_kernel_or_of_another_engine_is_refused(tmp_path):
    bare = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr(data("vllm").kernel.module, "def f():\n    pass\n")
    with pytest.raises(ValueError, match="has no @triton.jit fused_moe_kernel"):
        wheels.extract("vllm", bare, tmp_path)
    with pytest.raises(ValueError, match="a vllm wheel, not sglang"):
        wheels.extract("sglang", _wheel(tmp_path), tmp_path)


def test_a_wheel_that_is_not_a_zip_is_refused_naming_it(tmp_path):
    """C275: a damaged wheel (not a zip, or cut short) is a ValueError naming the wheel file and
    saying it is damaged, never a bare BadZipFile."""
    junk = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux1_x86_64.whl"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match=r"vllm-0\.33\.0-.*\.whl: not a zip file, so a damaged"):
        wheels.extract("vllm", junk, tmp_path / "out")
    cut = tmp_path / "vllm-1.0.0-py3-none-any.whl"
    cut.write_bytes(_wheel(tmp_path).read_bytes()[:60])
    with pytest.raises(ValueError, match="vllm-1.0.0-py3-none-any.whl: .*damaged"):
        wheels.extract("vllm", cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()


LOAD_AND_RUN = """
import json, sys, torch
from tilesweep.fused_moe.engines import wheels
kernel, where = wheels.load("vllm", "9.9.1", sys.argv[1])
x = torch.arange(10, dtype=torch.float32)
y = torch.zeros(10)
kernel[(3,)](x, y, 10, BLOCK=4)
print(json.dumps({"type": type(kernel).__name__, "where": where, "y": y.tolist()}))
"""


def test_an_extracted_kernel_loads_and_runs_and_a_changed_one_is_refused(tmp_path):
    kept = tmp_path / "kept"
    wheels.extract("vllm", _wheel(tmp_path), kept)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(kept)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["type"] in ("JITFunction", "InterpretedFunction") and got["where"].startswith(
        "vllm-9.9.1-py3-none-any.whl"
    )
    assert got["y"] == [2.0 * i for i in range(10)]
    kernel_py = kept / "vllm-9.9.1" / "kernel.py"
    kernel_py.write_text(kernel_py.read_text() + "\n# edited\n")
    with pytest.raises(LookupError, match="differs from its manifest"):
        wheels.load("vllm", "9.9.1", kept)
    with pytest.raises(LookupError, match="tools/fetch_engine_kernels.py makes it"):
        wheels.load("vllm", "9.9.2", kept)


def test_vllm_blocks_are_laid_out_as_vllm_lays_them_out():
    # M x top_k x 4 <= E: the naive path, one row block per routed pair and no alignment.
    ids = torch.tensor([[3, 1]], dtype=torch.int32)
    sorted_ids, experts, post = vllm.vllm_blocks(ids, 16, 64)
    assert sorted_ids is None and experts.tolist() == [3, 1] and post.tolist() == [2 * 16]
    # Else: sorted by expert, each run padded to BLOCK_SIZE_M with the sentinel (pairs), the
    # buffers sized pairs + E x (BLOCK_SIZE_M - 1) and -1 past the used blocks.
    ids = torch.tensor([[0, 2], [2, 1], [0, 2]], dtype=torch.int32)
    sorted_ids, experts, post = vllm.vllm_blocks(ids, 4, 3)
    assert sorted_ids.numel() == 6 + 3 * 3 and int(post) == 12
    assert sorted_ids[:12].tolist() == [0, 4, 6, 6, 3, 6, 6, 6, 1, 2, 5, 6]
    assert (sorted_ids[12:] == 6).all()
    assert experts.tolist() == [0, 1, 2, -1]
    # Fewer pairs than experts: the buffers are pairs x BLOCK_SIZE_M.
    ids = torch.tensor([[5, 7], [1, 5]], dtype=torch.int32)
    sorted_ids, _, _ = vllm.vllm_blocks(ids, 8, 12)
    assert sorted_ids.numel() == 4 * 8


KEPT = ROOT / wheels.FOLDER / "vllm-0.33.0"
VLLM_RUN = """
import json, sys, torch
from tilesweep.fused_moe.engines.wheels import load
from tilesweep.fused_moe.engines import formats as ec, vllm as vk
from tilesweep.fused_moe.engines.base import get
from tilesweep.measure.gemm_case import rel_error
kernel, _ = load("vllm", "0.33.0")
out = {}
for fmt in sys.argv[1:]:
    for experts, m in ((64, 2), (6, 5)):
        problem = {"experts": experts, "n": 160, "hidden": 256, "top_k": 2}
        gen = torch.Generator().manual_seed(1)
        w = ec.make_weights(problem, fmt, "cpu", gen, dtype=torch.float16)
        batch = ec.make_batch(problem, w, m, "uniform", 1.2, "cpu", gen, dtype=torch.float16)
        config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                  "num_warps": 4, "num_stages": 2}
        blocks = vk.vllm_blocks(batch.topk_ids, 16, experts)
        for gemm, top_k in (("gate_up", 2), ("down", 1)):
            weights = None if gemm == "gate_up" else batch.topk_weights
            get("vllm").launch(kernel, batch.a[gemm], w.w[gemm], batch.c[gemm], blocks, config,
                      top_k=top_k, topk_weights=weights, a_scale=batch.a_scale[gemm],
                      b_scale=w.scale[gemm], block_shape=ec.block_shape(fmt))
            ref = ec.reference(problem, w, batch, gemm)
            out[f"{fmt}-{experts}-{m}-{gemm}"] = rel_error(batch.c[gemm], ref)
print(json.dumps(out))
"""


# A process of its own under the interpreter for each format: the fast tier runs bf16.
@pytest.mark.skipif(not KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's vLLM 0.33.0")
@pytest.mark.parametrize("fmt", fast_sample(["bf16", "fp8", "fp8_block"]))
def test_vllms_own_kernel_launched_as_vllm_does_matches_the_reference(fmt):
    # bf16 (fp16 here: the interpreter mis-stores bf16), fp8 per tensor and fp8 block-scaled,
    # on the naive path and the aligned one; K = 160 leaves a partial 128-wide scale block.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", VLLM_RUN, fmt], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errors) == 4 and all(e < 1e-2 for e in errors.values()), errors


def test_an_engine_config_file_is_read_by_its_name(tmp_path):
    path = tmp_path / "E=256,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    path.write_text(json.dumps({"triton_version": "3.6.0", "1": {"BLOCK_SIZE_M": 16}}))
    shape, configs = read_file(path)
    assert shape == {"experts": 256, "n": 2048, "format": "fp8"}
    assert configs == {1: {"BLOCK_SIZE_M": 16}}
    # The engines' own names of each format (vendored from their functions), read back to it.
    for entry in NAMES:
        for row in entry["names"]:
            (tmp_path / row["name"]).write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}}))
            got = read_file(tmp_path / row["name"])[0]
            assert got == {"experts": row["experts"], "n": row["n"], "format": row["format"]}
    other = tmp_path / "E=8,N=16,device_name=X,dtype=int8_w8a16.json"
    other.write_text("{}")
    with pytest.raises(ConfigError, match="not a format launched here"):
        read_file(other)
    bad = tmp_path / "tuned.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="not an engine config file name"):
        read_file(bad)
    empty = tmp_path / "E=8,N=16,device_name=X.json"
    empty.write_text("{}")
    with pytest.raises(ConfigError, match="expected"):
        read_file(empty)


def _timed(median: float, spread: float) -> dict:
    return {"time_ms": median, "time_p10_ms": median - spread, "time_p90_ms": median + spread}


def test_a_config_is_exported_only_where_it_beats_the_default_beyond_the_noise():
    routings = ["uniform", "zipf"]
    default = "m16n64k128-g1-w4-s4"
    # Faster on both routings, beyond both spreads: exported.
    finals = {default: {r: _timed(1.0, 0.01) for r in routings},
              "fast": {r: _timed(0.9, 0.01) for r in routings}}  # fmt: skip
    assert search.export_pick(finals, default, routings)[0] == "fast"
    # Faster in the median but inside the noise on one routing: the default is exported.
    finals["fast"]["zipf"] = _timed(0.985, 0.01)
    chosen, why = search.export_pick(finals, default, routings)
    assert chosen == default and "within the noise" in why
    # Much faster on one routing, slower on the other: the default.
    finals["fast"] = {"uniform": _timed(0.5, 0.01), "zipf": _timed(1.2, 0.01)}
    assert search.export_pick(finals, default, routings)[0] == default
    # A config not timed on every routing never counts; an untimed default is exported.
    finals["fast"] = {"uniform": _timed(0.5, 0.01)}
    assert search.export_pick(finals, default, routings)[0] == default
    assert search.export_pick({"fast": finals["fast"]}, default, ["uniform"])[0] == default


def test_neighbours_change_one_parameter_and_block_fp8_takes_k_at_the_block():
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
              "num_warps": 4, "num_stages": 3}  # fmt: skip
    values = {"BLOCK_SIZE_M": [16, 32], "BLOCK_SIZE_N": [64, 128], "BLOCK_SIZE_K": [64, 128, 256],
              "GROUP_SIZE_M": [1], "num_warps": [4, 8], "num_stages": [3]}  # fmt: skip
    values = Space(**values)
    near = search.neighbours(config, values, "bf16")
    assert len(near) == 5  # M 32, N 128, K 64, K 256, 8 warps
    assert all(sum(c[k] != config[k] for k in config) == 1 for c in near)
    block = search.neighbours(config, values, "fp8_block")
    assert all(c["BLOCK_SIZE_K"] <= 128 for c in block) and len(block) == 4


def _key(m: int, timings: list[tuple[str, str, float]], baseline: str = "default") -> list:
    """Return one key's check rows (uniform routing) from (label, config, median)."""
    return [{"m": m, "routing": "uniform", "config_from": label, "config": config,
             "rel_err": 0.001, "baseline": baseline, **_timed(median, 0.005)}
            for label, config, median in timings]  # fmt: skip


def test_the_check_judges_against_the_baseline_beyond_its_noise_band():
    rows = [
        # the file holds the baseline's config: the same kernel, ratio 1; the two timings of
        # that one config are the noise band (1.0 against 0.98)
        *_key(1, [("file", "a", 1.0), ("baseline", "a", 1.0), ("baseline_again", "a", 0.98)]),
        # faster beyond the spreads and the band: won
        *_key(2, [("file", "b", 0.9), ("baseline", "a", 1.0), ("baseline_again", "a", 1.0)]),
        # slower: lost
        *_key(4, [("file", "c", 1.1), ("baseline", "a", 1.0), ("baseline_again", "a", 1.0)]),
        # faster beyond the spreads but inside a 15% band between two timings of one config
        *_key(8, [("file", "b", 0.9), ("baseline", "a", 1.0), ("baseline_again", "a", 1.15)]),
        # against a shipped table, the default rule timed beside it
        *_key(16, [("file", "b", 0.9), ("baseline", "s", 1.0), ("baseline_again", "s", 1.0),
                   ("default", "d", 0.8)], "shipped"),
    ]  # fmt: skip
    table = judge(pd.DataFrame(rows).reindex(columns=check.CHECK_COLUMNS))
    files = table[table["config_from"] == "file"].set_index("m")
    assert files.loc[1, "outcome"] == "same config" and files.loc[1, "x_baseline"] == 1.0
    assert files.loc[1, "noise_band"] == pytest.approx(1 / 0.98 - 1)
    assert files.loc[2, "outcome"] == "won" and files.loc[4, "outcome"] == "lost"
    assert files.loc[8, "outcome"] == "tie" and files.loc[8, "noise_band"] == pytest.approx(0.15)
    assert files.loc[16, "x_shipped"] == pytest.approx(1 / 0.9)
    assert files.loc[16, "x_default"] == pytest.approx(0.8 / 0.9)
    assert pd.isna(files.loc[2, "x_shipped"])  # no shipped table: a gap, not the default
    # Two draws: a key keeps the file's config only where it won on both.
    other = table.copy()
    other.loc[(other["m"] == 2) & (other["config_from"] == "file"), "outcome"] = "tie"
    assert check.decide([table, table])[2] and not check.decide([table, other])[2]


def test_an_export_is_the_engines_current_table_with_only_the_won_keys_changed():
    shape = {"experts": 256, "n": 256, "format": "fp8_block"}
    from tilesweep.fused_moe.space import SPACE_KEYS

    rules = EngineDefaults(**{key: [Rule(value=7)] for key in SPACE_KEYS})
    picks = {1: {"pick": 1}, 64: {"pick": 64}}
    shipped = {1: {"shipped": 1}, 48: {"shipped": 48}, 4096: {"shipped": 4096}}
    out = check.export_table(picks, {1: False, 64: True}, shipped, rules, shape)
    assert out == {"1": {"shipped": 1}, "48": {"shipped": 48}, "64": {"pick": 64},
                   "4096": {"shipped": 4096}}  # fmt: skip
    out = check.export_table(picks, {1: True}, None, rules, shape)
    assert out["1"] == {"pick": 1} and out["64"]["BLOCK_SIZE_M"] == 7  # the default rule's


def test_exported_names_are_the_engines_own_for_every_format_engine_and_version():
    from tilesweep.config import compose

    pinned = compose([])["backend"]["fused_moe"]["engine_versions"]
    vendored = {(t["engine"], t["version"]): t for t in NAMES}
    assert set(vendored) == set(pinned.items())  # regenerate the data when a pin moves
    for table in NAMES:
        got = {(r["format"], r["device"], r["experts"], r["n"]): r["name"] for r in table["names"]}
        assert {f for f, *_ in got} == {"bf16", "fp8", "fp8_block"}
        block = got["fp8_block", "NVIDIA H200", 256, 256]
        if table["engine"] == "vllm":  # vLLM 0.33 strips the space; H200 NVL loads H200's
            assert block.endswith("block_shape=[128,128].json")
            assert got["bf16", "NVIDIA H200 NVL", 256, 256] == got["bf16", "NVIDIA H200", 256, 256]
        else:
            assert block.endswith("block_shape=[128, 128].json")
        # Where the wheel is extracted here, the engine's own function still says the same.
        kept = ROOT / wheels.FOLDER / f"{table['engine']}-{table['version']}"
        if kept.is_dir():
            assert wheels.name_table(table["engine"], table["version"],
                                             ROOT / wheels.FOLDER) == table  # fmt: skip
    # Every drop-in kept in the example is named so, in the engine's own folder layout.
    names = {(t["engine"], t["version"]): {r["name"] for r in t["names"]} for t in NAMES}
    for path in (ROOT / "docs/examples/h200").rglob("E=*.json"):
        owner = next((p for p in path.parents if "-" in p.name and p.name.split("-")[0]
                      in engine_names()), None)  # fmt: skip
        if owner is None:
            continue  # not an engine's folder (e.g. a check's own copies)
        engine, version = owner.name.split("-", 1)
        assert path.name in names[engine, version], path
        triton = path.parent.name.removeprefix("triton_").replace("_", ".")
        want = dropins.dropin_path(engine, version, path.name, triton)
        assert path.relative_to(owner.parent).as_posix() == want


def test_no_engine_file_name_is_kept_twice_with_other_contents():
    seen = {}
    for path in (ROOT / "docs/examples/h200").rglob("E=*.json"):
        owner = next((p.name for p in path.parents if p.name.split("-")[0]
                      in engine_names()), "")  # fmt: skip
        seen.setdefault((owner, path.name), set()).add(path.read_bytes())
    assert all(len(contents) == 1 for contents in seen.values()), [
        key for key, contents in seen.items() if len(contents) > 1
    ]


def test_sglang_loads_the_table_of_its_triton_else_the_newest_other(tmp_path):
    path = tmp_path / "sglang-9.0.0-py3-none-any.whl"
    sglang_module = data("sglang").kernel.module
    namer = data("sglang").namers[0].module
    name = "E=8,N=16,device_name=X.json"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(sglang_module, MODULE)
        archive.writestr(
            namer,
            "def get_config_file_name(E, N, dtype, block_shape=None):\n"
            "    return f'E={E},N={N},device_name={get_device_name()}.json'\n",
        )
        for triton_dir in ("triton_3_1_0", "triton_3_4_0", "triton_3_10_0"):
            table = {"1": {"from": triton_dir}}
            archive.writestr(f"{data('sglang').tables.folder}{triton_dir}/{name}",
                             json.dumps(table))  # fmt: skip
    kept = tmp_path / "kept"
    wheels.extract("sglang", path, kept)
    assert wheels.config_file_name("sglang", "9.0.0", 8, 16, "bf16", "X", kept) == name
    own, where = wheels.shipped_table("sglang", "9.0.0", name, "3.4.0", kept)
    assert own == {1: {"from": "triton_3_4_0"}} and "triton_3_4_0/" in where
    newest, _ = wheels.shipped_table("sglang", "9.0.0", name, "3.6.0", kept)
    assert newest == {1: {"from": "triton_3_10_0"}}  # by version, not by string


def test_decode_timing_rotates_enough_weight_copies_to_pass_the_l2_three_times():
    from tilesweep.fused_moe.engines import timer as et

    for n, fmt in ((256, "fp8_block"), (256, "bf16"), (2048, "bf16"), (2048, "fp8")):
        problem = {"experts": 256, "n": n, "hidden": 6144, "top_k": 8}
        for l2 in (50 << 20, 60 << 20, 126 << 20):
            copies = et.weight_copies(problem, fmt, l2)
            assert copies >= 2 and et.l2_multiple(problem, fmt, l2, copies) >= et.L2_MULTIPLE
            assert et.l2_multiple(problem, fmt, l2, copies - 1) < et.L2_MULTIPLE or copies == 2
    # Capped by the device's free memory, and then the label and the reach say so.
    problem = {"experts": 256, "n": 256, "hidden": 6144, "top_k": 8}
    one = 256 * sum(et.expert_bytes(problem, "fp8").values())
    assert et.weight_copies(problem, "fp8", 60 << 20, free_bytes=int(4 * one / 0.6) + 4096) == 4
    assert et.timing_label("decode", 4) == "decode (cold L2, 4 weight copies)"
    assert et.timing_label("warm", 1) == "warm L2"


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the compiles may succeed")
def test_warm_keys_each_refused_compile_by_the_config_it_runs_and_its_batch():
    from tilesweep.fused_moe.engines import timer as et

    problem = {"experts": 8, "n": 128, "hidden": 256, "top_k": 2}
    wide = {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 64,
        "BLOCK_SIZE_K": 256,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 2,
    }
    failed = et.warm("vllm", "0.0.0", problem, "fp8_block", [(wide, 1), (wide, 4)], workers=1)
    # no GPU (or no extracted kernel): each job a refusal, named as the block-fp8 kernel runs it
    slug = "m16n64k128-g1-w4-s2"
    assert set(failed) == {(slug, 1), (slug, 4)} and all(failed.values())


def test_the_engines_block_fp8_defaults_are_their_rules():
    from itertools import product

    from tilesweep.config import compose, compose_settings
    from tilesweep.fused_moe import space
    from tilesweep.fused_moe.engines.base import FORMATS

    rules = compose([])["backend"]["fused_moe"]["engine_defaults"]
    vllm = {m: space.engine_default(rules["vllm"], m, 256, "fp8_block") for m in (1, 8, 16, 64, 65)}
    # vLLM 0.33 get_default_config, block-wise fp8 on CUDA.
    assert [vllm[m]["BLOCK_SIZE_N"] for m in (1, 8, 16)] == [64, 64, 128]
    assert [vllm[m]["BLOCK_SIZE_M"] for m in (64, 65)] == [16, 64]
    assert [vllm[m]["num_stages"] for m in (1, 8)] == [4, 3]
    assert [vllm[m]["GROUP_SIZE_M"] for m in (16, 64)] == [1, 32]
    assert all(c["BLOCK_SIZE_K"] == 128 and c["num_warps"] == 4 for c in vllm.values())
    # Per-tensor fp8 and bf16 keep their rules (the block rules do not reach them).
    assert space.engine_default(rules["vllm"], 1, 256, "fp8")["BLOCK_SIZE_N"] == 64
    assert space.engine_default(rules["vllm"], 16, 256, "fp8")["num_stages"] == 4
    sglang = space.engine_default(rules["sglang"], 1, 256, "fp8_block")
    # The typed rules (what the engine search reads) pick what the spec's rules pick.
    typed = compose_settings([]).backend.fused_moe.engine_defaults
    for engine, fmt, m in product(("vllm", "sglang"), FORMATS, (1, 8, 16, 64, 65, 4096)):
        assert space.engine_default(typed[engine], m, 256, fmt) == space.engine_default(
            rules[engine], m, 256, fmt
        ), (engine, fmt, m)
    assert sglang == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128,
                      "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}  # fmt: skip


def test_the_tune_engine_job_says_why_where_no_kernel_can_be_timed(tmp_path):
    from tilesweep.fused_moe.engines.search import tune_engine
    from tilesweep.pipeline import Sweep

    settings = Sweep(["experiment=tiny"], None).tune_settings_json()  # the rule's param
    summary, configs = tmp_path / "engine_vllm.csv", tmp_path / "engine_vllm"
    tune_engine(settings, "vllm", str(summary), str(configs))
    rows = pd.read_csv(summary)
    assert rows["status"].tolist() == ["skipped"] and "GPU" in rows["reason"][0]
    assert configs.is_dir() and not (tmp_path / "engine_vllm.partial").exists()


TABLES = ROOT / "docs/examples/h200/engine_tables"


@pytest.mark.skipif(not TABLES.is_dir(), reason="tools/import_engine_tables.sh not run yet")
def test_every_kept_drop_in_is_listed_with_its_ratios_and_contents():
    import hashlib

    rows = pd.read_csv(TABLES / "dropins.csv")
    exported = rows[rows["status"] == "exported"]
    files = {
        p.relative_to(TABLES / "export").as_posix(): p for p in TABLES.rglob("export/**/*.json")
    }
    assert set(exported["path"]) == set(files)
    for row in exported.itertuples():
        assert hashlib.sha256(files[row.path].read_bytes()).hexdigest() == row.sha256
        assert row.worst_x_baseline >= dropins.HELD_OUT_FLOOR
        assert row.timing.startswith("decode (cold L2")


DECIDE = """
import json, sys
from pathlib import Path
from tilesweep.config import compose_settings
from tilesweep.fused_moe.engines import dropins
from tilesweep.fused_moe.engines.timer import Method
out = Path(sys.argv[1])
settings = compose_settings(["model.hidden=256", "model.top_k=2"])
config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
          "num_warps": 4, "num_stages": 2}
pick = out / "picks_E=8,N=128,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
pick.write_text(json.dumps({"1": config}))
row, checks = dropins.decide_file("vllm", pick, settings, out, 3, Method("cpu", check_experts=2))
print(json.dumps({k: str(v) for k, v in row.items()}))
print(json.dumps([c["config_from"].tolist() for c in checks]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not KEPT.is_dir(), reason="needs tools/fetch_engine_kernels.py's vLLM 0.33.0")
def test_a_candidate_is_decided_on_two_draws_in_vllms_own_kernel(tmp_path):
    # Triton's interpreter: the flow and the names, never numbers.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", DECIDE, str(tmp_path)], env=env,
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-2])
    labels = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        row["file_name"]
        == "E=8,N=128,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert row["baseline"] == "default" and row["timing"] == "cpu (Triton interpreter)"
    assert len(labels) >= 2 and set(labels[0]) == {"file", "baseline", "baseline_again"}
    exported = list((tmp_path / "export").rglob("*.json"))
    if row["status"] == "exported":
        assert [p.relative_to(tmp_path / "export").as_posix() for p in exported] == [row["path"]]
    else:
        assert exported == [] and row["path"] in ("", "nan")


def test_the_gpu_script_finds_a_candidate_for_every_engine_format_and_glm5_shape():
    from tilesweep.config import compose

    settings = compose([])
    versions = settings["backend"]["fused_moe"]["engine_versions"]
    kept = [ROOT / "docs/examples/h200/engine_tune", ROOT / "docs/examples/h200/engine_tune_fp8"]
    for engine, version in versions.items():
        found = dropins.candidates(kept, engine, version)
        assert set(found) == {
            (f, 256, n) for f in ("bf16", "fp8", "fp8_block") for n in (256, 2048)
        }
        for path in found.values():
            assert len(read_file(path)[1]) == 18  # every batch key M = 1-4,096
