"""Print an engine file's grouped_gemm_efficiency points (mxfp4) from tools/marlin_moe_probe.py's
rows: vLLM's own Marlin MoE GEMMs (w13 + w2) at gpt-oss-120b's TP shards, as the verdict composes
them: time = 2 kernels x the fit's fixed cost + bytes / (e x datasheet), so
e = bytes / datasheet / (w13 + w2 - 2 x fixed). The bytes are the verdict's for the layer
(plan/step_parts.py _expert_parts: the touched experts' unpadded weights at 4.25 bits a value,
and each routed row's activations), so e carries what vLLM's Marlin padding costs.

Each point's two ends are the smallest and the largest expert timed (TP8 and TP2), each the
geometric mean of the two thread tables' readings (within 2% of each other): a curve of `ends:
sizes`, read between them in log size (plan.grouped_efficiency); each shard between the two is
printed to stderr with its reading beside the curve's.

--carry-to GBS: the rows ran on another device; each reading is carried to the target of GBS
datasheet bandwidth as the geometric middle of the time carried (the target no faster) and the
fraction of the datasheet carried (the target as much faster as its bandwidth).

python3 tools/marlin_moe_curve.py ROWS.json [--datasheet-gbs 3350] [--fixed-us 3.06]
    [--source "measured: ..."] [--carry-to 4800]
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


def points(rows: list[dict], a: argparse.Namespace) -> list[str]:
    """Return one YAML flow mapping a tokens-per-expert value, ascending (the smallest and the
    largest expert timed as its two ends; a curve of `ends: sizes`)."""
    carry = math.sqrt(a.datasheet_gbs / a.carry_to) if a.carry_to else 1.0
    out = []
    for tok in sorted({r["tokens"] for r in rows}):
        at = sorted((r for r in rows if r["tokens"] == tok), key=expert_mb)
        ends = [(_both_tables(r, a) * carry, r) for r in (at[0], at[-1])]
        (lo, rlo), (hi, rhi) = sorted(ends, key=_first)
        for r in at[1:-1]:  # a shard between the two: its reading beside the curve's
            mix = _log_between(expert_mb(r), [(expert_mb(x), e) for e, x in ends])
            print(
                f"# TP{r['tp']} at {tok} tokens: measured {_both_tables(r, a) * carry:.3f}, "
                f"read between the ends {mix:.3f}",
                file=sys.stderr,
            )
        tpe = tok * rlo["top_k"] / rlo["experts"]
        out.append(
            f"      - {{tokens_per_expert: {tpe:g}, low: {lo:.3f}, "
            f'low_kernel: "{_name(rlo, a)}", low_expert_mb: {expert_mb(rlo):.3f}, '
            f'high: {hi:.3f}, high_kernel: "{_name(rhi, a)}", '
            f"high_expert_mb: {expert_mb(rhi):.3f}, "
            f'cite: "{a.source}{tok} token{"s" if tok != 1 else ""}, {_times(rows, tok)}"}}'
        )
    return out


def _both_tables(row: dict, a: argparse.Namespace) -> float:
    """Return the geometric mean of a row's efficiency under each thread table it was timed with."""
    es = [efficiency(row, v, a.datasheet_gbs, a.fixed_us) for v in VARIANTS if f"{v}_w13_us" in row]
    if not es:
        raise ConfigError(f"TP{row['tp']} at {row['tokens']} tokens: no w13 and w2 times")
    return math.exp(sum(math.log(e) for e in es) / len(es))


def _log_between(mb: float, ends: list[tuple[float, float]]) -> float:
    """Return the efficiency at `mb` between two (MB, efficiency) ends, mixed in log size."""
    (mb_a, e_a), (mb_b, e_b) = sorted(ends)
    w = min(max(math.log(mb / mb_a) / math.log(mb_b / mb_a), 0.0), 1.0)
    return math.exp((1 - w) * math.log(e_a) + w * math.log(e_b))


def _name(row: dict, a: argparse.Namespace) -> str:
    """Return an end's kernel in words."""
    how = ", the middle of the time and the fraction carried" if a.carry_to else ""
    return f"vLLM Marlin MoE (w4a16 MXFP4), gpt_oss_120b TP{row['tp']}, both tables{how}"


def _times(rows: list[dict], tokens: int) -> str:
    """Return the w13 + w2 microseconds of each shard at `tokens`, under both tables."""
    words = []
    for r in sorted((r for r in rows if r["tokens"] == tokens), key=lambda r: -r["tp"]):
        both = [r[f"{v}_w13_us"] + r[f"{v}_w2_us"] for v in VARIANTS if f"{v}_w13_us" in r]
        words.append(f"TP{r['tp']} " + "/".join(f"{us:.1f}" for us in both))
    return "w13+w2 us (0.16.0/0.14.1 tables): " + ", ".join(words)


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
    p.add_argument("--carry-to", type=float, default=None, help="the target's datasheet GB/s")
    a = p.parse_args()
    for flag, value in (
        ("--datasheet-gbs", a.datasheet_gbs),
        ("--fixed-us", a.fixed_us),
        ("--carry-to", a.carry_to),
    ):
        if value is not None and (not math.isfinite(value) or value < 0):
            raise ConfigError(f"{flag}={value:g}: must be a finite number, at least 0")
    if a.datasheet_gbs == 0 or a.carry_to == 0:
        raise ConfigError("--datasheet-gbs and --carry-to must be above 0")
    print("\n".join(points(_rows(a.rows), a)))
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("marlin_moe_curve", main))
