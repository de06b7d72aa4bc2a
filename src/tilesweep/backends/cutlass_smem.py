"""Shared-memory accounting for CUTLASS grouped GEMMs, read from CUTLASS's own types.

Each cell (arch, dtype, tile, stages, epilogue, cluster) becomes a namespace in a small C++
translation unit that instantiates ``cutlass::gemm::collective::CollectiveBuilder`` (mainloop),
``cutlass::epilogue::collective::CollectiveBuilder`` (epilogue) and
``cutlass::gemm::kernel::GemmUniversal`` for a ptr-array grouped GEMM
(``GroupProblemShape<Shape<int,int,int>>``, A row-major, B column-major, FP32 accumulate).
``main()`` prints one JSON line per cell from the types themselves: ``SharedStorageSize`` (what
``GemmUniversalAdapter`` asks for as dynamic shared memory), ``sizeof`` of the collectives' tensor
storage, the mainloop ``DispatchPolicy::Stages`` and the epilogue ``StagesC``/``StagesD``.

No GPU is needed. The numbers come from the host pass, which is what the launcher itself uses
(``GemmUniversalAdapter::initialize`` reads ``GemmKernel::SharedStorageSize`` on the host; a
device-side ``static_assert`` on the same value was checked to agree for sm_90a and sm_120a).
The ``CUTLASS_ARCH_MMA_SM{90,100,120}_SUPPORTED`` macros that gate the builders are defined by
``cutlass/arch/config.h`` from the CUDA version alone (12.0+ for SM90, 12.8+ for SM100/SM120),
so the host pass needs no ``-arch`` or feature macro. Without the device check (below) the TU
is wrapped in ``#ifndef __CUDA_ARCH__`` so that nvcc's device pass sees an empty file. One TU per
arch chunk, flags: ``nvcc -std=c++17 --expt-relaxed-constexpr -w -DNDEBUG
-gencode=arch=compute_XXa,code=sm_XXa -I<cutlass include>`` (XX = 90, 100 or 120; the ``a``
target matters for the device check, whose kernel bodies are arch-conditional).

Schedules per arch (all ptr-array), one per cell: ``kernel_schedule(arch, tile_m)`` decides it,
for this accounting and for the SM90 program's decode job alike, and a cell may name one itself
(``schedule``):

* ``sm_90``: ``cooperative`` (mainloop ``KernelPtrArrayTmaWarpSpecializedCooperative``, epilogue
  ``PtrArrayTmaWarpSpecializedCooperative``) for tiles of 128 rows or more, ``pingpong``
  (mainloop ``KernelPtrArrayTmaWarpSpecializedPingpong``, epilogue
  ``PtrArrayTmaWarpSpecializedPingpong``) below that: the cooperative kernel's body requires
  tile M >= 128, and the ping-pong kernel is what ``gpu/cutlass_sm90_grouped.cu`` times for a
  64-row tile. The SM90 ``EpilogueScheduleAuto`` picks ``NoSmemWarpSpecialized``, whose
  ``DefaultEpilogue`` rejects ptr-array strides ("StrideCD must be rank-3"), so the ptr-array TMA
  epilogue that examples 57/68 use is named.
* ``sm_100``: ``1sm``: mainloop ``KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100``, epilogue
  ``PtrArrayTmaWarpSpecialized1Sm`` (example 75). The SM100 auto epilogue resolves to the
  non-array ``TmaWarpSpecialized1Sm``, so the ptr-array one is named.
* ``sm_120``: ``cooperative``: mainloop tag ``KernelPtrArrayTmaWarpSpecializedCooperative``,
  which the SM120 block-scaled builder turns into
  ``KernelPtrArrayTmaWarpSpecializedCooperativeBlockScaledSm120``; epilogue
  ``EpilogueScheduleAuto``, which for pointer layouts resolves to
  ``Sm120PtrArrayTmaWarpSpecialized`` (as example 79d does).

Epilogues:

* ``default``: ``fusion::LinearCombination<bfloat16_t, float, bfloat16_t, float>``, BF16 C and D
  (row-major, 8-element alignment) with the schedule above.
* ``finalize``: ``fusion::LinearCombination<float, float, float, float>``, FP32 C and D
  (row-major, 4-element alignment), same schedule. It stands for the brief's "finalize"
  epilogue: the MoE finalize step reads and writes a wider FP32 output (it accumulates the
  router-weighted expert outputs, ``out = alpha * acc + beta * out``), and an FP32 C/D pair is
  the largest epilogue staging CUTLASS's ptr-array epilogues build for that; it is the one
  fusion that every arch's ptr-array epilogue supports (the bias/scale fusions are not
  specialised for ptr-array on SM90/SM120). Caveat: the production TensorRT-LLM/FlashInfer
  finalize (``ScaledAccPerRowBiasPerColScaleScatter``, not part of CUTLASS) sets ``ElementD =
  void`` and scatters from registers, so it stages no D tile at all; this choice is an upper
  bound for that kernel, and a faithful stand-in for the brief's FP32-staging model.

Device check (``account(..., device_check=True)``, the default): some rejections live in the
kernel body, which only the device pass compiles (e.g. the SM90 cooperative kernel's
"Cooperative kernel requires Tile Size to be greater than or equal to 128 along the
M-dimension"). With the check, each cell's namespace also holds an uncalled ``__device__``
function that calls ``Kernel::operator()``, so the device pass instantiates the body and its
static_asserts fire; nothing is emitted. Cost, measured on 2 cores with nvcc 13.0: a host-only
TU of 8 cells takes about 12 s (1.5 s per cell); with the device check one SM120 cell costs
about 46 s of CPU and 5 GiB of memory, 4 cells 70 s and 8 GiB, 12 cells 82 s and 9 GiB, so
groups are at most 8 cells and parallel compiles are capped by available memory.

Each row has: ``status`` ("ok" | "compile" | "skipped"), ``reason`` (static_assert text or first
error line), ``error_location`` (file:line of that error), ``smem_bytes``
(``GemmKernel::SharedStorageSize``), ``mainloop_smem_bytes`` / ``epilogue_smem_bytes`` (sizeof of
the collectives' ``TensorStorage``: operand stages, C/D staging), ``other_smem_bytes`` (the rest:
pipeline barriers, scheduler, tensormaps, padding), ``mainloop_shared_storage_bytes`` /
``epilogue_shared_storage_bytes`` (sizeof of the collectives' ``SharedStorage``; the latter is
the ``StageCountAutoCarveout`` value), ``stages`` (mainloop ``DispatchPolicy::Stages``),
``epilogue_stages`` / ``epilogue_stages_c`` (``StagesD`` / ``StagesC``), ``epilogue_tile``,
``threads_per_block`` (the kernel's ``MaxThreadsPerBlock``), ``builder_smem_capacity`` (the
builder's ``smXX_smem_capacity_bytes``), ``fits`` (smem_bytes <= that capacity), ``alignment_a`` /
``alignment_b``, ``cutlass_version``, ``schedule`` (the cell's kernel schedule: ``cooperative``,
``pingpong`` or ``1sm``), ``schedule_types`` (the requested tags and the resolved mainloop
schedule, mainloop dispatch policy and epilogue dispatch policy type names), ``toolchain`` (nvcc
version), ``cached``,
``compile_seconds`` and ``cells_in_tu`` (wall time of the TU that produced the row, and how many
cells shared it), and ``cell`` (the input with defaults filled in).

Results are cached per cell under ``workdir/cache/<key>.json``, key = sha256 of the cell's
standalone generated source (which embeds the flags, the CUTLASS version and the device-check
switch) plus the nvcc version string. Rows that are not a property of the cell (no nvcc, a
timeout, a catastrophic error such as a missing header) are not cached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

COMPILE_TIMEOUT_S = 900
RUN_TIMEOUT_S = 60
MAX_GROUP = 8
DEVICE_CHECK_GIB = 9  # peak cicc memory of one device-checked TU (measured: 5 GiB for 1 cell)
BASE_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-w", "-DNDEBUG")


@dataclass(frozen=True)
class ArchSpec:
    """C++ spellings of one architecture's builder arguments; `schedules` maps each kernel
    schedule's name to its (mainloop, epilogue) schedule tags."""

    tag: str
    gencode: str
    opclass: str
    schedules: dict[str, tuple[str, str]]
    capacity: str
    dtypes: tuple[str, ...]


ARCHS = {
    "sm_90": ArchSpec(
        tag="cutlass::arch::Sm90",
        gencode="arch=compute_90a,code=sm_90a",
        opclass="cutlass::arch::OpClassTensorOp",
        schedules={
            "cooperative": (
                "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
                "cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative",
            ),
            "pingpong": (
                "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong",
                "cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong",
            ),
        },
        capacity="cutlass::gemm::collective::detail::sm90_smem_capacity_bytes",
        dtypes=("fp8",),
    ),
    "sm_100": ArchSpec(
        tag="cutlass::arch::Sm100",
        gencode="arch=compute_100a,code=sm_100a",
        opclass="cutlass::arch::OpClassBlockScaledTensorOp",
        schedules={
            "1sm": (
                "cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100",
                "cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm",
            )
        },
        capacity="cutlass::arch::sm100_smem_capacity_bytes",
        dtypes=("nvfp4",),
    ),
    "sm_120": ArchSpec(
        tag="cutlass::arch::Sm120",
        gencode="arch=compute_120a,code=sm_120a",
        opclass="cutlass::arch::OpClassBlockScaledTensorOp",
        schedules={
            "cooperative": (
                "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
                "cutlass::epilogue::collective::EpilogueScheduleAuto",
            )
        },
        capacity="cutlass::arch::sm120_smem_capacity_bytes",
        dtypes=("nvfp4",),
    ),
}

# The SM90 cooperative kernel's body requires tile M >= 128 (a static_assert); below it, ping-pong.
SM90_COOPERATIVE_MIN_TILE_M = 128


def kernel_schedule(arch: str, tile_m: int) -> str:
    """Return the kernel schedule of a CUTLASS cell of this architecture and tile height: on
    sm_90 ping-pong below 128 rows and cooperative from 128, elsewhere the architecture's one
    schedule. The accounting and the SM90 program's decode job both ask here."""
    if arch == "sm_90" and tile_m < SM90_COOPERATIVE_MIN_TILE_M:
        return "pingpong"
    return next(iter(ARCHS[arch].schedules))


# dtype -> (A/B element, alignment in elements: 16 bytes)
DTYPES = {
    "fp8": ("cutlass::float_e4m3_t", 16),
    "nvfp4": ("cutlass::nv_float4_t<cutlass::float_e2m1_t>", 32),
}

# epilogue -> (C element, D element, alignment of C and D in elements: 16 bytes)
EPILOGUES = {
    "default": ("cutlass::bfloat16_t", "cutlass::bfloat16_t", 8),
    "finalize": ("float", "float", 4),
}

NUMERIC_FIELDS = (
    "smem_bytes",
    "threads_per_block",
    "mainloop_smem_bytes",
    "epilogue_smem_bytes",
    "other_smem_bytes",
    "mainloop_shared_storage_bytes",
    "epilogue_shared_storage_bytes",
    "stages",
    "epilogue_stages",
    "epilogue_stages_c",
    "epilogue_tile",
    "builder_smem_capacity",
)

PRELUDE = r"""
#include <cstdio>
#include <cstring>
#include <type_traits>
#include "cutlass/cutlass.h"
#include "cutlass/version.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/arch.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

using TsProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;

template <class T> const char* ts_name() { return __PRETTY_FUNCTION__; }

template <class T, class = void> struct ts_stages { static constexpr int value = -1; };
template <class T>
struct ts_stages<T, std::void_t<decltype(T::DispatchPolicy::Stages)>> {
  static constexpr int value = T::DispatchPolicy::Stages;
};
template <class T, class = void> struct ts_stages_c { static constexpr int value = -1; };
template <class T>
struct ts_stages_c<T, std::void_t<decltype(T::DispatchPolicy::StagesC)>> {
  static constexpr int value = T::DispatchPolicy::StagesC;
};
template <class T, class = void> struct ts_stages_d { static constexpr int value = -1; };
template <class T>
struct ts_stages_d<T, std::void_t<decltype(T::DispatchPolicy::StagesD)>> {
  static constexpr int value = T::DispatchPolicy::StagesD;
};
template <class T, class = void> struct ts_tensors { static constexpr int value = -1; };
template <class T>
struct ts_tensors<T, std::void_t<typename T::TensorStorage>> {
  static constexpr int value = int(sizeof(typename T::TensorStorage));
};
template <class T, class = void> struct ts_epi_tile {
  static constexpr int m = -1, n = -1;
};
template <class T>
struct ts_epi_tile<T, std::void_t<typename T::EpilogueTile>> {
  static constexpr int m = int(cute::size<0>(typename T::EpilogueTile{}));
  static constexpr int n = int(cute::size<1>(typename T::EpilogueTile{}));
};
template <class T, class = void> struct ts_threads { static constexpr int value = -1; };
template <class T>
struct ts_threads<T, std::void_t<decltype(T::MaxThreadsPerBlock)>> {
  static constexpr int value = int(T::MaxThreadsPerBlock);
};
template <class T, class = void> struct ts_schedule { using type = void; };
template <class T>
struct ts_schedule<T, std::void_t<typename T::DispatchPolicy::Schedule>> {
  using type = typename T::DispatchPolicy::Schedule;
};

"""

# Host-only: JSON printing. The device pass never sees it.
REPORTER = r"""
static void ts_str(const char* s) {
  std::putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') std::putchar('\\');
    std::putchar(*s);
  }
  std::putchar('"');
}

template <class Kernel, class Mainloop, class Epilogue>
void ts_report(int index, int align_a, int align_b, int capacity) {
  std::printf("{\"index\": %d, \"smem_bytes\": %d", index, int(Kernel::SharedStorageSize));
  std::printf(", \"threads_per_block\": %d", ts_threads<Kernel>::value);
  std::printf(", \"mainloop_smem_bytes\": %d", ts_tensors<Mainloop>::value);
  std::printf(", \"epilogue_smem_bytes\": %d", ts_tensors<Epilogue>::value);
  std::printf(", \"mainloop_shared_storage_bytes\": %d",
              int(sizeof(typename Mainloop::SharedStorage)));
  std::printf(", \"epilogue_shared_storage_bytes\": %d",
              int(sizeof(typename Epilogue::SharedStorage)));
  std::printf(", \"stages\": %d", ts_stages<Mainloop>::value);
  std::printf(", \"epilogue_stages\": %d", ts_stages_d<Epilogue>::value);
  std::printf(", \"epilogue_stages_c\": %d", ts_stages_c<Epilogue>::value);
  std::printf(", \"epilogue_tile\": [%d, %d]", ts_epi_tile<Epilogue>::m, ts_epi_tile<Epilogue>::n);
  std::printf(", \"alignment_a\": %d, \"alignment_b\": %d", align_a, align_b);
  std::printf(", \"builder_smem_capacity\": %d", capacity);
  std::printf(", \"cutlass_version\": \"%d.%d.%d\"", CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH);
  std::printf(", \"mainloop_schedule\": ");
  ts_str(ts_name<typename ts_schedule<Mainloop>::type>());
  std::printf(", \"mainloop_policy\": ");
  ts_str(ts_name<typename Mainloop::DispatchPolicy>());
  std::printf(", \"epilogue_policy\": ");
  ts_str(ts_name<typename Epilogue::DispatchPolicy>());
  std::printf("}\n");
}
"""

CELL_TEMPLATE = r"""
namespace {ns} {{
using Tile = cute::Shape<cute::Int<{tile_m}>, cute::Int<{tile_n}>, cute::Int<{tile_k}>>;
using Cluster = cute::Shape<cute::Int<{cluster_m}>, cute::Int<{cluster_n}>, cute::_1>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    {arch_tag}, {opclass}, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
    float, float,
    {elem_c}, cutlass::layout::RowMajor*, {align_cd},
    {elem_d}, cutlass::layout::RowMajor*, {align_cd},
    {epi_sched},
    cutlass::epilogue::fusion::LinearCombination<{elem_d}, float, {elem_c}, float>
  >::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    {arch_tag}, {opclass},
    {elem_ab}, cutlass::layout::RowMajor*, {align_ab},
    {elem_ab}, cutlass::layout::ColumnMajor*, {align_ab},
    float, Tile, Cluster,
    {stage_count},
    {main_sched}
  >::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<TsProblemShape, Mainloop, Epilogue>;
#ifndef __CUDA_ARCH__
inline void report(int index) {{
  ts_report<Kernel, Mainloop, Epilogue>(index, {align_ab}, {align_ab}, int({capacity}));
}}
#elif TS_DEVICE_CHECK
// Odr-uses the kernel body in the device pass so that its static_asserts are checked; the
// function is never called, so no kernel code is emitted.
__device__ inline void probe(Kernel::Params const& params, char* smem) {{
  Kernel{{}}(params, smem);
}}
#endif
}}  // namespace {ns}
"""


@dataclass
class Unit:
    """One cell to compile: its position, normalized form and cache key."""

    index: int
    cell: dict
    key: str


def cutlass_include_dir() -> Path | None:
    """Return the CUTLASS include dir: $CUTLASS_INCLUDE_DIR, else the nvidia-cutlass package's."""
    env = os.environ.get("CUTLASS_INCLUDE_DIR")
    if env and (Path(env) / "cutlass" / "version.h").is_file():
        return Path(env)
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        return None
    inc = Path(spec.origin).parent / "source" / "include"
    return inc if (inc / "cutlass" / "version.h").is_file() else None


def cutlass_util_include_dir() -> Path | None:
    """Return CUTLASS's tools/util/include next to the include dir, if present."""
    inc = cutlass_include_dir()
    if inc is None:
        return None
    util = inc.parent / "tools" / "util" / "include"
    return util if util.is_dir() else None


def _pypi_nvcc() -> str | None:
    """Return an nvcc shipped by the PyPI nvidia-cuda-nvcc packages, if one is installed."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for cand in sorted(Path(root).glob("*/bin/nvcc")):
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


def find_nvcc() -> str | None:
    """Return a usable nvcc path: $NVCC, PATH, /usr/local/cuda/bin/nvcc, then PyPI's, or None."""
    env = os.environ.get("NVCC")
    if env and os.access(env, os.X_OK):
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    if os.access(default, os.X_OK):
        return str(default)
    return _pypi_nvcc()


@lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """Return nvcc's release and build lines as one string."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    lines = [ln.strip() for ln in out.splitlines() if "release" in ln or ln.startswith("Build")]
    return "; ".join(lines) or out.strip().splitlines()[-1]


def cutlass_version(include: Path) -> str:
    """Return MAJOR.MINOR.PATCH parsed from the headers' cutlass/version.h."""
    text = (include / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{n}\s+(\d+)", text) for n in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def normalize(cell: dict) -> tuple[dict, str | None]:
    """Return the cell with defaults filled in, and why it is unsupported (or None)."""
    c = dict(cell)
    c.setdefault("stages", "auto")
    c.setdefault("epilogue", "default")
    c.setdefault("cluster_m", 1)
    c.setdefault("cluster_n", 1)
    arch = c.get("arch")
    if arch in ARCHS and isinstance(c.get("tile_m"), int):
        c.setdefault("schedule", kernel_schedule(arch, c["tile_m"]))
    if arch not in ARCHS:
        return c, f"unsupported arch {arch!r} (known: {', '.join(ARCHS)})"
    if c.get("dtype") not in ARCHS[arch].dtypes:
        return c, f"dtype {c.get('dtype')!r} not modelled for {arch} (known: {ARCHS[arch].dtypes})"
    if c["epilogue"] not in EPILOGUES:
        return c, f"unknown epilogue {c['epilogue']!r} (known: {', '.join(EPILOGUES)})"
    for k in ("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n"):
        if not isinstance(c.get(k), int) or isinstance(c.get(k), bool) or c[k] < 1:
            return c, f"{k} must be a positive int, got {c.get(k)!r}"
    if c["schedule"] not in ARCHS[arch].schedules:
        known = ", ".join(ARCHS[arch].schedules)
        return c, f"unknown schedule {c['schedule']!r} for {arch} (known: {known})"
    st = c["stages"]
    if st != "auto" and (not isinstance(st, int) or isinstance(st, bool) or st < 1):
        return c, f"stages must be 'auto' or a positive int, got {st!r}"
    return c, None


def stage_count_expr(cell: dict) -> str:
    """Return the C++ StageCount type for the cell's stages."""
    if cell["stages"] == "auto":
        return (
            "cutlass::gemm::collective::StageCountAutoCarveout<"
            "static_cast<int>(sizeof(typename Epilogue::SharedStorage))>"
        )
    return f"cutlass::gemm::collective::StageCount<{int(cell['stages'])}>"


def cell_body(cell: dict, ns: str) -> str:
    """Return the C++ namespace that instantiates one cell's kernel types."""
    spec = ARCHS[cell["arch"]]
    main_sched, epi_sched = spec.schedules[cell["schedule"]]
    elem_ab, align_ab = DTYPES[cell["dtype"]]
    elem_c, elem_d, align_cd = EPILOGUES[cell["epilogue"]]
    return CELL_TEMPLATE.format(
        ns=ns,
        tile_m=cell["tile_m"],
        tile_n=cell["tile_n"],
        tile_k=cell["tile_k"],
        cluster_m=cell["cluster_m"],
        cluster_n=cell["cluster_n"],
        arch_tag=spec.tag,
        opclass=spec.opclass,
        elem_c=elem_c,
        elem_d=elem_d,
        align_cd=align_cd,
        epi_sched=epi_sched,
        elem_ab=elem_ab,
        align_ab=align_ab,
        stage_count=stage_count_expr(cell),
        main_sched=main_sched,
        capacity=spec.capacity,
    )


def compile_flags(arch: str, include: Path) -> list[str]:
    """Return the nvcc flags (without input/output) for a TU of one arch."""
    return [*BASE_FLAGS, f"-gencode={ARCHS[arch].gencode}", f"-I{include}"]


def tu_source(
    arch: str, bodies: list[str], version: str, device_check: bool = True
) -> tuple[str, list[tuple[int, int]]]:
    """Return a TU for the bodies and each body's (first, last) line number in it."""
    head = (
        f"// tilesweep cutlass_smem TU; cutlass {version}; flags: {' '.join(BASE_FLAGS)} "
        f"-gencode={ARCHS[arch].gencode}\n#define TS_DEVICE_CHECK {int(device_check)}\n"
        f"{'' if device_check else '#ifndef __CUDA_ARCH__'}\n{PRELUDE}"
        f"#ifndef __CUDA_ARCH__\n{REPORTER}#endif\n"
    )
    parts, spans = [head], []
    line = head.count("\n") + 1
    for body in bodies:
        n = body.count("\n")
        spans.append((line, line + n))
        parts.append(body)
        line += n
    calls = "".join(f"  c{i}::report({i});\n" for i in range(len(bodies)))
    parts.append(f"\n#ifndef __CUDA_ARCH__\nint main() {{\n{calls}  return 0;\n}}\n#endif\n")
    parts.append("" if device_check else "#endif  // __CUDA_ARCH__\n")
    return "".join(parts), spans


def cache_key(cell: dict, version: str, toolchain: str, device_check: bool = True) -> str:
    """Return sha256 of the cell's standalone TU source plus the nvcc version."""
    src, _ = tu_source(cell["arch"], [cell_body(cell, "c0")], version, device_check)
    return hashlib.sha256((src + "\n" + toolchain).encode()).hexdigest()


def atomic_write(path: Path, text: str) -> None:
    """Write text to path via a temp file in the same dir and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_cache(workdir: Path, key: str) -> dict | None:
    """Return the cached result for key, or None."""
    path = workdir / "cache" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def base_row(cell: dict, status: str, reason: str, toolchain: str, version: str) -> dict:
    """Return a result row with every field present and numbers left empty."""
    row = {"status": status, "reason": reason, "error_location": "", "cell": cell}
    row.update({k: None for k in NUMERIC_FIELDS})
    row.update(alignment_a=None, alignment_b=None, fits=None, cutlass_version=version)
    row.update(schedule=cell.get("schedule"), schedule_types=requested_tags(cell))
    row.update(toolchain=toolchain, cached=False)
    return row


def requested_tags(cell: dict) -> dict:
    """Return the schedule tags the cell asks the builders for (none for an unknown schedule)."""
    spec = ARCHS.get(cell.get("arch"))
    if spec is None or cell.get("schedule") not in spec.schedules:
        return {}
    mainloop, epilogue = spec.schedules[cell["schedule"]]
    return {"mainloop_requested": mainloop, "epilogue_requested": epilogue}


def type_name(pretty: str) -> str:
    """Return the type name inside a __PRETTY_FUNCTION__ string of ts_name<T>()."""
    m = re.search(r"\[with T = (.*)\]$", pretty)
    return m.group(1) if m else pretty


def ok_row(cell: dict, data: dict, toolchain: str) -> dict:
    """Return a result row from one JSON line printed by the compiled TU."""
    row = base_row(cell, "ok", "", toolchain, data["cutlass_version"])
    for k in NUMERIC_FIELDS:
        if k in data:
            row[k] = None if data[k] == -1 else data[k]
    row["epilogue_tile"] = data["epilogue_tile"] if min(data["epilogue_tile"]) > 0 else None
    row["alignment_a"], row["alignment_b"] = data["alignment_a"], data["alignment_b"]
    known = [row[k] or 0 for k in ("mainloop_smem_bytes", "epilogue_smem_bytes")]
    row["other_smem_bytes"] = row["smem_bytes"] - sum(known)
    row["fits"] = row["smem_bytes"] <= row["builder_smem_capacity"]
    row["schedule_types"].update(
        mainloop=type_name(data["mainloop_schedule"]),
        mainloop_policy=type_name(data["mainloop_policy"]),
        epilogue=type_name(data["epilogue_policy"]),
    )
    return row


ERROR_RE = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<fatal>catastrophic )?error: (?P<msg>.*)$"
)
ASSERT_RE = re.compile(r'static assertion failed with "(?P<msg>.*)"')


def error_blocks(log: str) -> list[list[str]]:
    """Return the compiler log split into blocks, each starting at an 'error:' line."""
    blocks: list[list[str]] = []
    for line in log.splitlines():
        if ERROR_RE.match(line) or " error: " in line or line.startswith("error:"):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def block_reason(block: list[str]) -> tuple[str, str]:
    """Return (one-line reason, 'file:line') for one error block."""
    m = ERROR_RE.match(block[0])
    if not m:
        return block[0].strip()[:400], ""
    # A catastrophic error (e.g. a missing header) is the environment's, not the cell's: no
    # location, so the row is not cached.
    where = "" if m.group("fatal") else f"{Path(m.group('file')).name}:{m.group('line')}"
    sa = ASSERT_RE.search(m.group("msg"))
    return (sa.group("msg") if sa else m.group("msg").strip())[:400], where


def block_tu_lines(block: list[str], tu_name: str) -> list[int]:
    """Return the line numbers of the TU that an error block points at."""
    lines = []
    for text in block:
        lines += [int(n) for n in re.findall(rf"at line (\d+) of \S*{re.escape(tu_name)}", text)]
        m = ERROR_RE.match(text)
        if m and m.group("file").endswith(tu_name):
            lines.append(int(m.group("line")))
    return lines


def attribute_errors(log: str, tu_name: str, spans: list[tuple[int, int]]) -> dict[int, tuple]:
    """Return {position in group: (reason, where)} for errors that point into a cell's lines."""
    found: dict[int, tuple] = {}
    for block in error_blocks(log):
        for ln in block_tu_lines(block, tu_name):
            pos = next((i for i, (a, b) in enumerate(spans) if a <= ln <= b), None)
            if pos is not None:
                found.setdefault(pos, block_reason(block))
                break
    return found


def first_error(log: str) -> tuple[str, str]:
    """Return the first error block's reason, or the log's last line if none parses."""
    blocks = error_blocks(log)
    if blocks:
        return block_reason(blocks[0])
    tail = [ln for ln in log.strip().splitlines() if ln.strip()]
    return (tail[-1][:400] if tail else "compiler failed without output"), ""


def compile_tu(nvcc: str, flags: list[str], src: str, build: Path) -> tuple[bool, str, Path]:
    """Compile src into build/tu; return (ok, compiler log, executable path)."""
    cu, exe = build / "tu.cu", build / "tu"
    cu.write_text(src)
    try:
        proc = subprocess.run(
            [nvcc, *flags, str(cu), "-o", str(exe)],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            cwd=build,
        )
    except subprocess.TimeoutExpired:
        return False, f"error: nvcc timed out after {COMPILE_TIMEOUT_S} s", exe
    return proc.returncode == 0 and exe.exists(), proc.stdout + proc.stderr, exe


def exit_description(returncode: int) -> str:
    """Return how a process ended: 'exit code N' or 'signal SIGSEGV (11)'."""
    import signal

    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {name} ({-returncode})"
    return f"exit code {returncode}"


def run_tu(exe: Path) -> tuple[dict[int, dict], str | None]:
    """Run a compiled TU; return its JSON lines keyed by cell position, and how it failed (a
    crash, a non-zero exit or a timeout) or None when it exited cleanly."""
    try:
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {RUN_TIMEOUT_S} s"
    except OSError as exc:
        return {}, f"could not start: {exc}"
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            rows[data["index"]] = data
    failure = None if proc.returncode == 0 else exit_description(proc.returncode)
    if failure and proc.stderr.strip():
        failure += f": {proc.stderr.strip().splitlines()[-1][:300]}"
    return rows, failure


@dataclass
class Context:
    """What every group compile needs: tool paths, versions, flags and the work dir."""

    nvcc: str
    include: Path
    version: str
    toolchain: str
    workdir: Path
    device_check: bool


def compile_group(ctx: Context, units: list[Unit]) -> dict[int, dict]:
    """Return {unit index: row} for units, compiling them in one TU and splitting on errors."""
    arch = units[0].cell["arch"]
    bodies = [cell_body(u.cell, f"c{i}") for i, u in enumerate(units)]
    src, spans = tu_source(arch, bodies, ctx.version, ctx.device_check)
    (ctx.workdir / "build").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ctx.workdir / "build") as tmp:
        t0 = time.monotonic()
        ok, log, exe = compile_tu(ctx.nvcc, compile_flags(arch, ctx.include), src, Path(tmp))
        secs = time.monotonic() - t0
        printed, failure = run_tu(exe) if ok else ({}, None)
    if not ok:
        return split_failed(ctx, units, log, spans, secs)
    out = {}
    for i, u in enumerate(units):
        if i in printed:
            out[u.index] = timed(ok_row(u.cell, printed[i], ctx.toolchain), secs, len(units))
        elif failure:  # the host program crashed or hung: not a compile error, not cached
            reason = f"the compiled host program ended by {failure} before printing this cell"
            row = base_row(u.cell, "crash", reason, ctx.toolchain, ctx.version)
            out[u.index] = timed(row, secs, len(units))
        else:
            row = base_row(
                u.cell, "compile", "compiled TU printed no row", ctx.toolchain, ctx.version
            )
            out[u.index] = timed(row, secs, len(units))
    return out


def timed(row: dict, secs: float, n: int) -> dict:
    """Return row with the TU's compile time and the cells it was shared by."""
    row["compile_seconds"] = round(secs, 2)
    row["cells_in_tu"] = n
    return row


def failed_rows(ctx: Context, units: list[Unit], reason: str, where: str, secs: float, n: int):
    """Return 'compile' rows for units, all with the same reason."""
    out = {}
    for u in units:
        row = base_row(u.cell, "compile", reason, ctx.toolchain, ctx.version)
        row["error_location"] = where
        out[u.index] = timed(row, secs, n)
    return out


def split_failed(ctx: Context, units, log: str, spans, secs: float) -> dict[int, dict]:
    """Return rows for a failed group: blame attributed cells, recompile the rest or bisect."""
    if len(units) == 1:
        return failed_rows(ctx, units, *first_error(log), secs, 1)
    if not any(ERROR_RE.match(b[0]) for b in error_blocks(log)):
        # No compiler diagnostic at all (timeout, missing host compiler): splitting won't help.
        return failed_rows(ctx, units, *first_error(log), secs, len(units))
    blamed = attribute_errors(log, "tu.cu", spans)
    out: dict[int, dict] = {}
    for pos, (reason, where) in blamed.items():
        out.update(failed_rows(ctx, [units[pos]], reason, where, secs, len(units)))
    rest = [u for i, u in enumerate(units) if i not in blamed]
    if not blamed:
        half = len(rest) // 2
        return {**compile_group(ctx, rest[:half]), **compile_group(ctx, rest[half:])}
    return {**out, **(compile_group(ctx, rest) if rest else {})}


def plan_groups(units: list[Unit], jobs: int, max_group: int = MAX_GROUP) -> list[list[Unit]]:
    """Return units split by arch into chunks, enough chunks to keep `jobs` compilers busy."""
    by_arch: dict[str, list[Unit]] = {}
    for u in units:
        by_arch.setdefault(u.cell["arch"], []).append(u)
    size = max(1, min(max_group, math.ceil(len(units) / max(1, jobs))))
    groups = []
    for arch_units in by_arch.values():
        groups += [arch_units[i : i + size] for i in range(0, len(arch_units), size)]
    return groups


def cacheable(row: dict) -> bool:
    """Return whether a row is a property of the cell (ok, or a located compile error)."""
    return row["status"] == "ok" or bool(row.get("error_location"))


def mem_available_gib() -> float | None:
    """Return MemAvailable from /proc/meminfo in GiB, or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        return None
    return None


def parallel_compiles(jobs: int, device_check: bool) -> int:
    """Return how many compilers to run at once: jobs, capped by memory when device-checking."""
    jobs = max(1, jobs)
    avail = mem_available_gib() if device_check else None
    return jobs if avail is None else max(1, min(jobs, int(avail // DEVICE_CHECK_GIB)))


def store(ctx: Context, units: list[Unit], rows: dict[int, dict]) -> None:
    """Write each fresh, cacheable row to the cache under its unit's key."""
    for u in units:
        if u.index in rows and cacheable(rows[u.index]):
            atomic_write(ctx.workdir / "cache" / f"{u.key}.json", json.dumps(rows[u.index]))


def account(
    cells: list[dict], workdir: Path, jobs: int = 1, *, device_check: bool = True
) -> list[dict]:
    """Return one shared-memory accounting row per cell, in order (see the module docstring).

    With device_check the device pass also instantiates each kernel body, so the kernel-level
    static_asserts are checked too (about 8 s more CPU per cell in a group of 8, 35 s for a lone
    cell); without it only the host-side types are built (about 1.5 s per cell).
    """
    workdir = Path(workdir).resolve()
    include, nvcc = cutlass_include_dir(), find_nvcc()
    version = cutlass_version(include) if include else None
    toolchain = nvcc_version(nvcc) if nvcc else None
    rows: list[dict | None] = [None] * len(cells)
    todo: list[Unit] = []
    for i, raw in enumerate(cells):
        cell, bad = normalize(raw)
        why = bad or ("no nvcc found" if nvcc is None else None)
        why = why or ("no CUTLASS headers found" if include is None else None)
        if why:
            rows[i] = base_row(cell, "skipped", why, toolchain, version)
            continue
        key = cache_key(cell, version, toolchain, device_check)
        hit = read_cache(workdir, key)
        if hit is not None:
            rows[i] = {**hit, "cell": cell, "cached": True}
        else:
            todo.append(Unit(i, cell, key))
    if todo:
        ctx = Context(nvcc, include, version, toolchain, workdir, device_check)
        workers = parallel_compiles(jobs, device_check)
        groups = plan_groups(todo, workers)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for group, got in zip(
                groups, pool.map(lambda g: compile_group(ctx, g), groups), strict=True
            ):
                store(ctx, group, got)
                for idx, row in got.items():
                    rows[idx] = row
    return rows
