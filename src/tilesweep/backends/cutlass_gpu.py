"""CUTLASS SM90 FP8 grouped GEMMs on a real H100/H200: can_implement, initialize, run, timing.

The program `gpu/cutlass_sm90_grouped.cu` is built by `gpu/build_cutlass.sh` (nvcc and the
nvidia-cutlass headers; no GPU needed, so it can be built on one machine and carried to another).
Each of its JSON lines becomes a decode-table row, so CUTLASS tiles sit beside the Triton ones.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "gpu" / "build_cutlass.sh"
BINARY = REPO / "gpu" / "bin" / "cutlass_sm90_grouped"


def ensure_binary(timeout: float = 1800) -> tuple[Path | None, str]:
    """Return the program (built or rebuilt if stale) and a note, or None and why not."""
    if not BUILD.exists():
        return None, f"{BUILD} is missing"
    proc = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0 or not BINARY.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"build_cutlass.sh failed: {tail[0]}"
    return BINARY, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "built"


def run(
    binary: Path, n: int, k: int, groups: int, tokens: list[int], repeats: int, timeout: float
) -> list[dict]:
    """Return the program's JSON records for every tile at every tokens-per-expert."""
    cmd = [
        str(binary),
        "--tile=all",
        f"--groups={groups}",
        f"--n={n}",
        f"--k={k}",
        "--tokens=" + ",".join(str(t) for t in tokens),
        f"--repeats={repeats}",
        "--graph=1",
    ]
    from tilesweep.backends.cutlass_smem import exit_description

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout} s", "status": "timeout"}]
    records = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    if proc.returncode != 0:  # a crash or a failed exit: a row of its own, after what it printed
        how = exit_description(proc.returncode)
        records.append({"error": f"{how}: {proc.stderr.strip()[-300:]}", "status": "crash"})
    return records


def to_row(rec: dict) -> dict:
    """Return a decode-table row (status, reason, timing, launch facts) for one record."""
    row = {
        "runner": f"cutlass:{rec.get('tile', '?')}",
        "kernel": f"cutlass-sm90-fp8-{rec.get('tile', '?')}",
        "dtype": "fp8",
        "tokens_per_expert": rec.get("tokens"),
        "experts": rec.get("groups"),
        "n": rec.get("n"),
        "k": rec.get("k"),
        "schedule": rec.get("schedule"),
        "stages": rec.get("stages"),
        "smem_runtime_bytes": rec.get("smem_bytes"),
        "smem_optin_bytes": rec.get("smem_optin"),
        "can_implement": rec.get("can_implement"),
        "initialize": rec.get("initialize"),
        "cutlass": rec.get("cutlass_version"),
    }
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
        return {
            **row,
            "status": "correctness",
            "rel_err": rec.get("rel_err"),
            "reason": f"relative error {rec.get('rel_err')} against the reference GEMM",
        }
    times = rec["time_ms"]
    return {
        **row,
        "status": "ok",
        "reason": "",
        "rel_err": rec["rel_err"],
        "time_ms": times["median"],
        "time_p10_ms": times["p10"],
        "time_p90_ms": times["p90"],
        "timing": "cuda-graph" if rec.get("graph") else "cuda-events",
    }
