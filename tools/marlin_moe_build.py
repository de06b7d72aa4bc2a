"""Compile vLLM's own Marlin MoE (w4a16) path from its extracted sources as one torch extension,
with only the kernel instantiations a probe needs: bf16 activations, MXFP4 weights (fe2m1f, e8m0
scales in groups of 32), the thread configs ops.cu's tables offer at the probe's moe block sizes.
vLLM's generate_kernels.py writes every format's instantiations and the kernel_selector.h that
ops.cu includes; this writes the same two kinds of file for the needed few, into a build folder
(one .cu per instantiation, so ninja compiles them in parallel). The ops (vLLM's schemas, their
functions compiled from the sources unchanged): moe_wna16_marlin_gemm, gptq_marlin_repack,
moe_align_block_size, moe_sum, swigluoai_and_mul; and two of this build's own: kfe2m1f_id (the
scalar type id ops.cu expects) and thread_config (read or set one entry of ops.cu's thread-config
tables, to run an older release's tables on the same kernels).

Used by tools/marlin_moe_probe.py; `python tools/marlin_moe_build.py --list` prints what it
would compile (no GPU needed).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_engine_sources import check  # noqa: E402 - a sibling tool

from tilesweep.errors import tool_main  # noqa: E402 - after the sibling tools' folder

NAME = "vllm_marlin_moe"  # the extension (and torch.ops namespace) name
# MXFP4 with bf16 activations: generate_kernels.py's QUANT_CONFIGS entry (a, b, c, s type) and
# group_blocks 2 (group 32 / 16); stages 4 on sm_80+, zero points none.
TYPES = ("kBFloat16", "kFE2M1f", "kBFloat16", "kFE8M0fnu")
GROUP_BLOCKS, STAGES = 2, 4
OPERANDS = ("a_type", "b_type", "c_type", "s_type")  # ops.cu's names for the four types
# nvcc flags as vLLM's CMake gives this path: torch's common flags less the no-half ones
# (cmake/utils.cmake, CUDA >= 12), ENABLE_FP8, and the template stub flag (CMakeLists.txt, CUDA
# >= 12.8: kernels instantiated in one file and launched from ops.cu).
CUDA_FLAGS = [
    "-O3",
    "-std=c++17",
    "-DENABLE_FP8",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-static-global-template-stub=false",
]
# The wheel's code for these kernels on an H100: CMakeLists.txt builds the Marlin MoE files for
# cuda_archs_loose_intersection("8.0+PTX", CUDA_ARCHS), which for a 9.0 target keeps 8.0+PTX
# (cmake/utils.cmake: the highest source arch at or below the target, across majors for PTX):
# sm_80 code, which an sm_90 card cannot run, and compute_80 PTX, which its driver compiles for
# sm_90 at load. So compute_80 PTX, assembled for sm_90 here (nvcc's ptxas, in the parallel
# build, rather than the driver's, serially at first launch); a gencode flag also keeps torch
# from adding its own arch flags.
WHEEL_GENCODE = "arch=compute_80,code=sm_90"
BINDINGS = """// Written by tools/marlin_moe_build.py: schemas of the ops this build registers.
#include <torch/all.h>
#include <torch/library.h>
#include "core/registration.h"
#include "core/scalar_type.hpp"

void moe_sum(torch::Tensor& input, torch::Tensor& output);
void moe_align_block_size(torch::Tensor topk_ids, int64_t num_experts, int64_t block_size,
                          torch::Tensor sorted_token_ids, torch::Tensor experts_ids,
                          torch::Tensor num_tokens_post_pad,
                          std::optional<torch::Tensor> maybe_expert_map);
void swigluoai_and_mul(torch::Tensor& out, torch::Tensor& input, double alpha, double limit);

namespace marlin_moe_wna16 {
typedef struct { int thread_k; int thread_n; int num_threads; } thread_config_t;
extern thread_config_t small_batch_thread_configs[];
extern thread_config_t large_batch_thread_configs[];
}

int64_t kfe2m1f_id() { return vllm::kFE2M1f.id(); }

std::vector<int64_t> thread_config(int64_t large, int64_t index, std::vector<int64_t> value) {
  auto* table = large ? marlin_moe_wna16::large_batch_thread_configs
                      : marlin_moe_wna16::small_batch_thread_configs;
  auto& entry = table[index];
  std::vector<int64_t> old{entry.thread_k, entry.thread_n, entry.num_threads};
  if (value.size() == 3) entry = {int(value[0]), int(value[1]), int(value[2])};
  return old;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("moe_wna16_marlin_gemm(Tensor! a, Tensor? c_or_none, Tensor! b_q_weight, "
        "Tensor? b_bias_or_none, Tensor! b_scales, Tensor? a_scales, Tensor? global_scale, "
        "Tensor? b_zeros_or_none, Tensor? g_idx_or_none, Tensor? perm_or_none, "
        "Tensor! workspace, Tensor sorted_token_ids, Tensor! expert_ids, "
        "Tensor! num_tokens_past_padded, Tensor! topk_weights, int moe_block_size, int top_k, "
        "bool mul_topk_weights, int b_type_id, int size_m, int size_n, int size_k, "
        "bool is_full_k, bool use_atomic_add, bool use_fp32_reduce, bool is_zp_float, "
        "int thread_k, int thread_n, int blocks_per_sm) -> Tensor");
  m.def("gptq_marlin_repack(Tensor b_q_weight, Tensor perm, SymInt size_k, SymInt size_n, "
        "int num_bits, bool is_a_8bit) -> Tensor");
  m.def("moe_sum(Tensor input, Tensor! output) -> ()");
  m.impl("moe_sum", torch::kCUDA, &moe_sum);
  m.def("moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, "
        "Tensor! sorted_token_ids, Tensor! experts_ids, Tensor! num_tokens_post_pad, "
        "Tensor? maybe_expert_map) -> ()");
  m.impl("moe_align_block_size", torch::kCUDA, &moe_align_block_size);
  m.def("swigluoai_and_mul(Tensor! out, Tensor input, float alpha=1.702, float limit=7.0) -> ()");
  m.impl("swigluoai_and_mul", torch::kCUDA, &swigluoai_and_mul);
  m.def("kfe2m1f_id() -> int", &kfe2m1f_id);
  m.def("thread_config(int large, int index, int[] value) -> int[]", &thread_config);
}
"""


def block_size_m(tokens: int, top_k: int, experts: int) -> int:
    """Return fused_marlin_moe's moe block size: the first of 8..64 a full block outnumbers."""
    for size in (8, 16, 32, 48, 64):
        if tokens * top_k / experts / size < 0.9:
            return size
    return 64


def thread_tables(ops_cu: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Return ops.cu's small- and large-batch thread configs (thread_k, thread_n, threads)."""
    text = ops_cu.read_text()
    tables = {}
    for which in ("small", "large"):
        found = re.search(rf"{which}_batch_thread_configs\[\]\s*=\s*\{{(.*?)\}};", text, re.S)
        if found is None:
            sys.exit(f"{ops_cu}: no {which}_batch_thread_configs table")
        body = re.sub(r"//[^\n]*", "", found.group(1))
        triples = re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\}", body)
        tables[which] = [tuple(int(v) for v in t) for t in triples]
    return tables


def instantiations(block_sizes, tables: dict) -> list[tuple[int, int, int, int, bool]]:
    """Return (threads, m_blocks, n_blocks, k_blocks, m_block_size_8) for the block sizes."""
    kept = []
    for size in sorted(set(block_sizes)):
        m_blocks = math.ceil(size / 16)
        table = tables["large"] if m_blocks > 1 else tables["small"]
        for thread_k, thread_n, threads in table:
            kept.append((threads, m_blocks, thread_n // 16, thread_k // 16, size == 8))
    return list(dict.fromkeys(kept))


def _template_args(kernel: tuple) -> str:
    """Return Marlin's template arguments for one instantiation."""
    threads, m_blocks, n_blocks, k_blocks, m8 = kernel
    types = ", ".join(f"vllm::{t}.id()" for t in TYPES)
    flag = "true" if m8 else "false"
    shape = f"{threads}, {m_blocks}, {n_blocks}, {k_blocks}, {flag}"
    return f"{types}, {shape}, {STAGES}, {GROUP_BLOCKS}, false"


def _selector(kernels: list) -> str:
    """Return a kernel_selector.h that picks among the built instantiations only."""
    lines = ["// Written by tools/marlin_moe_build.py for the instantiations it builds."]
    for i, kernel in enumerate(kernels):
        threads, m_blocks, n_blocks, k_blocks, m8 = kernel
        cond = " && ".join(
            [f"{v} == vllm::{t}" for v, t in zip(OPERANDS, TYPES, strict=True)]
            + [f"threads == {threads}", f"thread_m_blocks == {m_blocks}"]
            + [f"thread_n_blocks == {n_blocks}", f"thread_k_blocks == {k_blocks}"]
            + [f"m_block_size_8 == {'true' if m8 else 'false'}", f"stages == {STAGES}"]
            + [f"group_blocks == {GROUP_BLOCKS}", "is_zp_float == false"]
        )
        lines.append(f"{'else ' if i else ''}if ({cond})")
        lines.append(f"  kernel = Marlin<{_template_args(kernel)}>;")
    return "\n".join(lines) + "\n"


def write_build(src: Path, build: Path, kernels: list) -> list[Path]:
    """Write the selector, one file per instantiation and the bindings; return the sources."""
    build.mkdir(parents=True, exist_ok=True)
    (build / "kernel_selector.h").write_text(_selector(kernels))
    sources = []
    for kernel in kernels:
        name = "kernel_" + "_".join(str(int(v)) for v in kernel) + ".cu"
        text = (
            '#include "kernel.h"\n#include "marlin_template.h"\n\n'
            "namespace MARLIN_NAMESPACE_NAME {\n"
            f"template __global__ void Marlin<{_template_args(kernel)}>(MARLIN_KERNEL_PARAMS);\n"
            "}\n"
        )
        if not (build / name).is_file() or (build / name).read_text() != text:
            (build / name).write_text(text)  # unchanged files keep ninja's build
        sources.append(build / name)
    (build / "bindings.cpp").write_text(BINDINGS)
    csrc = src / "csrc"
    return [
        csrc / "moe/marlin_moe_wna16/ops.cu",
        *sources,
        csrc / "quantization/marlin/gptq_marlin_repack.cu",
        csrc / "moe/moe_align_sum_kernels.cu",
        csrc / "activation_kernels.cu",
        build / "bindings.cpp",
    ]


def build(src: Path, build_dir: Path, block_sizes, gencode: str = WHEEL_GENCODE, verbose=False):
    """Compile and load the extension; return its manifest, tables, kernels and build seconds."""
    import torch.utils.cpp_extension as ext  # heavy; only where the build runs

    manifest = check(src)
    tables = thread_tables(src / "csrc/moe/marlin_moe_wna16/ops.cu")
    kernels = instantiations(block_sizes, tables)
    sources = write_build(src, build_dir, kernels)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    started = time.monotonic()
    ext.load(
        name=NAME,
        sources=[str(s) for s in sources],
        extra_include_paths=[
            str(src / "csrc"),
            str(src / "csrc/moe/marlin_moe_wna16"),
            str(build_dir),
        ],
        extra_cflags=["-O2", "-std=c++17"],
        extra_cuda_cflags=[*CUDA_FLAGS, f"-gencode={gencode}"],
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=verbose,
    )
    return {
        "manifest": manifest,
        "tables": tables,
        "kernels": kernels,
        "build_s": round(time.monotonic() - started, 1),
        "gencode": gencode,
    }


def main() -> int:
    """Print the instantiations a build for the given tokens would compile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path(".engine_kernels/vllm-src-0.16.0"))
    parser.add_argument("--tokens", default="1,2,4,8,16,32,64")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--list", action="store_true", help="print the instantiations only")
    args = parser.parse_args()
    tables = thread_tables(args.src / "csrc/moe/marlin_moe_wna16/ops.cu")
    sizes = {block_size_m(int(t), args.top_k, args.experts) for t in args.tokens.split(",")}
    for kernel in instantiations(sizes, tables):
        print(f"Marlin<{_template_args(kernel)}>")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("marlin_moe_build", main))
