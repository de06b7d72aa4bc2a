"""CUTLASS SM90 FP8 grouped GEMMs on an H100/H200 (gpu/cutlass_sm90_grouped.cu); a tile built with
another schedule than kernel_schedule is a `constraint` row, never timed."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tilesweep.backends.roles import DecodeRunner
from tilesweep.cutlass.cell_spec import kernel_schedule
from tilesweep.cutlass.toolchain import exit_description
from tilesweep.device import catalog_name
from tilesweep.plan.expert_shapes import expert_ops, traffic

if TYPE_CHECKING:
    from tilesweep.settings import DecodeCell
    from tilesweep.settings.root import RootSettings

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "gpu" / "build_cutlass.sh"
BINARY = REPO / "gpu" / "bin" / "cutlass_sm90_grouped"
ARCH = "sm_90"  # the program is built for sm_90a and runs on an SM90 device only
DTYPE = "fp8"  # its operand type
TILE_NAME = re.compile(r"^(\d+)x(\d+)x(\d+)")


def ensure_binary(timeout: float = 1800) -> tuple[Path | None, str]:
    """Return the program (built or rebuilt if stale) and a note, or None and why not."""
    if not BUILD.exists():
        return None, f"{BUILD} is missing"
    cmd = ["bash", str(BUILD)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0 or not BINARY.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"build_cutlass.sh failed: {tail[0]}"
    return BINARY, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "built"


def _invoke(cmd: list[str], timeout: float) -> tuple[list[str], dict | None]:
    """Return the program's stdout lines, and a crash or timeout record (None if it exited 0)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [], {"error": f"timed out after {timeout} s", "status": "timeout"}
    failure = None
    if proc.returncode != 0:  # a crash or a failed exit: a row of its own, after what it printed
        how = exit_description(proc.returncode)
        failure = {"error": f"{how}: {proc.stderr.strip()[-300:]}", "status": "crash"}
    return proc.stdout.splitlines(), failure


def tile_requests(names: list[str]) -> tuple[list[str], list[dict]]:
    """Return each tile as NAME@SCHEDULE (kernel_schedule on sm_90), and a record of bad names."""
    requests, records = [], []
    for name in names:
        match = TILE_NAME.match(name)
        if match is None:
            records.append(
                {"tile": name, "error": "the tile name gives no MxNxK", "status": "constraint"}
            )
            continue
        requests.append(f"{name}@{kernel_schedule(ARCH, int(match.group(1)))}")
    return requests, records


def run(
    binary: Path, n: int, k: int, groups: int, tokens: list[int], repeats: int, timeout: float
) -> list[dict]:
    """Return the program's JSON records for every tile at every tokens-per-expert."""
    listing, failure = _invoke([str(binary), "--list"], timeout)
    if failure is not None:
        return [failure]
    requests, records = tile_requests([line.strip() for line in listing if line.strip()])
    if not requests:
        return records
    tiles, counts = ",".join(requests), ",".join(str(t) for t in tokens)
    cmd = [str(binary), f"--tile={tiles}", f"--groups={groups}", f"--n={n}", f"--k={k}"]
    cmd += [f"--tokens={counts}", f"--repeats={repeats}", "--graph=1"]
    lines, failure = _invoke(cmd, timeout)
    records += [json.loads(one) for one in map(str.strip, lines) if one.startswith("{")]
    return records + ([failure] if failure is not None else [])


def to_row(rec: dict) -> dict:
    """Return a decode-table row (status, reason, timing, launch facts) for one record."""
    tile = rec.get("tile", "?")
    row = {"runner": f"cutlass:{tile}", "kernel": f"cutlass-sm90-fp8-{tile}", "dtype": DTYPE}
    row |= {"tokens_per_expert": rec.get("tokens"), "experts": rec.get("groups")}
    row |= {key: rec.get(key) for key in ("n", "k", "schedule", "stages")}
    row |= {"smem_runtime_bytes": rec.get("smem_bytes"), "smem_optin_bytes": rec.get("smem_optin")}
    row |= {key: rec.get(key) for key in ("can_implement", "initialize")}
    row["cutlass"] = rec.get("cutlass_version")
    if "error" in rec:
        return {**row, "status": rec.get("status", "runtime"), "reason": rec["error"]}
    if rec.get("initialize") != "Success":
        reason = (
            f"can_implement {rec.get('can_implement')}, initialize {rec.get('initialize')}: "
            f"needs {rec.get('smem_bytes'):,} B of shared memory, opt-in limit "
            f"{rec.get('smem_optin'):,} B"
        )
        return {**row, "status": "launch", "reason": reason}
    if not rec.get("passed"):
        reason = f"relative error {rec.get('rel_err')} against the reference GEMM"
        return {**row, "status": "correctness", "rel_err": rec.get("rel_err"), "reason": reason}
    times = rec["time_ms"]
    row |= {"status": "ok", "reason": "", "rel_err": rec["rel_err"], "time_ms": times["median"]}
    row |= {"time_p10_ms": times["p10"], "time_p90_ms": times["p90"]}
    return {**row, "timing": "cuda-graph" if rec.get("graph") else "cuda-events"}


def program_rows(cell: DecodeCell, log) -> list[dict]:
    """Return decode rows from the SM90 FP8 program at every batch (traffic, no roofline)."""
    bench, model = cell.bench, cell.model
    experts = min(bench.gpu_experts, model.routed_experts)
    rows = []
    binary, note = ensure_binary()
    log.info("CUTLASS program: %s (%s)", binary, note)
    timing = (cell.tokens_per_expert, bench.repeats, bench.kernel_timeout_s)
    for op, (n, k) in expert_ops(model).items():
        if binary is None:
            rows.append({"runner": "cutlass", "op": op, "status": "unsupported", "reason": note})
            continue
        for rec in run(binary, n, k, experts, *timing):
            row = {**to_row(rec), "op": op, "routing": "uniform", "model": model.name}
            if row.get("tokens_per_expert"):
                counts = [row["tokens_per_expert"]] * row["experts"]
                info = traffic(counts, n, k, "fp8", 2)
                row.update(info)
                if row["status"] == "ok":
                    seconds = row["time_ms"] * 1e-3
                    row["tflops"] = info["flops"] / seconds / 1e12
                    row["gbs"] = info["bytes"] / seconds / 1e9
            rows.append(row)
    return rows


# The SM90 program's decode job (it runs on an sm_90 device for real: ARCH).
PROGRAM_JOB = "cutlass-sm90-fp8"


class SM90Program(DecodeRunner):
    """The SM90 program's decode job where an SM90 device is at hand (runners `cutlass:<tile>`)."""

    runner_prefix = "cutlass"
    runner_names = ("cutlass",)
    kind = "program"

    def decode_jobs(self, settings: RootSettings, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the SM90 program's job when a GPU here is an SM90 device of the catalog."""
        for gpu in gpus:
            name = catalog_name(gpu, settings.catalog)
            if name and settings.catalog[name].arch == ARCH:
                return [PROGRAM_JOB]
        return []

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is the SM90 program."""
        return kernel.get("kernel") == PROGRAM_JOB

    def row_dtypes(self, kernel: dict) -> frozenset[str]:
        """Return the program's operand type (FP8)."""
        return frozenset({DTYPE})

    def bench(self, cell: DecodeCell, ceilings: dict, log) -> list[dict] | None:
        """Return the SM90 program's rows at every batch."""
        return program_rows(cell, log)

    def measured_rows(self, launch_row: dict, decode):
        """Return the program's rows timed with the launch row's schedule (auto stages only)."""
        if launch_row["stages_requested"] != "auto" or launch_row["status"] != "ok":
            return None
        if launch_row["epilogue"] != "default" or "schedule" not in decode:
            return decode.iloc[0:0]
        schedule = launch_row.get("schedule")
        if not isinstance(schedule, str):  # a row from before the column: the same function
            schedule = kernel_schedule(launch_row["arch"], int(launch_row["tile_m"]))
        tile = f"{launch_row['tile_m']}x{launch_row['tile_n']}x{launch_row['tile_k']}"
        mine = (decode["runner"] == f"cutlass:{tile}") & (decode["dtype"] == launch_row["dtype"])
        return decode[mine & (decode["schedule"] == schedule)]
