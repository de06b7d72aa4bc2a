"""Shared-memory accounting for CUTLASS grouped GEMMs, compiled in groups of one arch, a failed
group split, each row cached. Measured on 2 cores, nvcc 13.0: one SM120 cell with the device check
46 s and 5 GiB, 12 cells 82 s and 9 GiB, so groups hold at most 8 cells and compiles are capped by
memory. Rows not the cell's property (no nvcc, a timeout) are not cached."""

import hashlib
import json
import math
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tilesweep.cutlass.cell_spec import normalize, requested_tags
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
from tilesweep.io import write_text
from tilesweep.package_data import data_typed

DATA_FILES = ("data/cutlass.yaml",)
NUMERIC_FIELDS = data_typed("tilesweep", DATA_FILES[0], "numeric_fields", tuple[str, ...])


def base_row(cell: dict, status: str, reason: str, toolchain: str, version: str) -> dict:
    """Return a result row with every field present and numbers left empty."""
    row = {"status": status, "reason": reason, "error_location": "", "cell": cell}
    row.update({k: None for k in NUMERIC_FIELDS})
    row.update(alignment_a=None, alignment_b=None, fits=None, cutlass_version=version)
    row.update(schedule=cell.get("schedule"), schedule_types=requested_tags(cell))
    row.update(toolchain=toolchain, cached=False)
    return row


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


def cache_key(cell: dict, version: str, toolchain: str, device_check: bool = True) -> str:
    """Return sha256 of the cell's standalone TU source plus the nvcc version."""
    src, _ = tu_source(cell["arch"], [cell_body(cell, "c0")], version, device_check)
    return hashlib.sha256((src + "\n" + toolchain).encode()).hexdigest()


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
            row = ok_row(u.cell, printed[i], ctx.toolchain)
        elif failure:  # the host program crashed or hung: not a compile error, not cached
            reason = f"the compiled host program ended by {failure} before printing this cell"
            row = base_row(u.cell, "crash", reason, ctx.toolchain, ctx.version)
        else:
            row = base_row(
                u.cell, "compile", "compiled TU printed no row", ctx.toolchain, ctx.version
            )
        out[u.index] = {**row, "compile_seconds": round(secs, 2), "cells_in_tu": len(units)}
    return out


def failed_rows(ctx: Context, units: list[Unit], reason: str, where: str, secs: float, n: int):
    """Return 'compile' rows for units, all with the same reason."""
    extra = {"error_location": where, "compile_seconds": round(secs, 2), "cells_in_tu": n}
    rows = {u.index: base_row(u.cell, "compile", reason, ctx.toolchain, ctx.version) for u in units}
    return {index: row | extra for index, row in rows.items()}


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
    return [same[i : i + size] for same in by_arch.values() for i in range(0, len(same), size)]


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
        try:
            hit = json.loads((workdir / "cache" / f"{key}.json").read_text())
        except (OSError, ValueError):  # no cached row for this key
            hit = None
        if hit is not None:
            rows[i] = {**hit, "cell": cell, "cached": True}
        else:
            todo.append(Unit(i, cell, key))
    if todo:
        ctx = Context(nvcc, include, version, toolchain, workdir, device_check)
        workers = parallel_compiles(jobs, device_check)
        groups = plan_groups(todo, workers)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = pool.map(partial(compile_group, ctx), groups)
            for group, got in zip(groups, results, strict=True):
                for unit in (u for u in group if u.index in got):
                    row = rows[unit.index] = got[unit.index]
                    if row["status"] == "ok" or row["error_location"]:  # the cell's own property
                        write_text(workdir / "cache" / f"{unit.key}.json", json.dumps(row))
    return rows
