"""Print an engine file's grouped_gemm_efficiency points (mxfp4) from tools/marlin_moe_probe.py's
rows: vLLM's own Marlin MoE GEMMs (w13 + w2) at gpt-oss-120b's TP shards, as the verdict composes
them: time = 2 kernels x the fit's fixed cost + bytes / (e x datasheet), so
e = bytes / datasheet / (w13 + w2 - 2 x fixed). The bytes are the verdict's for the layer
(plan/step_parts.py _expert_parts: the touched experts' unpadded weights at 4.25 bits a value,
and each routed row's activations), so e carries what vLLM's Marlin padding costs. Each tokens'
band spans every TP shard and both thread-config tables the probe timed (vLLM 0.15.1 is one of
them; see the probe), each end named with its kernel, shard, table and the expert's MB.

python3 tools/marlin_moe_curve.py ROWS.json [--datasheet-gbs 3350] [--fixed-us 3.06]
    [--source "measured: ..."]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a bare checkout
from tilesweep.errors import ConfigError, tool_main  # noqa: E402 - after the checkout's src is on the path

KERNELS = 2  # the w13 and w2 Marlin GEMMs a layer
MXFP4_BYTES = 0.5 + 1.0 / 32  # plan/architecture.py's mxfp4: 4-bit values, an e8m0 per 32
ACT_BYTES = 2  # bf16 activations
VARIANTS = {"built": "vLLM 0.16.0 tables", "without_128x64": "vLLM 0.14.1 tables"}


def expert_mb(row: dict) -> float:
    """Return one expert's bytes at the row's TP shard as the verdict counts them, MB."""
    return 3 * row["hidden"] * row["inter"] * MXFP4_BYTES / 1e6


def layer_bytes(row: dict) -> float:
    """Return the layer's bytes as the verdict counts them: touched experts and routed rows."""
    rows = row["tokens"] * row["top_k"]
    acts = rows * (2 * row["hidden"] + 2 * row["inter"]) * ACT_BYTES
    return row["experts_touched"] * expert_mb(row) * 1e6 + acts


def efficiency(row: dict, variant: str, datasheet_gbs: float, fixed_us: float) -> float:
    """Return the row's GEMMs' fraction of the datasheet; raise ConfigError where none."""
    at = f"TP{row['tp']} at {row['tokens']} tokens ({variant})"
    us = row[f"{variant}_w13_us"] + row[f"{variant}_w2_us"] - KERNELS * fixed_us
    if not us > 0:
        raise ConfigError(f"{at}: no time left after {KERNELS} x --fixed-us={fixed_us:g}")
    e = layer_bytes(row) / (datasheet_gbs * 1e3) / us
    if not 0 < e <= 1:
        raise ConfigError(f"{at}: {e:.3g} of --datasheet-gbs={datasheet_gbs:g}: no fraction")
    return e


def _rows(path: str) -> list[dict]:
    """Return the probe's rows; raise ConfigError for anything else."""
    where = Path(path)
    if not where.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        rows = json.loads(where.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{path}: not JSON (tools/marlin_moe_probe.py's rows)") from None
    need = ("tp", "tokens", "top_k", "experts", "hidden", "inter", "experts_touched")
    if not isinstance(rows, list) or not rows or any(k not in r for r in rows for k in need):
        raise ConfigError(f"{path}: not tools/marlin_moe_probe.py's rows")
    return rows


def points(rows: list[dict], datasheet_gbs: float, fixed_us: float, source: str) -> list[str]:
    """Return one YAML flow mapping a tokens-per-expert value, ascending."""
    by_t: dict[float, list] = {}
    for r in rows:
        for variant in VARIANTS:
            if f"{variant}_w13_us" in r and f"{variant}_w2_us" in r:
                e = efficiency(r, variant, datasheet_gbs, fixed_us)
                by_t.setdefault(r["tokens"] * r["top_k"] / r["experts"], []).append((e, r, variant))
    out = []
    for tpe, ends in sorted(by_t.items()):
        (lo, rlo, vlo), (hi, rhi, vhi) = min(ends, key=_first), max(ends, key=_first)

        def name(r, v):
            return f"vLLM Marlin MoE (w4a16 MXFP4), gpt_oss_120b TP{r['tp']}, {VARIANTS[v]}"

        times = ", ".join(
            f"TP{r['tp']} {VARIANTS[v].split()[1]} {r[f'{v}_w13_us'] + r[f'{v}_w2_us']:.1f} us"
            for _, r, v in sorted(ends, key=lambda x: (x[1]["tp"], x[2]))
        )
        tok = rlo["tokens"]
        out.append(
            f"      - {{tokens_per_expert: {tpe:g}, low: {lo:.3f}, "
            f'low_kernel: "{name(rlo, vlo)}", low_expert_mb: {expert_mb(rlo):.3f}, '
            f'high: {hi:.3f}, high_kernel: "{name(rhi, vhi)}", '
            f"high_expert_mb: {expert_mb(rhi):.3f}, "
            f'cite: "{source}{tok} token{"s" if tok != 1 else ""}, w13+w2: {times}"}}'
        )
    return out


def _first(x):
    """Return a tuple's first item (the efficiency)."""
    return x[0]


def main() -> int:
    """Print the points or a one-line refusal; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", help="the probe's JSON rows")
    p.add_argument("--datasheet-gbs", type=float, default=3350.0, help="the timing device's")
    p.add_argument("--fixed-us", type=float, default=3.06, help="the fit's cost a kernel")
    p.add_argument("--source", default="", help="what each point's cite starts with")
    a = p.parse_args()
    for flag, value in (("--datasheet-gbs", a.datasheet_gbs), ("--fixed-us", a.fixed_us)):
        if not math.isfinite(value) or value < 0 or (flag == "--datasheet-gbs" and value == 0):
            raise ConfigError(f"{flag}={value:g}: must be a finite number above 0")
    print("\n".join(points(_rows(a.rows), a.datasheet_gbs, a.fixed_us, a.source)))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("marlin_moe_curve", main))
