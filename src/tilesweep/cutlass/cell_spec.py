"""What a CUTLASS accounting cell is: its architecture's builder spellings, dtype, epilogue and
kernel schedule, with defaults filled in and unsupported cells named.

Schedules per arch (all ptr-array), one per cell: ``kernel_schedule(arch, tile_m)`` decides it,
for the accounting and for the SM90 program's decode job alike, and a cell may name one itself
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
"""

from __future__ import annotations

from dataclasses import dataclass

from tilesweep import package_data


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


# The package data this module reads (rerun_keys.code_hash hashes it with the module).
DATA_FILES = ("data/cutlass.yaml",)
ARCHS = package_data.data_typed("tilesweep", DATA_FILES[0], "archs", dict[str, ArchSpec])

# The SM90 cooperative kernel's body requires tile M >= 128 (a static_assert); below it, ping-pong.
SM90_COOPERATIVE_MIN_TILE_M = 128

# dtype -> (A/B element, alignment in elements: 16 bytes)
DTYPES = package_data.data_typed("tilesweep", DATA_FILES[0], "dtypes", dict[str, tuple[str, int]])
# epilogue -> (C element, D element, alignment of C and D in elements: 16 bytes)
EPILOGUES = package_data.data_typed(
    "tilesweep", DATA_FILES[0], "epilogues", dict[str, tuple[str, str, int]]
)


def kernel_schedule(arch: str, tile_m: int) -> str:
    """Return the kernel schedule of a CUTLASS cell of this architecture and tile height: on
    sm_90 ping-pong below 128 rows and cooperative from 128, elsewhere the architecture's one
    schedule. The accounting and the SM90 program's decode job both ask here."""
    if arch == "sm_90" and tile_m < SM90_COOPERATIVE_MIN_TILE_M:
        return "pingpong"
    return next(iter(ARCHS[arch].schedules))


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


def requested_tags(cell: dict) -> dict:
    """Return the schedule tags the cell asks the builders for (none for an unknown schedule)."""
    spec = ARCHS.get(cell.get("arch"))
    if spec is None or cell.get("schedule") not in spec.schedules:
        return {}
    mainloop, epilogue = spec.schedules[cell["schedule"]]
    return {"mainloop_requested": mainloop, "epilogue_requested": epilogue}
