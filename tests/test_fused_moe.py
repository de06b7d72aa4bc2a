"""The fused-MoE kernel in the engines' conditions: routing blocks, the kernel against an fp32
reference (Triton's interpreter on the CPU, the real kernel on a GPU), the search space and
defaults, the engines' file names, and the supervised, resumable tuning worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import fast_sample

from tilesweep.config import compose
from tilesweep.errors import ConfigError
from tilesweep.fused_moe import space

CONFIG = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 32,
    "BLOCK_SIZE_K": 32,
    "GROUP_SIZE_M": 2,
    "num_warps": 4,
    "num_stages": 2,
}


def test_align_blocks_pads_each_expert_and_keeps_every_pair_once():
    from tilesweep.fused_moe.routing import align_blocks

    ids = torch.tensor([[0, 2], [2, 1], [0, 2], [3, 2]])
    sorted_ids, experts, post = align_blocks(ids, 4, 5)
    assert int(post) == sorted_ids.numel() == 4 * 4  # experts 0,1,2,3 each padded to one block
    assert experts.tolist() == [0, 1, 2, 3]
    real = sorted_ids[sorted_ids < ids.numel()]
    assert sorted(real.tolist()) == list(range(ids.numel()))
    flat = ids.reshape(-1)
    for block, expert in enumerate(experts.tolist()):
        rows = sorted_ids[block * 4 : (block + 1) * 4]
        assert all(flat[r].item() == expert for r in rows.tolist() if r < ids.numel())


def test_direct_blocks_give_each_pair_its_own_block():
    from tilesweep.fused_moe.routing import direct_blocks

    ids = torch.tensor([[3, 1]])
    sorted_ids, experts, post = direct_blocks(ids, 16)
    assert int(post) == 32 and experts.tolist() == [3, 1]
    assert sorted_ids[0].item() == 0 and sorted_ids[16].item() == 1
    assert (sorted_ids[1:16] == 2).all()


def test_sort_streams_an_expert_once_where_the_direct_path_has_a_block_per_pair():
    from tilesweep.fused_moe import case

    problem = {"experts": 64, "n": 32, "hidden": 64, "top_k": 2}
    assert space.is_direct(8, problem, 4) and not space.is_direct(9, problem, 4)
    ids = torch.tensor([[3, 1], [3, 5], [1, 3]], dtype=torch.int32)
    batch = case.Batch(3, ids, None, {}, {}, {}, direct=True)
    direct = case.blocks(batch, 16, problem["experts"])
    _, experts, post = case.blocks(batch, 16, problem["experts"], sort=True)
    assert direct[1].tolist() == [3, 1, 3, 5, 1, 3]  # expert 3 streamed three times
    assert experts.tolist() == [1, 3, 5] and int(post) == 3 * 16  # each expert once
    assert case.blocks(batch, 16, problem["experts"]) is direct  # both cached


def _interpreted(code: str) -> dict:
    """Run code in a fresh interpreter under TRITON_INTERPRET=1; return the JSON it prints."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


KERNEL_CHECK = """
import json, torch
from tilesweep.fused_moe import case
from tilesweep.fused_moe import kernel as fm, routing
problem = {"experts": 6, "n": 48, "hidden": 64, "top_k": 2}
gen = torch.Generator().manual_seed(1)
w = case.make_weights(problem, "fp32", "cpu", gen)
out = {}
for direct in (False, True):
    b = case.make_batch(problem, w, 5, "zipf", 1.2, "cpu", gen, direct=direct)
    err, bad = case.check(CONFIG, problem, w, b)
    out[f"direct={direct}"] = [err, bad]
# expert -1 (another rank's expert) writes zeros
b = case.make_batch(problem, w, 3, "uniform", 1.2, "cpu", gen, direct=False)
blk = routing.align_blocks(b.topk_ids, 16, 6, expert_map=torch.tensor([-1, 1, 2, 3, 4, 5]))
c = b.c["gate_up"].fill_(float("nan"))
fm.invoke(b.a["gate_up"], w.w["gate_up"], c, blk, CONFIG, top_k=2, gather=True)
remote = (b.topk_ids.reshape(-1) == 0)
out["remote_zero"] = bool((c[remote] == 0).all()) and bool(torch.isfinite(c).all())
out["remote_count"] = int(remote.sum())
# every scale mode against its dequantised product, fp32 operands standing in for fp8
a, bw = torch.randn(4, 256, generator=gen), torch.randn(2, 64, 256, generator=gen)
ids = torch.tensor([[0], [1], [1], [0]])
blk = routing.align_blocks(ids, 16, 2)
ref_plain = torch.stack([a[p] @ bw[ids[p, 0]].T for p in range(4)])
scales = {
    "tensor": (torch.tensor([0.5]), torch.tensor([2.0, 3.0])),
    "channel": (torch.rand(4, generator=gen) + 0.5, torch.rand(2, 64, generator=gen) + 0.5),
    "block": (torch.rand(4, 2, generator=gen) + 0.5, torch.rand(2, 1, 2, generator=gen) + 0.5),
}
cfg = dict(CONFIG, BLOCK_SIZE_K=64)
for mode, (sa, sb) in scales.items():
    c = torch.full((4, 64), float("nan"))
    fm.invoke(a, bw, c, blk, cfg, top_k=1, gather=False, scale=mode, a_scale=sa, b_scale=sb)
    ref = torch.empty(4, 64)
    for p in range(4):
        e = ids[p, 0]
        if mode == "tensor":
            ref[p] = ref_plain[p] * sa[0] * sb[e]
        elif mode == "channel":
            ref[p] = ref_plain[p] * sa[p] * sb[e]
        else:
            k = [slice(h * 128, (h + 1) * 128) for h in range(2)]
            halves = [a[p, k[h]] @ bw[e, :, k[h]].T for h in range(2)]
            ref[p] = sum(halves[h] * sa[p, h] * sb[e, 0, h] for h in range(2))
    out[mode] = float((c - ref).norm() / ref.norm())
print(json.dumps(out))
"""


# SPLIT_K 3 over four K blocks leaves one split with none (it adds zeros); over two K blocks it is
# cut to two splits; the down GEMM's K=48 in blocks of 32 is two blocks, the last one partial.
VARIANTS = [
    {},
    {"TMA": 1},
    {"PERSISTENT": 1},
    {"TMA": 1, "PERSISTENT": 1},
    {"SPLIT_K": 3},
    {"TMA": 1, "SPLIT_K": 2},
    {"SORT": 1},
]
VARIANT_IDS = ["engine", "tma", "persistent", "tma-persistent", "split3", "tma-split2", "sort"]


@pytest.mark.parametrize(
    "variant",
    # The engine's own kernel in the fast tier; each variant is a few seconds more of interpreter.
    [
        pytest.param(v, marks=() if i == "engine" else pytest.mark.slow)
        for v, i in zip(VARIANTS, VARIANT_IDS, strict=True)
    ],
    ids=VARIANT_IDS,
)
def test_kernel_matches_fp32_reference_in_the_interpreter(variant):
    config = {**CONFIG, **variant}
    out = _interpreted(f"CONFIG = {config!r}\n{KERNEL_CHECK}")
    for path in ("direct=False", "direct=True"):
        err, bad = out[path]
        assert bad is None and err < 1e-2, (path, err, bad)
    assert out["remote_count"] > 0 and out["remote_zero"]
    for mode in ("tensor", "channel", "block"):
        assert out[mode] < 1e-5, (mode, out[mode])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("direct", [False, True])
def test_kernel_matches_fp32_reference_on_the_gpu(dtype, direct):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tilesweep.fused_moe import case

    problem = {"experts": 64, "n": 256, "hidden": 512, "top_k": 4}
    gen = torch.Generator(device="cuda").manual_seed(3)
    w = case.make_weights(problem, dtype, "cuda", gen)
    for m in (2, 48, 300):
        batch = case.make_batch(problem, w, m, "zipf", 1.2, "cuda", gen, direct=direct)
        big = {**CONFIG, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "num_warps": 8}
        for config in (CONFIG, big, *({**big, **v} for v in VARIANTS[1:])):
            err, bad = case.check(config, problem, w, batch)
            assert bad is None, (m, config, err)


def test_search_space_is_the_engines_and_defaults_follow_their_rules():
    from tilesweep.config import compose

    settings = compose()
    mine = settings["backend"]["fused_moe"]
    configs = space.search_space(mine["space"])
    assert len(configs) == 5 * 4 * 3 * 4 * 2 * 4  # the engines' tuners' 1,920 configs
    assert len({space.config_slug(c) for c in configs}) == len(configs)
    assert all(space.parse_slug(space.config_slug(c)) == c for c in configs[:50])
    variant = {**configs[0], "TMA": 1, "PERSISTENT": 2, "SPLIT_K": 4}
    assert space.parse_slug(space.config_slug(variant)) == variant
    assert space.tile_key(space.config_slug(variant)) == "m16n32k64-w4-s2-tma-p2-sk4"
    sort = {**variant, "SORT": 1}
    assert (
        space.config_slug(sort).endswith("-sk4-sort")
        and space.parse_slug(space.config_slug(sort)) == sort
    )
    assert space.tile_key(space.config_slug(sort)) == "m16n32k64-w4-s2-tma-p2-sk4"  # host-side
    assert not space.is_engine_config({**configs[0], "SORT": 1})
    assert not space.is_engine_config(variant) and space.is_engine_config(configs[0])
    assert not space.is_engine_config({**configs[0], "SPLIT_K": 2})
    assert space.is_engine_config({**configs[0], "SPLIT_K": 1})
    vllm = mine["engine_defaults"]["vllm"]
    small = space.engine_default(vllm, 16, 256, "bf16")
    assert (small["BLOCK_SIZE_M"], small["BLOCK_SIZE_N"], small["BLOCK_SIZE_K"]) == (16, 64, 128)
    assert (small["num_warps"], small["num_stages"]) == (4, 4)
    big = space.engine_default(vllm, 4096, 256, "bf16")
    assert (big["BLOCK_SIZE_M"], big["BLOCK_SIZE_N"], big["BLOCK_SIZE_K"]) == (128, 128, 64)
    assert (
        big["GROUP_SIZE_M"] == 1
        and space.engine_default(vllm, 65536, 256, "bf16")["GROUP_SIZE_M"] == 16
    )
    assert space.engine_default(vllm, 4096, 256, "fp8")["BLOCK_SIZE_K"] == 128
    sglang = mine["engine_defaults"]["sglang"]
    assert space.engine_default(sglang, 300, 256, "fp8")["BLOCK_SIZE_N"] == 256
    assert space.engine_default(sglang, 200, 256, "fp8")["BLOCK_SIZE_N"] == 128
    assert space.engine_default(sglang, 200, 256, "bf16")["BLOCK_SIZE_M"] == 16


def test_constraints_name_why_a_config_cannot_run():
    big = {**CONFIG, "BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 256}
    assert "shared memory" in space.constraint(
        {**big, "num_stages": 5}, "bf16", 232448, 64, 512, "none"
    )
    assert space.constraint(CONFIG, "bf16", 232448, 64, 512, "none") is None
    assert "exceeds K" in space.constraint(
        {**CONFIG, "BLOCK_SIZE_K": 256}, "bf16", 1 << 20, 64, 128, "none"
    )


def test_problems_follow_the_layouts_and_files_are_named_as_the_engines_name_them():
    from tilesweep.config import compose_settings
    from tilesweep.settings import Layout

    glm5 = {"routed_experts": 256, "moe_intermediate": 2048, "hidden": 6144, "top_k": 8}
    model = compose_settings().model.model_copy(update=glm5)
    degrees = [(1, 1), (2, 1), (1, 8), (8, 1)]
    layouts = [Layout(tp=tp, pp=1, ep=ep) for tp, ep in degrees]
    got = {(p["experts"], p["n"]) for p in space.problems(model, layouts)}
    assert got == {(256, 2048), (256, 1024), (32, 2048), (256, 256)}
    assert space.config_file_name(256, 2048, "NVIDIA H200", "bf16") == (
        "E=256,N=2048,device_name=NVIDIA_H200.json"
    )
    assert space.config_file_name(256, 1024, "NVIDIA H200", "fp8").endswith(",dtype=fp8_w8a8.json")
    assert space.nearest_key([1, 2, 4, 8], 3) == 2 and space.nearest_key([1, 2, 4, 8], 7) == 8
    shapes = space.gemm_shapes({"n": 2048, "hidden": 6144})
    assert shapes == {"gate_up": (4096, 6144), "down": (6144, 2048)}


def _spec(**over) -> dict:
    """Return a tiny tuning spec the interpreter runs in seconds."""
    one = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1}
    return {
        "dtype": "fp32",
        "device": "cpu",
        "problems": [{"experts": 4, "n": 32, "hidden": 64, "top_k": 2}],
        "space": {
            "BLOCK_SIZE_M": [16],
            "BLOCK_SIZE_N": [32, 64],
            "BLOCK_SIZE_K": [32, 128],
            "GROUP_SIZE_M": [1],
            "num_warps": [4],
            "num_stages": [2],
        },
        "batch_keys": [2, 8],
        "final_batches": [2, 8],
        "check_batch": 8,
        "routing": ["uniform"],
        "zipf_alpha": 1.2,
        "seed": 0,
        "direct_sparsity": 4,
        "screen_repeats": 1,
        "final_repeats": 1,
        "finalists": 1,
        "guard_default": "vllm",
        "variants": [{"TMA": 1, "PERSISTENT": 1}, {"SPLIT_K": 2}],
        "variant_tiles": 1,
        "variant_finalists": 1,
        "config_timeout_s": 120,
        "items_per_worker": 0,
        "compile_timeout_s": 120,
        "compile_workers": 1,
        "engines": ["vllm"],
        "smem_limit_bytes": 232448,
        "engine_defaults": {
            "vllm": {k: [{"value": v}] for k, v in {**one, "num_warps": 4, "num_stages": 2}.items()}
        },
        **over,
    }


def _engine_named(path) -> bool:
    """Return whether a path lies where, or is named as, an engine reads its config files: a
    vllm/ or sglang/ folder, a triton_<version>/ folder, or the engines' exact file name."""
    from tilesweep.fused_moe.engines.check import NAME

    folders = path.parts[:-1]
    return (
        any(part in ("vllm", "sglang") or part.startswith("triton_") for part in folders)
        or NAME.fullmatch(path.name) is not None
    )


def test_the_project_kernels_picks_are_never_written_where_or_as_an_engine_file(
    tmp_path, monkeypatch
):
    """Issue 25: the project kernel's picks are no engine export. A sweep writes them under
    tune/fused_moe/project_kernel/, never under tuned/ (the engine-kernel exports), with names no
    engine reads and a README saying which files to use; engine-check can still time one, the GPU
    step's runner still finds the kept example's, and that example holds them nowhere else."""
    from conftest import ROOT

    from tilesweep.fused_moe import tune
    from tilesweep.fused_moe.backend import PROJECT_KERNEL, moe_table, project_kernel_file
    from tilesweep.fused_moe.engines.check import read_file
    from tilesweep.pipeline import Sweep

    sweep = Sweep(["device=h200x8", "backend.fused_moe.tune=true"], ROOT / "conf")
    results = sweep.results
    folders = [p for p in sweep.tuned_outputs() if not p.endswith(".csv")]
    picks = [str(results / "tune" / "fused_moe" / PROJECT_KERNEL / d) for d in sweep.tune_dtypes()]
    assert folders[: len(picks)] == picks
    exports = folders[len(picks) :]
    assert exports and all(
        p.startswith(str(results / "tuned" / "fused_moe" / "engine_")) for p in exports
    )

    tuned = {(4, 32): {"1": {**CONFIG}}, (8, 64): {"1": {**CONFIG}, "8": {**CONFIG}}}
    for dtype in ("bf16", "fp8"):
        out = tmp_path / PROJECT_KERNEL / dtype
        tune.write_configs(out, tuned, "NVIDIA H200", dtype, "3.6.0")
        written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
        assert written and not any(_engine_named(p) for p in written), written
        assert "NOT engine config files" in (out / "README.txt").read_text()
        shape, configs = read_file(out / project_kernel_file(8, 64, "NVIDIA H200", dtype))
        assert (shape["experts"], shape["n"], set(configs)) == (8, 64, {1, 8})

    example = ROOT / "docs" / "examples" / "h200"
    for run in ("tune_work", "tune_layouts"):
        assert not (example / run / "tuned").exists()
        kept = [p.relative_to(example) for p in (example / run).rglob("*.json")]
        assert not any(_engine_named(p) for p in kept)
        assert len(list((example / run / PROJECT_KERNEL).rglob(f"{PROJECT_KERNEL}_E=*.json")))
    settings = sweep.settings
    monkeypatch.chdir(ROOT)  # bench.step_moe_tables: paths from the project's root
    for tp, n in ((1, 2048), (8, 256)):
        table = moe_table(
            settings.bench, settings.backend.fused_moe, settings.model,
            {"tp": tp, "ep": 1}, "NVIDIA H200",
        )  # fmt: skip
        name = project_kernel_file(256, n, "NVIDIA H200", "bf16")
        assert table["source"].endswith(f"/{PROJECT_KERNEL}/bf16/{name}"), table["source"]
        assert "1" in table["configs"] and "triton_version" not in table["configs"]


@pytest.mark.slow  # tunes in worker processes
def test_supervised_worker_tunes_resumes_and_records_a_killed_item(tmp_path):
    import logging

    from tilesweep.fused_moe import tune
    from tilesweep.fused_moe.journal import append_journal, read_journal, supervise

    log = logging.getLogger("test")
    env = {"TRITON_INTERPRET": "1"}
    spec = _spec()
    records = supervise(spec, tmp_path, log, env=env)
    screens = [r for r in records.values() if r["phase"] == "screen"]
    assert {r["status"] for r in screens} == {"ok", "constraint"}  # BLOCK_SIZE_K 128 > K=32
    table = tune.evaluate(spec, records, {"copy_gbs": 100.0, "matmul_tflops": {"fp32": 1.0}})
    tuned = tune.tuned_configs(table, spec)
    assert set(tuned) == {(4, 32)} and set(tuned[(4, 32)]) == {"2", "8"}
    both = table[(table["op"] == "both") & (table["status"] == "ok")]
    assert both["tuned"].any() and both["over_vllm_default"].notna().any()
    # The variants of the best screened tile are screened and timed, picked as `best` only.
    variants = [r for r in screens if not space.is_engine_config(r["config"])]
    assert {r["status"] for r in variants} == {"ok"}
    assert any("SPLIT_K" in r["config"] for r in variants)
    assert (both["source"] == "variant").any() and both["best"].any()
    # The tuned pick is of the engines' space, one config per batch, the fastest of its timed
    # rows: a finalist, or vLLM's default where that won the final timing. The default's own
    # config (m16n32k32) is screened too, so it can be the finalist, timed under both names
    # (tune_analysis keeps the faster row). Which wins rests on one interpreter sample each
    # (about 2x apart, unloaded), so the source is not asserted.
    picked = both[both["tuned"]]
    assert set(picked["source"]) <= set(space.engine_sources(spec["engine_defaults"]))
    engines_space = both[both["source"].isin(space.engine_sources(spec["engine_defaults"]))]
    for m, grp in engines_space.groupby("m"):  # one routing: its time is the sum over routings
        fastest = grp.groupby("config")["time_ms"].min().idxmin()
        assert set(picked[picked["m"] == m]["config"]) == {fastest}
    assert all(space.is_engine_config(c) for t in tuned.values() for c in t.values())
    tune.write_configs(tmp_path / "configs", tuned, "NVIDIA H200", "bf16", "3.6.0")
    file = tmp_path / "configs" / "project_kernel_E=4,N=32,device_name=NVIDIA_H200.json"
    assert json.loads(file.read_text()) == {"triton_version": "3.6.0", **tuned[(4, 32)]}
    engine = table[table["runner"] == "engine:vllm"]
    assert (engine["status"] == "skipped").all() and engine["reason"].str.contains("vllm").all()
    # A rerun finds everything journalled and adds nothing.
    lines = (tmp_path / "journal.jsonl").read_text().count("\n")
    supervise(spec, tmp_path, log, env=env)
    assert (tmp_path / "journal.jsonl").read_text().count("\n") == lines
    # A worker killed in an item: the item is journalled as a timeout, the rest resumes.
    journal = tmp_path / "journal.jsonl"
    kept = [r for r in read_journal(journal).values() if r["phase"] == "screen"]
    journal.unlink()
    for rec in kept[1:]:
        append_journal(journal, rec)
    slow = _spec(config_timeout_s=0.01)
    records = supervise(slow, tmp_path, log, env=env, restarts=20)
    assert any(r["status"] == "timeout" for r in records.values())


@pytest.mark.slow  # a fresh process per item
def test_one_item_per_worker_runs_every_item_in_a_fresh_process(tmp_path):
    import logging

    from tilesweep.fused_moe import tune
    from tilesweep.fused_moe.journal import supervise

    # No variants: the space's four tiles and a final show one process an item as more would.
    spec = _spec(items_per_worker=1, batch_keys=[8], final_batches=[8], variants=[])
    records = supervise(spec, tmp_path, logging.getLogger("test"), env={"TRITON_INTERPRET": "1"})
    items = [r for r in records.values() if r["phase"] in ("screen", "final")]
    assert len(items) >= 4 and {r["phase"] for r in items} == {"screen", "final"}
    assert len({r["pid"] for r in items}) == len(items)  # one process per item
    table = tune.evaluate(spec, records, {"copy_gbs": 100.0, "matmul_tflops": {"fp32": 1.0}})
    assert table[(table["op"] == "both") & (table["status"] == "ok")]["tuned"].any()


def test_a_half_written_journal_line_is_ignored(tmp_path):
    from tilesweep.fused_moe.journal import append_journal, read_journal

    path = tmp_path / "j.jsonl"
    append_journal(path, {"key": "a", "phase": "screen"})
    with open(path, "a") as stream:
        stream.write('{"key": "b", "pha')
    assert set(read_journal(path)) == {"a"}


def test_the_tuned_pick_minimises_the_time_summed_over_routings():
    import pandas as pd

    from tilesweep.fused_moe import tune

    spec = {"routing": ["uniform", "zipf"], "batch_keys": [64], "engine_defaults": {"vllm": {}}}
    rows = [  # config a wins on uniform by a hair and loses on zipf by far: b is the pick
        ("a", "uniform", 1.00),
        ("a", "zipf", 2.00),
        ("b", "uniform", 1.01),
        ("b", "zipf", 1.20),
        ("c", "uniform", 0.90),  # fastest on uniform, never timed on zipf: not a candidate
    ]
    rows += [("d-tma", "uniform", 0.5), ("d-tma", "zipf", 0.5)]  # a variant: best, not tuned
    table = pd.DataFrame(
        [
            {"experts": 256, "n": 2048, "m": 64, "op": "both", "status": "ok",
             "runner": "fused_moe", "config": c, "routing": r, "time_ms": t,
             "source": "variant" if "tma" in c else "finalist"}
            for c, r, t in rows
        ]
    )  # fmt: skip
    marked = tune._mark_pick(spec, table, "tuned", ("finalist",))
    assert set(marked[marked["tuned"]]["config"]) == {"b"}
    marked = tune._mark_pick(spec, marked, "best", ("finalist", "variant"))
    assert set(marked[marked["best"]]["config"]) == {"d-tma"}
    # An engine default that beats every finalist is the tuned pick: never slower than it.
    table.loc[len(table)] = {**table.iloc[0].to_dict(), "config": "e", "source": "vllm-default",
                             "time_ms": 1.0}  # fmt: skip
    table.loc[len(table)] = {**table.iloc[1].to_dict(), "config": "e", "source": "vllm-default",
                             "time_ms": 1.0}  # fmt: skip
    marked = tune._mark_pick(spec, table, "tuned", ("finalist", "vllm-default"))
    assert set(marked[marked["tuned"]]["config"]) == {"e"}
    # Guarded by the default: b (1.01 + 1.20) beats the default e (1.00 + 1.30) summed, but is
    # slower on uniform, so the default itself is the pick.
    table.loc[table["config"] == "e", "time_ms"] = [1.00, 1.30]
    guarded = tune._mark_pick(spec, table, "tuned", ("finalist", "vllm-default"), "vllm-default")
    assert set(guarded[guarded["tuned"]]["config"]) == {"e"}
    table.loc[table["config"] == "e", "time_ms"] = [1.05, 1.30]
    guarded = tune._mark_pick(spec, table, "tuned", ("finalist", "vllm-default"), "vllm-default")
    assert set(guarded[guarded["tuned"]]["config"]) == {"b"}
    # An extra batch past the keys is picked from its own times and exported as a key.
    extra = table.copy()
    extra["m"] = 8192
    extra.loc[extra["config"] == "e", "time_ms"] = [0.5, 0.5]  # the default wins there
    both = pd.concat([table, extra], ignore_index=True)
    spec["routing"], spec["batch_keys"] = ["uniform", "zipf"], [64]
    picked = tune._mark_pick(spec, both, "tuned", ("finalist", "vllm-default"), "vllm-default")
    chosen = picked[picked["tuned"]].groupby("m")["config"].agg(set).to_dict()
    assert chosen == {64: {"b"}, 8192: {"e"}}
    picked["experts"], picked["n"], picked["config"] = 256, 2048, "m16n32k64-g1-w4-s3"
    assert set(tune.tuned_configs(picked, spec)[(256, 2048)]) == {"64", "8192"}
    # Every engine of the defaults gets its speed-up column, a new one too.
    table["experts"], table["n"] = 256, 2048
    fast = tune._speedups(table, ["vllm", "newengine"])
    assert "over_newengine_default" in fast and fast["over_vllm_default"].notna().all()


def test_engine_kernels_sit_in_decode_timed_or_skipped_with_their_reason():
    import pandas as pd

    from tilesweep import backends
    from tilesweep.config import compose_settings

    engine_rows = backends.get("fused_moe").decoder.table_rows
    settings = compose_settings()
    skipped = engine_rows(settings, pd.DataFrame())  # no tuning here: one row per engine
    assert set(skipped["runner"]) == {"engine:vllm", "engine:sglang"}
    assert (skipped["status"] == "skipped").all() and skipped["reason"].str.len().gt(0).all()
    tune = pd.DataFrame(
        [
            {"runner": "engine:vllm", "source": f"engine:{label}", "status": "ok", "m": 64,
             "dtype": "bf16", "op": "whole_moe", "time_ms": t, "routing": "uniform"}
            for label, t in (("tuned", 1.0), ("default", 1.2))
        ]
    )  # fmt: skip
    timed = engine_rows(settings, tune)
    assert list(timed["kernel"]) == [
        "fused_experts, the project kernel's tuned table",
        "fused_experts, the engine's default",
    ]
    assert list(timed["tokens"]) == [64, 64] and set(timed["source"]) == {"measured"}
    off = compose_settings(["backend.fused_moe.enabled=false"])
    assert engine_rows(off, pd.DataFrame()).empty


def test_the_engine_runner_times_the_config_the_exported_table_names():
    from tilesweep.fused_moe.tune_worker import _best

    spec = {"routing": ["uniform", "zipf"], "engine_defaults": {"vllm": {}}}

    def row(source, slug, routing, ms):
        half = {"time_ms": ms / 2}
        return {"source": source, "slug": slug, "config": {"slug": slug}, "routing": routing,
                "status": "ok", "gate_up": half, "down": half}  # fmt: skip

    rows = [
        row("finalist", "a", "uniform", 1.00), row("finalist", "a", "zipf", 2.00),
        row("finalist", "b", "uniform", 1.01), row("finalist", "b", "zipf", 1.20),
        row("vllm-default", "e", "uniform", 1.05), row("vllm-default", "e", "zipf", 1.30),
        row("variant", "v-tma", "uniform", 0.5), row("variant", "v-tma", "zipf", 0.5),
    ]  # fmt: skip
    # Fastest on one routing (a) or a variant the engine cannot run: neither; b beats e on both.
    assert _best(spec, rows) == {"slug": "b"}
    rows[2] = row("finalist", "b", "uniform", 1.06)  # b now loses to the default on uniform
    assert _best(spec, rows) == {"slug": "e"}


def test_stream_read_sums_every_element_once_in_the_interpreter():
    code = """
import json, torch
from tilesweep.kernels.stream_read import stream_read
src = torch.arange(10_000, dtype=torch.float32)
partial = torch.full((3,), float("nan"))
stream_read(src, partial, block=512, num_warps=4)
print(json.dumps({"total": float(partial.sum()), "expect": float(src.sum())}))
"""
    out = _interpreted(code)
    assert out["total"] == out["expect"]


@pytest.mark.gpu
def test_stream_read_sums_every_element_once_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tilesweep.kernels.stream_read import stream_read

    src = torch.randint(0, 4, (3 << 20,), device="cuda").float()
    partial = torch.full((528,), float("nan"), device="cuda")
    assert float(stream_read(src, partial).sum()) == float(src.sum())


def test_tune_targets_take_the_lowest_figure_over_each_range():
    import pandas as pd

    from tilesweep.fused_moe.report_sections import tune_targets

    # E=32, top-8: M tokens give M / 4 tokens per expert.
    rows = [
        # m, x_vllm, best_x_vllm, best_x_torch, copy_fraction (the fastest: 0.01 to 0.05 more)
        (2, 1.00, 1.00, 0.50, 0.40),  # 0.5 tokens per expert: outside 1-256 for torch
        (8, 1.05, 1.05, 1.20, 0.95),
        (128, 1.02, 1.03, 0.98, 0.70),  # 32 tokens per expert: the last of the copy range
        (1024, 1.10, 1.20, 1.30, 0.20),  # 256 tokens per expert
        (2048, 1.30, 1.40, 0.10, 0.10),  # 512: outside every tokens-per-expert range
    ]
    summary = pd.DataFrame(
        [
            {"dtype": "bf16", "experts": 32, "n": 2048, "routing": "uniform", "m": m,
             "tokens_per_expert": m * 8 / 32, "x_vllm": x, "best_x_vllm": bx,
             "best_x_torch": bt, "copy_fraction": cf, "read_fraction": cf * 0.95,
             "fastest_x_torch": bt + 0.01 * i, "fastest_copy_fraction": cf + 0.01 * i}
            for i, (m, x, bx, bt, cf) in enumerate(rows, start=1)
        ]
    )  # fmt: skip
    got = tune_targets(summary).iloc[0]
    assert got["x_vllm_min"] == 1.00 and got["x_vllm_min_m1024"] == 1.10
    assert got["best_x_vllm_min_m1024"] == 1.20
    # At M=1024 the default reads at 0.19 / 1.10 of the ceiling; 1.15x needs 1.15 times that.
    assert got["read_fraction_for_1_15x_m1024"] == pytest.approx(0.19 * 1.15 / 1.10)
    assert got["best_x_torch_min_tpe_1_256"] == 0.98
    assert got["copy_fraction_min_tpe_32"] == 0.40 and got["copy_fraction_min_tpe_1_32"] == 0.70
    assert got["fastest_x_torch_min_tpe_1_256"] == pytest.approx(0.98 + 0.03)
    assert got["fastest_copy_fraction_min_tpe_32"] == pytest.approx(0.40 + 0.01)
    assert got["fastest_copy_fraction_min_tpe_1_32"] == pytest.approx(0.70 + 0.03)


def test_engine_files_are_laid_out_as_the_engines_write_theirs():
    config = dict(zip(reversed(space.SPACE_KEYS), range(6), strict=True))
    text = space.engine_file_text({"1024": config, "128": config, "1": config}, "3.6.0")
    assert text.startswith('{\n    "triton_version": "3.6.0",\n    "1": {\n        "BLOCK_SIZE_M"')
    assert text.index('"1":') < text.index('"128":') < text.index('"1024":')
    assert list(json.loads(text)["128"]) == list(space.SPACE_KEYS)


def test_the_fastest_config_is_taken_per_batch_and_routing_of_any_source():
    import pandas as pd

    from tilesweep.fused_moe.report_sections import tune_summary

    def row(config, source, routing, ms, **over):
        return {"dtype": "bf16", "experts": 256, "n": 2048, "m": 8192, "routing": routing,
                "op": "both", "status": "ok", "runner": "fused_moe", "source": source,
                "config": config, "time_ms": ms, "over_vllm_default": 2.0 / ms,
                "over_baseline": 1.5 / ms, "copy_fraction": 0.5 / ms,
                "tuned": config == "t", "best": config == "b", **over}  # fmt: skip

    tune = pd.DataFrame(
        [
            row("t", "finalist", "uniform", 1.4), row("t", "finalist", "zipf", 1.0),
            row("b", "variant", "uniform", 1.5), row("b", "variant", "zipf", 0.8),
            row("v", "vllm-default", "uniform", 2.0), row("v", "vllm-default", "zipf", 2.0),
            row("x", "finalist", "uniform", 0.5, status="launch"),  # failed: never the fastest
        ]
    )  # fmt: skip
    got = tune_summary(tune).set_index("routing")
    # On uniform the tuned config beats the best pick (which wins the sum over routings).
    assert got.loc["uniform", "best_config"] == "b" and got.loc["uniform", "fastest_config"] == "t"
    assert got.loc["uniform", "fastest_x_torch"] == pytest.approx(1.5 / 1.4)
    assert got.loc["zipf", "fastest_config"] == "b"
    assert got.loc["zipf", "fastest_copy_fraction"] == pytest.approx(0.5 / 0.8)


def test_a_graph_replay_holds_as_many_calls_as_fill_its_time():
    from tilesweep.measure.timing import calls_to_fill, time_call

    assert calls_to_fill(0.087, 1.0, 10) == 10  # an 87 us GEMM: ten per replay, at most
    assert calls_to_fill(0.25, 1.0, 10) == 4
    assert calls_to_fill(5.0, 1.0, 10) == 1  # a long call already fills a replay
    assert calls_to_fill(0.0, 1.0, 10) == 10 and calls_to_fill(0.5, 1.0, 1) == 1
    entry = time_call(lambda: None, 3, 1, graph=True, max_calls=10)  # no GPU: one call each
    assert entry["calls_per_replay"] == 1 and entry["repeats"] == 3
    assert space.graph_amortisation({}) == {"max_calls": 1, "fill_ms": 1.0}  # older journals


@pytest.mark.parametrize(
    ("override", "message"),
    fast_sample(
        [
            ("backend.fused_moe.space.num_warps=[0]", "space.num_warps[0]=0: must be at least 1"),
            ("backend.fused_moe.dtypes=[fp4]", "dtypes[0]='fp4': allowed: bf16, fp8"),
            ("backend.fused_moe.routing=[]", "routing=[]: give at least one"),
            (
                "backend.fused_moe.guard_default=trt",
                "guard_default='trt': not one of engine_defaults",
            ),
            ("backend.fused_moe.graph_fill_ms=0", "graph_fill_ms=0: must be more than 0"),
            ("backend.fused_moe.variants=[{SPLIT_K:1}]", "variants[0]={'SPLIT_K': 1}: names no"),
            ("backend.fused_moe.items_per_worker=-1", "items_per_worker=-1: must be at least 0"),
            (
                "backend.fused_moe.variant_tiles=0",
                "variant_tiles=0: must be at least 1 when variants",
            ),
            (
                "backend.fused_moe.engine_defaults.vllm.num_warps=[{value:4,m_max:0}]",
                "engine_defaults.vllm: the default rules for num_warps end without a rule that",
            ),
        ]
    ),
)
def test_the_tuners_settings_are_refused_by_its_model_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert str(err.value).startswith(f"backend.fused_moe.{message}")


def test_the_tuning_section_is_a_figure_and_a_short_table_not_every_batch():
    import pandas as pd

    from tilesweep.columns import TUNE_TOP_COLUMNS
    from tilesweep.fused_moe.report_sections import TOP_ROWS, tune_blocks, tune_speedup
    from tilesweep.report.document import Figure, Table

    tune = pd.DataFrame(
        [{"dtype": d, "experts": 256, "n": 2048, "m": m, "routing": r, "op": "both",
          "status": "ok", "runner": "fused_moe", "source": "finalist", "config": f"c{m}",
          "time_ms": 0.1 * m, "over_vllm_default": 1.0 + m / 1000, "over_baseline": 1.5,
          "over_sglang_default": 1.1, "copy_fraction": 0.8, "tuned": True, "best": False}
         for d in ("bf16", "fp8") for r in ("uniform", "zipf") for m in (1, 8, 64, 512, 4096)]
    )  # fmt: skip
    blocks = tune_blocks(tune)
    figures = [b for b in blocks if isinstance(b, Figure)]
    assert [f.name for f in figures] == ["tune_speedup"] and figures[0].alt and figures[0].caption
    tables = [b for b in blocks if isinstance(b, Table)]
    assert all(len(t.frame) <= TOP_ROWS for t in tables)  # 20 tuned batches: the top 8 shown
    (top,) = [t for t in tables if "gains most" in t.title]
    assert top.shown() == TUNE_TOP_COLUMNS and "of 20 tuned" in top.title
    assert top.frame["m"].tolist()[:4] == [4096, 4096, 4096, 4096]  # the largest x vLLM first
    fig = tune_speedup({"tune": tune})
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [
        "bf16, 256 experts, n=2048",
        "fp8, 256 experts, n=2048",
    ]
    assert all(len(ax.get_lines()) == 5 for ax in axes)  # 2 ratios x 2 routings, and the 1 line
    assert tune_speedup({"tune": pd.DataFrame()}).get_axes()[0].texts  # says it is not tuned


def test_the_worker_screens_the_space_then_each_new_engine_default_once():
    from tilesweep.fused_moe import tune_worker

    one = {
        "BLOCK_SIZE_M": 16,
        "BLOCK_SIZE_N": 64,
        "BLOCK_SIZE_K": 64,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 3,
    }
    grid = {**{k: [v] for k, v in one.items()}, "BLOCK_SIZE_N": [64, 128]}
    same = {k: [{"value": v}] for k, v in one.items()}  # the space's first config again
    other = {**same, "num_warps": [{"value": 8, "m_max": 4}, {"value": 2}]}  # 8 at M <= 4, else 2
    spec = {
        "space": grid,
        "problems": [{"experts": 8}],
        "final_batches": [1, 2, 64],
        "dtype": "bf16",
        "engine_defaults": {"a": same, "b": other},
    }
    slugs = [space.config_slug(c) for c in tune_worker.candidates(spec)]
    assert slugs == [
        "m16n64k64-g1-w4-s3",
        "m16n128k64-g1-w4-s3",
        "m16n64k64-g1-w8-s3",
        "m16n64k64-g1-w2-s3",
    ]
