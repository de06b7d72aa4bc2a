"""A CUTLASS accounting cell: arch builder spellings, dtype, epilogue, kernel schedule. sm_90:
cooperative from tile M 128, else pingpong, with the ptr-array TMA epilogue (Auto rejects ptr-array
strides); sm_100: 1sm (example 75); sm_120: cooperative (example 79d). `finalize` (FP32 C and D) is
an upper bound for TensorRT-LLM's, which stages no D tile."""

from dataclasses import dataclass

from tilesweep import package_data


@dataclass(frozen=True)
class ArchSpec:
    """C++ spellings of one arch's builder arguments; `schedules`: name -> (mainloop, epilogue)."""

    tag: str
    gencode: str
    opclass: str
    schedules: dict[str, tuple[str, str]]
    capacity: str
    dtypes: tuple[str, ...]


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
    """Return a cell's kernel schedule: on sm_90 pingpong below 128 rows, else the arch's one."""
    if arch == "sm_90" and tile_m < SM90_COOPERATIVE_MIN_TILE_M:
        return "pingpong"
    return next(iter(ARCHS[arch].schedules))


def normalize(cell: dict) -> tuple[dict, str | None]:
    """Return the cell with defaults filled in, and why it is unsupported (or None)."""
    c = {"stages": "auto", "epilogue": "default", "cluster_m": 1, "cluster_n": 1, **cell}
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
