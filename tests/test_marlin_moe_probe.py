"""vLLM's Marlin MoE probe without a GPU: the sources' extraction and manifest
(tools/fetch_engine_sources.py), the build's instantiations and kernel selector
(tools/marlin_moe_build.py), and the probe's shapes, padding, block sizes and argument checks
(tools/marlin_moe_probe.py), against the rules of vLLM's mxfp4.py, fused_marlin_moe.py and
moe_align_block_size.py worked by hand here (the tests fetch no source)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import fetch_engine_sources  # noqa: E402 - a tool, found on the path just set
import marlin_moe_build  # noqa: E402 - likewise

# ops.cu's tables as vLLM 0.16.0 writes them (0.14.1 lacks the last entry of each).
OPS_CU = """
thread_config_t small_batch_thread_configs[] = {
    // Ordered by priority
    // thread_k, thread_n, num_threads
    {128, 128, 256},
    {64, 128, 128},
    {128, 64, 128}};

thread_config_t large_batch_thread_configs[] = {
    {64, 256, 256},
    {64, 128, 128},
    {128, 64, 128}};
"""


def _probe():
    """Return tools/marlin_moe_probe.py as a module (it needs torch, which the tests have)."""
    import marlin_moe_probe  # deferred: imports torch

    return marlin_moe_probe


def _sdist(tmp_path: Path, version: str = "9.9.9") -> Path:
    """Write a small vllm sdist with two wanted files and two others; return its path."""
    path = tmp_path / f"vllm-{version}.tar.gz"
    files = {
        "csrc/moe/marlin_moe_wna16/ops.cu": OPS_CU,
        "csrc/core/scalar_type.hpp": "// types\n",
        "csrc/attention/paged.cu": "// not read\n",
        "vllm/model_executor/layers/fused_moe/fused_marlin_moe.py": "# not read\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_sources_are_extracted_with_their_hashes_and_checked(tmp_path):
    """Only the build's files come out, each hashed in the manifest; a changed one is refused."""
    folder = fetch_engine_sources.extract(_sdist(tmp_path), tmp_path / "kept")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert folder.name == "vllm-src-9.9.9" and manifest["version"] == "9.9.9"
    assert sorted(manifest["files"]) == [
        "csrc/core/scalar_type.hpp",
        "csrc/moe/marlin_moe_wna16/ops.cu",
    ]
    ops = (folder / "csrc/moe/marlin_moe_wna16/ops.cu").read_bytes()
    assert manifest["files"]["csrc/moe/marlin_moe_wna16/ops.cu"] == hashlib.sha256(ops).hexdigest()
    assert fetch_engine_sources.check(folder) == manifest
    (folder / "csrc/core/scalar_type.hpp").write_text("// edited\n")
    with pytest.raises(SystemExit, match="differs from its manifest"):
        fetch_engine_sources.check(folder)


def test_a_sdist_without_the_marlin_moe_sources_is_refused(tmp_path):
    """A source distribution lacking ops.cu leaves nothing behind and says why."""
    path = tmp_path / "vllm-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("vllm-1.0/csrc/core/math.hpp")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(SystemExit, match="no csrc/moe/marlin_moe_wna16/ops.cu"):
        fetch_engine_sources.extract(path, tmp_path / "kept")
    assert not (tmp_path / "kept" / "vllm-src-1.0").exists()


def test_the_moe_block_size_follows_fused_marlin_moe():
    """The first of 8, 16, 32, 48, 64 with tokens x top_k / experts / size below 0.9: 8 for
    gpt-oss-120b (128 experts, top-4) up to 230 tokens, 16 from 231."""
    assert {marlin_moe_build.block_size_m(t, 4, 128) for t in (1, 2, 4, 8, 16, 32, 64)} == {8}
    assert marlin_moe_build.block_size_m(230, 4, 128) == 8  # 0.898
    assert marlin_moe_build.block_size_m(231, 4, 128) == 16  # 0.902 at 8, 0.451 at 16
    assert marlin_moe_build.block_size_m(100_000, 4, 128) == 64


def test_the_instantiations_are_the_tables_entries_at_the_block_sizes(tmp_path):
    """Block size 8 takes the small-batch table (m_block_size_8); 48 the large one (3 m blocks)."""
    ops = tmp_path / "ops.cu"
    ops.write_text(OPS_CU)
    tables = marlin_moe_build.thread_tables(ops)
    assert tables["small"] == [(128, 128, 256), (64, 128, 128), (128, 64, 128)]
    kernels = marlin_moe_build.instantiations({8}, tables)
    # (threads, m_blocks, n_blocks = thread_n / 16, k_blocks = thread_k / 16, m_block_size_8)
    assert kernels == [(256, 1, 8, 8, True), (128, 1, 8, 4, True), (128, 1, 4, 8, True)]
    more = marlin_moe_build.instantiations({8, 48}, tables)
    assert more[3:] == [(256, 3, 16, 4, False), (128, 3, 8, 4, False), (128, 3, 4, 8, False)]
    ops.write_text("no tables here")
    with pytest.raises(SystemExit, match="no small_batch_thread_configs"):
        marlin_moe_build.thread_tables(ops)


def test_the_build_folder_has_one_file_and_one_selector_branch_per_kernel(tmp_path):
    """Each instantiation gets its own .cu (compiled in parallel) and one selector branch."""
    kernels = [(256, 1, 8, 8, True), (128, 1, 4, 8, True)]
    sources = marlin_moe_build.write_build(tmp_path / "src", tmp_path / "build", kernels)
    names = [s.name for s in sources]
    assert names[0] == "ops.cu" and "kernel_256_1_8_8_1.cu" in names and names[-1] == "bindings.cpp"
    selector = (tmp_path / "build" / "kernel_selector.h").read_text()
    assert selector.count("kernel = Marlin<") == 2 and selector.count("else if") == 1
    assert "vllm::kFE8M0fnu.id(), 128, 1, 4, 8, true, 4, 2, false>" in selector
    text = (tmp_path / "build" / "kernel_128_1_4_8_1.cu").read_text()
    assert "template __global__ void Marlin<" in text and "(MARLIN_KERNEL_PARAMS)" in text


def test_the_shards_are_padded_as_mxfp4_pads_them_for_marlin():
    """mxfp4.py (Marlin): intermediate per shard rounded up to 128, hidden to 256: gpt-oss-120b's
    2880 / 8 = 360 -> 384, / 4 = 720 -> 768, / 2 = 1440 -> 1536, / 1 -> 2944; hidden -> 3072."""
    probe = _probe()
    got = {tp: (probe.shard(tp)["hidden"], probe.shard(tp)["inter"]) for tp in (8, 4, 2, 1)}
    assert got == {8: (3072, 384), 4: (3072, 768), 2: (3072, 1536), 1: (3072, 2944)}
    assert probe.shard(8)["model_inter"] == 360
    with pytest.raises(SystemExit, match="does not split over TP7"):
        probe.shard(7)


def test_the_align_buffers_follow_moe_align_block_sizes_wrapper():
    """max padded = top-k rows + experts x (block - 1), capped at rows x block below `experts`
    rows; expert ids: one per block."""
    probe = _probe()
    assert probe.align_sizes(4, 128, 8) == (32, 4)  # 4 rows < 128 experts: 4 x 8
    assert probe.align_sizes(256, 128, 8) == (256 + 128 * 7, (256 + 896) // 8)


def test_the_bytes_count_touched_experts_scales_and_biases():
    """One expert at TP8 as Marlin reads it: FP4 values, e8m0 per 32, bf16 bias, both GEMMs."""
    probe = _probe()
    b = probe.expert_bytes(3072, 384)
    assert b["w13"] == 768 * 3072 // 2 + 768 * 3072 // 32 + 768 * 2
    assert b["w2"] == 3072 * 384 // 2 + 3072 * 384 // 32 + 3072 * 2
    two = probe.touched_bytes(probe.shard(8), tokens=1, experts_touched=2)
    one = probe.touched_bytes(probe.shard(8), tokens=1, experts_touched=1)
    assert two["bytes_padded"] - one["bytes_padded"] == b["w13"] + b["w2"]
    assert two["bytes_model"] < two["bytes_padded"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tokens", "1,x"], "take integers"),
        (["--tokens", "0"], "must be >= 1"),
        (["--tps", "7"], "does not split over TP7"),
    ],
)
def test_the_probe_refuses_bad_arguments_in_one_line(args, said):
    """Every refusal comes before a build starts, in one line: the probe's argument check, in
    this process (the test below runs the probe as a user does)."""
    with pytest.raises(SystemExit) as exit_:
        _probe().parse(args)
    line = exit_.value.code
    assert isinstance(line, str) and said in line and "\n" not in line, line


def test_the_probe_refuses_a_missing_source_in_one_line_before_a_build(tmp_path):
    """The probe as a user runs it: the last argument check, one line, no trace, nothing built."""
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, str(ROOT / "tools" / "marlin_moe_probe.py"), "--src", "/nonexistent"]
    cmd += ["--build", str(tmp_path / "build")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "no /nonexistent/manifest.json" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "build").exists()


def _rows(tmp_path: Path) -> Path:
    """Write two made-up probe rows (TP8 and TP2 at 4 tokens) in the probe's fields."""
    rows = []
    for tp, us in ((8, 20.0), (2, 60.0)):
        rows.append(
            {
                "tp": tp,
                "tokens": 4,
                "top_k": 4,
                "experts": 128,
                "hidden": 2880,
                "inter": 2880 // tp,
                "experts_touched": 16,
                "built_w13_us": us,
                "built_w2_us": us / 2,
                "without_128x64_w13_us": us * 1.2,
                "without_128x64_w2_us": us / 2,
            }
        )
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    return path


def test_the_curve_takes_the_gemms_time_less_two_launches_over_the_verdicts_bytes(tmp_path):
    """e = (touched experts x 3 h i x 4.25 bits + rows' activations) / datasheet / (w13 + w2 - 2
    fixed), the two tables' geometric mean; the ends are the smallest and largest expert."""
    cmd = [sys.executable, str(ROOT / "tools" / "marlin_moe_curve.py"), str(_rows(tmp_path))]
    proc = subprocess.run([*cmd, "--fixed-us", "3"], capture_output=True, text=True, check=True)
    (line,) = proc.stdout.splitlines()
    mb8 = 3 * 2880 * 360 * (0.5 + 1 / 32)
    moved = (16 * mb8 + 16 * (2 * 2880 + 2 * 360) * 2) / 3350e3
    tp8 = math.sqrt(moved / (20.0 + 10.0 - 6) * moved / (24.0 + 10.0 - 6))
    assert "tokens_per_expert: 0.125" in line and f"low: {tp8:.3f}" in line
    assert 'low_kernel: "vLLM Marlin MoE (w4a16 MXFP4), gpt_oss_120b TP8, both tables"' in line
    assert f"low_expert_mb: {mb8 / 1e6:.3f}" in line and "high_expert_mb: 6.610" in line
    assert "TP8 30.0/34.0, TP2 90.0/102.0" in line  # w13 + w2 under each table
    carried = subprocess.run(
        [*cmd, "--fixed-us", "3", "--carry-to", "4800"], capture_output=True, text=True, check=True
    )
    assert f"low: {tp8 * math.sqrt(3350 / 4800):.3f}" in carried.stdout
    bad = subprocess.run([*cmd, "--fixed-us", "40"], capture_output=True, text=True)
    assert bad.returncode != 0 and "no time left" in bad.stderr
