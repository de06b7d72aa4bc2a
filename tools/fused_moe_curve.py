"""Print a hardware file's grouped_gemm_efficiency points from tools/fused_moe_probe.py's rows.

Each point is one token count's up+down time of the two fused_moe GEMMs (a layer's two kernels),
as the verdict composes it: time = 2 kernels x the fit's fixed cost + bytes / (e x datasheet), so
e = bytes / datasheet / (time - 2 x fixed). The band's ends are the two model shapes timed (GLM-5
and DeepSeek-V3 at TP8: one expert of each size), each named with its expert's MB.

--carry-to GBS: the rows ran on another device; each end becomes a band of its own two readings
on the target of GBS datasheet bandwidth: the time per call carried (low: the target is no slower)
and the fraction of the datasheet carried (high), the wider of the two models' bands taken.

--part NAME reads another probe's rows: tools/release_gemm_probe.py's `fused_moe_up+down` (an older
release's kernel; its rows say `shared_fused: false`, the shared expert run apart, not as expert E).

python3 tools/fused_moe_curve.py docs/evidence/fused_moe_probe_h100.json --config H100
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a bare checkout
from tilesweep.errors import ConfigError, tool_main  # noqa: E402 - after the checkout's src is on the path

KERNELS = 2  # the up and down fused_moe GEMMs a layer: the "up+down" part's calls


def expert_mb(row: dict) -> float:
    """Return one expert's bytes at the row's TP shard (FP8 and its 128x128 block scales), MB."""
    h, n = row["hidden"], row["inter_shard"]
    weights = 3 * h * n
    scales = (2 * n // 128) * (h // 128) + (h // 128) * (n // 128)
    return (weights + 4 * scales) / 1e6


def _args() -> argparse.Namespace:
    """Return the parsed arguments; raise ConfigError for a number no device has."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", help="the probe's JSON rows")
    p.add_argument("--config", required=True, help="the tables' device: H100 or H200")
    p.add_argument("--datasheet-gbs", type=float, default=3350.0, help="the timing device's")
    p.add_argument("--fixed-us", type=float, default=3.06, help="the fit's cost a kernel")
    p.add_argument("--carry-to", type=float, default=None, help="the target's datasheet GB/s")
    p.add_argument("--kernel", default="SGLang 0.5.23 Triton fused_moe")
    p.add_argument("--source", default="", help="what each point's cite starts with")
    p.add_argument("--part", default="up+down", help="the rows' part of a layer's two GEMMs")
    p.add_argument("--release", default=None, help="only rows of this release (release probe)")
    a = p.parse_args()
    for flag, value, least in (
        ("--datasheet-gbs", a.datasheet_gbs, 0.0),
        ("--carry-to", a.carry_to, 0.0),
        ("--fixed-us", a.fixed_us, None),
    ):
        if value is None:
            continue
        low = value <= least if least is not None else value < 0
        if not math.isfinite(value) or low:
            bound = "above 0" if least is not None else "at least 0"
            raise ConfigError(f"{flag}={value:g}: must be a finite number {bound}")
    return a


def _probe_rows(path: str) -> list[dict]:
    """Return the probe's rows (a JSON list of objects); raise ConfigError for anything else."""
    where = Path(path)
    if not where.is_file():
        raise ConfigError(f"{path}: {'not a plain file' if where.exists() else 'no such file'}")
    try:
        rows = json.loads(where.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{path}: not JSON (the probe's rows, a JSON list)") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"{path}: not a list of rows (tools/fused_moe_probe.py's JSON)")
    return rows


def _efficiency(a: argparse.Namespace, r: dict) -> float:
    """Return a row's fraction of the datasheet; raise ConfigError where it is no fraction."""
    at = f"{r['model']} at {r['tokens']} tokens: {r['us_per_call']} us"
    kernel_us = r["us_per_call"] - KERNELS * a.fixed_us
    if not kernel_us > 0:
        raise ConfigError(f"{at}, no more than {KERNELS} x --fixed-us={a.fixed_us:g}: no time left")
    e = r["bytes_per_call"] / (a.datasheet_gbs * 1e3) / kernel_us
    if not 0 < e <= 1:
        raise ConfigError(
            f"{at} less {KERNELS} x --fixed-us={a.fixed_us:g} moves its bytes at {e:.3g} of "
            f"--datasheet-gbs={a.datasheet_gbs:g}: no fraction of a datasheet; check the two"
        )
    return e


def main() -> int:
    """Print the points (YAML flow mappings) or a one-line refusal; return the exit status."""
    a = _args()
    all_rows = _probe_rows(a.rows)
    rows = [
        r
        for r in all_rows
        if r.get("part") == a.part
        and r.get("status") == "ok"
        and (a.release is None or r.get("release") == a.release)
        and a.config.upper() in str(r.get("config_device", "")).upper()
    ]
    if not rows:
        print(f"fused_moe_curve: no ok {a.part} rows with --config {a.config}", file=sys.stderr)
        return 2
    need = ("model", "tokens", "top_k", "experts", "bytes_per_call", "us_per_call", "hidden")
    lacking = [k for r in rows for k in (*need, "inter_shard", "tp") if k not in r]
    if lacking:
        raise ConfigError(f"{a.rows}: a {a.part} row lacks {lacking[0]!r}; not the probe's rows")
    shared = {r["model"]: int(r.get("shared_fused", True)) for r in rows}  # expert E: the shared
    experts = {r["model"]: r["experts"] - shared[r["model"]] for r in rows}  # routed
    by_t: dict[float, list] = {}

    def first(x):
        return x[0]

    for r in rows:
        tpe = r["tokens"] * (r["top_k"] - shared[r["model"]]) / experts[r["model"]]
        e = _efficiency(a, r)
        if a.carry_to:  # the time carried: the same time for the bytes at the target's datasheet
            carried = e * a.datasheet_gbs / a.carry_to
            ends = [(carried, r, ", time per call carried"), (e, r, ", fraction carried")]
        else:
            ends = [(e, r, "")]
        by_t.setdefault(tpe, []).extend(ends)
    for tpe, ends in sorted(by_t.items()):
        (lo, rlo, how_lo), (hi, rhi, how_hi) = min(ends, key=first), max(ends, key=first)
        tok = rlo["tokens"]

        def name(r, how):
            return f"{a.kernel}, {a.config} config, {r['model']} TP{r['tp']}{how}"

        low = (
            f'low: {lo:.3f}, low_kernel: "{name(rlo, how_lo)}", low_expert_mb: {expert_mb(rlo):.3f}'
        )
        high = f'high: {hi:.3f}, high_kernel: "{name(rhi, how_hi)}"'
        high += f", high_expert_mb: {expert_mb(rhi):.3f}"
        times = f"{rlo['model']} {rlo['us_per_call']} us, {rhi['model']} {rhi['us_per_call']} us"
        cite = f"{a.source}{tok} token{'s' if tok != 1 else ''}, up+down: {times}"
        print(f'      - {{tokens_per_expert: {tpe:g}, {low}, {high}, cite: "{cite}"}}')
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("fused_moe_curve", main))
