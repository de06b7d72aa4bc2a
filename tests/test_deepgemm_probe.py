"""DeepGEMM's probe without a GPU: the sources' extraction and manifest, the staging of CUTLASS's
headers and the build's library search (tools/deepgemm_build.py), and the probe's shapes, M_sum,
row layout, routing and arguments (tools/deepgemm_probe.py), against vLLM 0.12.0's rules worked
by hand here (the tests fetch no source)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tilesweep.plan.padded_experts import padded_rows as plan_rows

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import deepgemm_build  # noqa: E402 - a tool, found on the path just set
import deepgemm_probe  # noqa: E402 - likewise


def test_m_sum_is_the_plans_and_vllms_rule():
    """M_sum = round_up(tokens x 8 + 128 x 127, 128): 16384 up to 16 tokens, then 16512, 16768."""
    got = {t: deepgemm_probe.padded_rows(t, 8, 128) for t in (1, 8, 16, 32, 64)}
    assert got == {1: 16384, 8: 16384, 16: 16384, 32: 16512, 64: 16768}
    for tokens in range(1, 65):
        assert got.get(tokens, deepgemm_probe.padded_rows(tokens, 8, 128)) == plan_rows(
            tokens * 8, 128, 128
        )


def test_gemm_shapes_per_tp():
    """gate_up N = 2 x 1536 / TP, K = 4096; down N = 4096, K = 1536 / TP; TP8 is not 128-aligned."""
    assert deepgemm_probe.gemms(2) == {"gate_up": (1536, 4096), "down": (4096, 768)}
    assert deepgemm_probe.gemms(4) == {"gate_up": (768, 4096), "down": (4096, 384)}
    with pytest.raises(SystemExit):
        deepgemm_probe.gemms(8)


def test_layout_pads_each_used_expert_in_order_and_leaves_the_tail_at_expert_0():
    """Experts 1 (3 rows) and 3 (130 rows): 128 rows of 1, 256 of 3, then zeros to M_sum."""
    counts = [0, 3, 0, 130]
    rows = deepgemm_probe.layout(counts, 640)
    assert rows == [1] * 128 + [3] * 256 + [0] * 256
    with pytest.raises(SystemExit):
        deepgemm_probe.layout(counts, 256)


def test_route_gives_distinct_top_k_per_token():
    """Each token's 8 experts are distinct: 8 x tokens rows, no expert above tokens."""
    counts = deepgemm_probe.route(5, deepgemm_probe.MODEL, torch.Generator().manual_seed(3))
    assert sum(counts) == 40 and max(counts) <= 5 and len(counts) == 128
    m_sum = deepgemm_probe.padded_rows(5, 8, 128)
    assert len(deepgemm_probe.layout(counts, m_sum)) == m_sum


def test_copies_pass_l2_four_times_within_memory():
    """Touched 10 MB of a 50 MB L2: 20 copies; a 30 GB tensor allows 2 (the floor)."""
    assert deepgemm_probe.copies_for(10e6, 50_000_000, 1e9) == 20
    assert deepgemm_probe.copies_for(500e6, 50_000_000, 1e9) == 3
    assert deepgemm_probe.copies_for(10e6, 50_000_000, 30e9) == 2


def test_arguments(tmp_path):
    """Tokens and TPs parse to lists; a TP whose shard is not 128-aligned exits."""
    wheel = tmp_path / "nvidia_cutlass-4.2.0.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    args = deepgemm_probe.parse(["--tokens", "1,64", "--tps", "4", "--wheel", str(wheel)])
    assert args.tokens == [1, 64] and args.tps == [4] and args.check
    with pytest.raises(SystemExit):
        deepgemm_probe.parse(["--tps", "8", "--wheel", str(wheel)])


def _repo(path: Path) -> str:
    """Return the commit of a small git repository laid out as DeepGEMM's."""
    files = {
        "csrc/python_api.cpp": "// api\n",
        "deep_gemm/__init__.py": "x = 1\n",
        "deep_gemm/include/deep_gemm/a.cuh": "// a\n",
        "tests/test_x.py": "pass\n",
        "README.md": "readme\n",
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(path), *env, "commit", "-qm", "x"], check=True)
    return subprocess.check_output(["git", "-C", str(path), "rev-parse", "HEAD"], text=True).strip()


def test_extract_keeps_what_the_build_reads_with_a_checked_manifest(tmp_path):
    """csrc/ and deep_gemm/ are kept, tests and README not; a changed file fails the check."""
    commit = _repo(tmp_path / "repo")
    out = tmp_path / "src"
    manifest = deepgemm_build.extract(tmp_path / "repo" / ".git", commit, out)
    assert manifest["commit"] == commit
    assert sorted(manifest["files"]) == [
        "csrc/python_api.cpp",
        "deep_gemm/__init__.py",
        "deep_gemm/include/deep_gemm/a.cuh",
    ]
    assert deepgemm_build.check(out) == json.loads((out / "manifest.json").read_text())
    (out / "deep_gemm" / "__init__.py").write_text("x = 2\n")
    with pytest.raises(SystemExit):
        deepgemm_build.check(out)


def test_stage_puts_cute_and_cutlass_under_the_package_include(tmp_path):
    """The wheel's cutlass_library/source/include/{cute,cutlass} land in deep_gemm/include."""
    src = tmp_path / "src"
    (src / "deep_gemm" / "include" / "deep_gemm").mkdir(parents=True)
    (src / "deep_gemm" / "__init__.py").write_text("")
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("cutlass_library/source/include/cute/tensor.hpp", "cute")
        whl.writestr("cutlass_library/source/include/cutlass/cutlass.h", "cutlass")
        whl.writestr("cutlass_library/source/tools/x.h", "other")
    root = deepgemm_build.stage(src, wheel, tmp_path / "build")
    include = root / "deep_gemm" / "include"
    assert (include / "cute" / "tensor.hpp").read_text() == "cute"
    assert (include / "cutlass" / "cutlass.h").read_text() == "cutlass"
    assert sorted(p.name for p in include.iterdir()) == ["cute", "cutlass", "deep_gemm"]


def test_link_flags_find_headers_and_versioned_libraries_in_pip_packages(tmp_path):
    """nvrtc.h and libnvrtc.so.13 from site/nvidia/cu13; a missing library exits."""
    cuda, site = tmp_path / "cuda", tmp_path / "site"
    for path in (cuda / "include" / "cuda.h", cuda / "lib64" / "libcudart.so"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (cuda / "lib64" / "stubs").mkdir()
    (cuda / "lib64" / "stubs" / "libcuda.so").write_text("")
    pip = site / "nvidia" / "cu13"
    for name in ("include/nvrtc.h", "include/cublasLt.h", "lib/libnvrtc.so.13"):
        (pip / name).parent.mkdir(parents=True, exist_ok=True)
        (pip / name).write_text("")
    with pytest.raises(SystemExit):
        deepgemm_build.link_flags(cuda, site)
    (pip / "lib" / "libcublasLt.so.13").write_text("")
    include, flags = deepgemm_build.link_flags(cuda, site)
    assert str(pip / "include") in include and str(cuda / "include") in include
    assert str(pip / "lib" / "libnvrtc.so.13") in flags
    assert f"-Wl,-rpath,{pip / 'lib'}" in flags


def test_summary_combines_both_gemms_of_a_layer():
    """e_math = both GEMMs' FLOPs over M_sum / (summed time x peak); a lone GEMM gives no row."""
    import deepgemm_summary

    rows = [
        {"tp": 2, "tokens": 1, "gemm": "gate_up", "m_sum": 128, "n": 10, "k": 10, "us": 1.0},
        {"tp": 2, "tokens": 1, "gemm": "down", "m_sum": 128, "n": 10, "k": 10, "us": 3.0},
        {"tp": 4, "tokens": 1, "gemm": "down", "m_sum": 128, "n": 10, "k": 10, "us": 3.0},
    ]
    for r in rows:
        r["frac_1979"] = 0.0
    got = deepgemm_summary.layers({"peak_fp8_tflops": 1e-6, "rows": rows})
    assert len(got) == 1 and got[0]["tp"] == 2
    assert got[0]["e_math"] == pytest.approx(2 * 2 * 128 * 100 / (4e-6 * 1e6), abs=1e-4)


def _elf(symbols: list[tuple[str, int, int]]) -> bytes:
    """Return a minimal ELF64 holding a symbol table of (name, st_info, st_shndx)."""
    import struct

    strtab = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in symbols)
    syms, at = b"\0" * 24, 1
    for name, info, shndx in symbols:
        syms += struct.pack("<IBBHQQ", at, info, 0x10, shndx, 0, 0)
        at += len(name) + 1
    body = strtab + syms
    shoff = 64 + len(body)
    head = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    head += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 0)
    sections = struct.pack("<IIQQQQIIQQ", *[0] * 10)
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strtab), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, 64 + len(strtab), len(syms), 1, 0, 8, 24)
    return head + body + sections


def test_symbols_lists_defined_global_functions_as_cuobjdump_does():
    """The kernel (global FUNC, defined) is listed; vprintf (undefined) and a local are not."""
    import deepgemm_symbols

    data = _elf([("kernel", 0x12, 5), ("vprintf", 0x12, 0), ("local_fn", 0x02, 5)])
    assert deepgemm_symbols.functions(data) == ["kernel"]
    with pytest.raises(ValueError):
        deepgemm_symbols.functions(b"not elf")


def test_link_variants_and_the_cuobjdump_shim(tmp_path, monkeypatch):
    """plain adds nothing; fs and static hide what they link; no cuobjdump: a shim in its place."""
    assert deepgemm_build.variant_flags("plain", "g++") == []
    assert "-Wl,--exclude-libs,ALL" in deepgemm_build.variant_flags("fs", str(tmp_path / "g++"))
    assert "-static-libstdc++" in deepgemm_build.variant_flags("static", "g++")
    monkeypatch.setenv("DG_JIT_NVCC_COMPILER", "nvcc")  # restored after the test
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    shim = deepgemm_build.cuda_shim(cuda, tmp_path / "build")
    assert (shim / "bin" / "cuobjdump").is_file() and shim != cuda
    (cuda / "bin" / "cuobjdump").write_text("")
    assert deepgemm_build.cuda_shim(cuda, tmp_path / "build") == cuda


def test_extract_refuses_a_folder_it_did_not_write_and_replaces_its_own_whole(tmp_path):
    """A target without manifest.json is refused untouched; a new extraction of ours replaces the
    old one whole (a file only the old one held is gone); nothing is left aside."""
    commit = _repo(tmp_path / "repo")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine\n")
    with pytest.raises(SystemExit, match="holds no manifest.json"):
        deepgemm_build.extract(tmp_path / "repo" / ".git", commit, foreign)
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]
    out = tmp_path / "src"
    deepgemm_build.extract(tmp_path / "repo" / ".git", commit, out)
    (out / "stale.txt").write_text("old\n")
    deepgemm_build.extract(tmp_path / "repo" / ".git", commit, out)
    assert not (out / "stale.txt").exists()
    assert deepgemm_build.check(out)["commit"] == commit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign", "repo", "src"]
