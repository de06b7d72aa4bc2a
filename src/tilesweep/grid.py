"""Expand a validated config into the cells each pipeline stage works on."""

from __future__ import annotations

import itertools
import json

import pandas as pd

TRITON_ARCHS = ("sm_80", "sm_89", "sm_90", "sm_100", "sm_120")
CUTLASS_ARCHS = ("sm_90", "sm_100", "sm_120")
FP8_MIN_CC = 89


def kernel_slug(cell: dict) -> str:
    """Return a readable, stable name for a kernel configuration."""
    stages = cell["stages"]
    tail = f"w{cell['warps']}" if cell["backend"] == "triton" else "c1x1"
    return (
        f"{cell['dtype']}-m{cell['tile_m']}n{cell['tile_n']}k{cell['tile_k']}"
        f"-s{stages}-{tail}-{cell['epilogue']}"
    )


def layout_slug(layout: dict) -> str:
    """Return a readable name for a parallel layout, e.g. tp4-pp2-ep1."""
    return f"tp{layout['tp']}-pp{layout['pp']}-ep{layout['ep']}"


def canonical(cell: dict) -> str:
    """Return a cell as canonical JSON: the only form passed to rules as a param."""
    return json.dumps(cell, sort_keys=True, separators=(",", ":"))


def _cell(
    backend: str, arch: str, dtype: str, tile: dict, stages: int | str, warps: int, epilogue: str
) -> dict:
    """Return one kernel cell as the grid's rows hold it."""
    return {
        "backend": backend,
        "arch": arch,
        "dtype": dtype,
        "tile_m": tile["m"],
        "tile_n": tile["n"],
        "tile_k": tile["k"],
        "stages": stages,
        "warps": warps,
        "epilogue": epilogue,
    }


def _triton_cells(settings: dict, arch: str, cc: int) -> list[dict]:
    """Return the Triton kernel cells built for one architecture."""
    grid = settings["grid"]
    cells = []
    combos = itertools.product(
        grid["dtypes"], grid["tiles"], grid["stages"], grid["warps"], grid["epilogues"]
    )
    for dtype, tile, stages, warps, epilogue in combos:
        cell = _cell("triton", arch, dtype, tile, stages, warps, epilogue)
        if arch not in TRITON_ARCHS:
            cell["unsupported"] = f"Triton builds {', '.join(TRITON_ARCHS)}; not {arch}"
        elif dtype == "nvfp4":
            cell["unsupported"] = (
                "this Triton grouped GEMM has no NVFP4 path (a block-scaled dot needs sm_100 or "
                "newer); the CUTLASS backend accounts NVFP4 tiles"
            )
        elif dtype == "fp8" and cc < FP8_MIN_CC:
            cell["unsupported"] = f"fp8 tensor cores need sm_89 or newer; {arch} has none"
        cells.append(cell)
    return cells


def _cutlass_cells(settings: dict, arch: str) -> list[dict]:
    """Return the CUTLASS accounting cells for one architecture."""
    conf = settings["backend"]["cutlass"]
    dtype = conf["dtype_by_arch"].get(arch, "none")
    cells = []
    for tile, stages, epilogue in itertools.product(
        settings["grid"]["tiles"], conf["stages"], conf["epilogues"]
    ):
        cell = _cell("cutlass", arch, dtype, tile, stages, 0, epilogue)
        if arch not in CUTLASS_ARCHS or dtype == "none":
            cell["unsupported"] = (
                f"the CUTLASS backend covers {', '.join(CUTLASS_ARCHS)}; not {arch}"
            )
        cells.append(cell)
    return cells


def build_cells(settings: dict) -> pd.DataFrame:
    """Return one row per kernel to build: backend x architecture x kernel configuration."""
    catalog = settings["catalog"]
    archs = {}
    for name in settings["grid"]["targets"]:
        archs.setdefault(catalog[name]["arch"], catalog[name]["cc"])
    rows: list[dict] = []
    for arch, cc in sorted(archs.items()):
        if settings["backend"]["triton"]["enabled"]:
            rows += _triton_cells(settings, arch, cc)
        if settings["backend"]["cutlass"]["enabled"]:
            rows += _cutlass_cells(settings, arch)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame["kernel"] = [kernel_slug(r) for r in rows]
    frame["build_id"] = frame["backend"] + "/" + frame["arch"] + "/" + frame["kernel"]
    return frame.drop_duplicates("build_id").reset_index(drop=True)


def launch_cells(settings: dict, builds: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return one row per kernel and target: each is launch-checked against that target."""
    builds = build_cells(settings) if builds is None else builds
    catalog = settings["catalog"]
    rows = []
    for target in settings["grid"]["targets"]:
        arch = catalog[target]["arch"]
        for row in builds[builds["arch"] == arch].to_dict("records"):
            rows.append({**row, "target": target})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["launch_id"] = frame["backend"] + "/" + frame["target"] + "/" + frame["kernel"]
    return frame


def bench_kernels(settings: dict, builds: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return the kernels the decode benchmark times on the device at hand, one job each."""
    builds = build_cells(settings) if builds is None else builds
    if builds.empty:
        return builds
    triton = builds[builds["backend"] == "triton"]
    keep = ["backend", "dtype", "tile_m", "tile_n", "tile_k", "stages", "warps", "epilogue"]
    kernels = triton[keep + ["kernel"]].drop_duplicates("kernel").reset_index(drop=True)
    return kernels


def layouts(settings: dict) -> pd.DataFrame:
    """Return one row per parallel layout, with its world size and slug."""
    rows = []
    for layout in settings["grid"]["layouts"]:
        world = layout["tp"] * layout["pp"] * layout["ep"]
        rows.append(
            {
                "tp": layout["tp"],
                "pp": layout["pp"],
                "ep": layout["ep"],
                "world": world,
                "layout": layout_slug(layout),
            }
        )
    return pd.DataFrame(rows).drop_duplicates("layout").reset_index(drop=True)


def cell_count(settings: dict) -> int:
    """Return the number of grid cells: kernels x batches x targets x layouts."""
    grid = settings["grid"]
    kernels = len(grid["dtypes"]) * len(grid["tiles"]) * len(grid["stages"]) * len(grid["warps"])
    kernels *= len(grid["epilogues"])
    return kernels * len(grid["tokens_per_expert"]) * len(grid["targets"]) * len(grid["layouts"])
