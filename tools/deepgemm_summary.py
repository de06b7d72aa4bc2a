"""Read tools/deepgemm_probe.py's JSON into one MoE layer's expert-GEMM rate per TP and tokens: the
gate_up and down GEMMs together, (their FLOPs over M_sum rows) / (their summed time x the dense
FP8 datasheet peak), the e_math that conf/engine/vllm_0_12.yaml's padded_experts charges both
GEMMs at (plan/padded_experts.py: one e_math for an expert's parameters over M_sum rows).

Usage: python tools/deepgemm_summary.py deepgemm_probe.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tilesweep.errors import tool_main


def layers(doc: dict) -> list[dict]:
    """Return one row per (tp, tokens) holding both GEMMs: their times and the combined e_math."""
    peak = doc["peak_fp8_tflops"] * 1e12
    by_key: dict[tuple, dict] = {}
    for row in doc["rows"]:
        if "error" in row:
            continue
        by_key.setdefault((row["tp"], row["tokens"]), {})[row["gemm"]] = row
    out = []
    for (tp, tokens), pair in sorted(by_key.items()):
        if set(pair) != {"gate_up", "down"}:
            continue
        flops = sum(2 * r["m_sum"] * r["n"] * r["k"] for r in pair.values())
        us = sum(r["us"] for r in pair.values())
        out.append(
            {
                "tp": tp,
                "tokens": tokens,
                "m_sum": pair["gate_up"]["m_sum"],
                "gate_up_us": pair["gate_up"]["us"],
                "down_us": pair["down"]["us"],
                "gate_up_frac": pair["gate_up"]["frac_1979"],
                "down_frac": pair["down"]["frac_1979"],
                "e_math": round(flops / (us * 1e-6 * peak), 4),
            }
        )
    return out


def main() -> int:
    """Print the layer rows and the least and most e_math; return the exit status."""
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[-1])
    doc = json.loads(Path(sys.argv[1]).read_text())
    rows = layers(doc)
    if not rows:
        sys.exit(f"{sys.argv[1]}: no (tp, tokens) with both GEMMs timed")
    print(f"{doc['device']} DeepGEMM {doc['deepgemm_commit'][:7]}")
    for r in rows:
        print(json.dumps(r))
    lo, hi = min(r["e_math"] for r in rows), max(r["e_math"] for r in rows)
    print(f"e_math least {lo} most {hi}")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("deepgemm_summary", main))
