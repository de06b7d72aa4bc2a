"""Shared-memory accounting for CUTLASS grouped GEMMs, compiled in groups of one arch, a failed
group split, each row cached. Measured on 2 cores, nvcc 13.0: one SM120 cell with the device check
46 s and 5 GiB, 12 cells 82 s and 9 GiB, so groups hold at most 8 cells and compiles are capped by
memory."""

from __future__ import annotations

import math
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tilesweep.cutlass.cache import cache_key, read_cache, write_cache
from tilesweep.cutlass.cell_spec import normalize
from tilesweep.cutlass.diagnostics import attribute_errors, first_error, has_diagnostic
from tilesweep.cutlass.rows import base_row, ok_row, timed
from tilesweep.cutlass.source import cell_body, tu_source
from tilesweep.cutlass.toolchain import (
    compile_flags,
    compile_tu,
    cutlass_include_dir,
    cutlass_version,
    find_nvcc,
    nvcc_version,
    run_tu,
)

MAX_GROUP = 8
DEVICE_CHECK_GIB = 9  # peak cicc memory of one device-checked TU (measured: 5 GiB for 1 cell)


@dataclass
class Unit:
    """One cell to compile: its position, normalized form and cache key."""

    index: int
    cell: dict
    key: str


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
    if not has_diagnostic(log):
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


def account(
    cells: list[dict], workdir: Path, jobs: int = 1, *, device_check: bool = True
) -> list[dict]:
    """Return one row per cell; device_check compiles each kernel body too."""
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
                for unit in group:
                    if unit.index in got:
                        write_cache(workdir, unit.key, got[unit.index])
                        rows[unit.index] = got[unit.index]
    return rows
