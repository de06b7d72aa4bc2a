"""Compose each held-out engine figure with `tilesweep verdict` and score it:
`python benchmarks/holdout/check.py [--set FOLDER] [OUT_CSV]` from the repository root.

FOLDER holds the set's figures.csv (default benchmarks/holdout4, the live held-out set; sets 2
and 3 were scored and then seen by changes made after them; set 1, once in this folder, was folded
into the corpus on 2026-12-07: README.md here). A figure whose
model, GPU, deployment or engine has no file under conf/ is reported as "cannot compose" with the
missing file, never composed.

One verdict call per deployment x load, all its concurrencies in one `deployment.batches` list,
with the overrides references.Figure.overrides() builds for a cited figure (model, hardware,
deployment, engine, batches, input_len/output_len, one layout, the one-tile grid,
references=none). Writes OUT_CSV (default /tmp/holdout_results.csv) and prints per-family and
overall scores at the corpus thresholds (0.75-1.33x, median |error|). About 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import get_args

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # runs from a bare checkout
from tilesweep.errors import ConfigError, tool_main  # noqa: E402 - after the checkout's src is on the path
from tilesweep.io import check_out_file, write_table  # noqa: E402 - likewise
from tilesweep.settings.cited_figures import STATED, Figure  # noqa: E402 - likewise

HERE = Path(__file__).resolve().parent
MAIN = HERE.parents[1]
DEFAULT_SET = MAIN / "benchmarks" / "holdout4"  # the live held-out set
CONF = MAIN / "conf"
COLUMNS = [
    "id",
    "source_url",
    "date",
    "engine",
    "version",
    "engine_config",
    "model",
    "hardware",
    "deployment",
    "gpus",
    "tp",
    "pp",
    "ep",
    "experts",
    "moe_tp",
    "batch",
    "input_len",
    "output_len",
    "nominal_isl",
    "nominal_osl",
    "kv_dtype",
    "speculative",
    "statistic",
    "tpot_ms",
    "quote",
    "note",
]
# A set may add the host a PCIe figure's source states (set 4 on): '' where a set lacks them.
HOST_COLUMNS = ["topology", "pcie_allreduce"]
# the conf group each figure column names a file of
CONF_GROUPS = {"model": "model", "hardware": "hardware", "deployment": "deployment"}
CONF_GROUPS["engine_config"] = "engine"
CLI = [sys.executable, "-m", "tilesweep.cli"]
BAND = (0.75, 1.33)
DEFAULT_OUT = "/tmp/holdout_results.csv"
KEY = (
    "model",
    "hardware",
    "deployment",
    "engine_config",
    "tp",
    "pp",
    "ep",
    "experts",
    "moe_tp",
    "input_len",
    "output_len",
    "kv_dtype",
    *HOST_COLUMNS,
)
# A figure's kv_dtype: the KV-cache format its launch states ('': not stated, the deployment's
# default), the values a corpus figure's kv_dtype takes.
KV_DTYPES = get_args(Figure.model_fields["kv_dtype"].annotation)
PCIE_ALLREDUCE = get_args(Figure.model_fields["pcie_allreduce"].annotation)


def overrides(g: dict, batches: list[int]) -> list[str]:
    """Return the Hydra overrides references.Figure.overrides() would give this group."""
    lay = f"{{tp:{g['tp']},pp:{g['pp']},ep:{g['ep']},experts:{g['experts'] or 'tp'}"
    lay += f",moe_tp:{g['moe_tp']}}}" if g["moe_tp"] else "}"
    return [
        f"model={g['model']}",
        f"hardware={g['hardware']}",
        f"deployment={g['deployment']}",
        f"engine={g['engine_config']}",
        f"deployment.batches=[{','.join(map(str, batches))}]",
        f"deployment.input_len={g['input_len']}",
        f"deployment.output_len={g['output_len']}",
        f"grid.layouts=[{lay}]",
        "grid.tiles=[{m:16,n:16,k:16}]",
        "references=none",
        *(f"deployment.{k}={g[k]}" for k in STATED if g[k]),
    ]


def compose(g: dict, batches: list[int]) -> tuple[dict[int, dict], str]:
    """Run one verdict call; return verdict rows by batch, or {} and the refusal line."""
    with tempfile.TemporaryDirectory() as out:
        cmd = ["nice", *CLI, "verdict", "--no-engines", "--out", out, *overrides(g, batches)]
        run = subprocess.run(cmd, cwd=MAIN, capture_output=True, text=True)
        path = Path(out) / "verdict.csv"
        if run.returncode or not path.exists():
            lines = [x for x in (run.stderr + run.stdout).splitlines() if x.strip()]
            return {}, (lines[-1] if lines else f"rc {run.returncode}")
        with path.open() as f:
            return {int(r["batch"]): r for r in csv.DictReader(f)}, ""


def cannot_compose(g: dict) -> str:
    """Return why a group names something conf/ has no file for ('' where every file exists)."""
    missing = [
        f"conf/{group}/{g[col]}.yaml"
        for col, group in CONF_GROUPS.items()
        if not (CONF / group / f"{g[col]}.yaml").is_file()
    ]
    return f"cannot compose: no {', '.join(missing)}" if missing else ""


def speculative(m: dict) -> str:
    """Return why a figure whose run decoded speculatively is not composed ('' where none ran):
    the verdict composes plain decoding, as the corpus holds no speculative figure."""
    spec = m.get("speculative", "") or "none"
    return "" if spec.startswith("none") else f"not composed: speculative decoding ran ({spec})"


def read_set(folder: str) -> list[dict]:
    """Return a held-out set's figures, or raise ConfigError in one line before any composing."""
    path = Path(folder) / "figures.csv"
    if not path.is_file():
        raise ConfigError(f"--set={folder}: no figures.csv there; name a held-out set's folder")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames not in (COLUMNS, COLUMNS + HOST_COLUMNS):
            raise ConfigError(f"--set={folder}: figures.csv's columns are not {','.join(COLUMNS)}")
        figs = [dict.fromkeys(HOST_COLUMNS, "") | f for f in reader]
    if not figs:
        raise ConfigError(f"--set={folder}: figures.csv has no figures")
    for f in figs:
        if f["kv_dtype"] not in KV_DTYPES:
            raise ConfigError(
                f"--set={folder}: figure {f['id']}: kv_dtype={f['kv_dtype']!r} is not one of "
                "bf16, fp8 or '' (the launch states none)"
            )
        if f["pcie_allreduce"] not in PCIE_ALLREDUCE:
            raise ConfigError(
                f"--set={folder}: figure {f['id']}: pcie_allreduce={f['pcie_allreduce']!r} is not "
                f"one of {', '.join(v or repr(v) for v in PCIE_ALLREDUCE)}"
            )
    return figs


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Return the command line: --set FOLDER and the optional OUT_CSV."""
    ap = argparse.ArgumentParser(prog="check.py", description="Score a held-out set.")
    ap.add_argument("--set", dest="folder", default=str(DEFAULT_SET), help="the set's folder")
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT, metavar="OUT_CSV")
    return ap.parse_args(argv)


def gap(row: dict) -> str:
    """Return why a composed row has no time ('' where it has one)."""
    if row.get("fits_memory") != "yes":
        return f"does not fit in memory ({row.get('mem_short_gb')} GB short per GPU)"
    return "" if row.get("tpot_ms") not in ("", "nan", None) else f"gap ({row.get('bound')})"


def main() -> None:
    """Compose every figure, write the results table, print the scores."""
    args = parse_args(sys.argv[1:])
    # the set and the output checked before minutes of composing, not after (one line, exit 2)
    figs = read_set(args.folder)
    target = check_out_file(args.out, flag="OUT_CSV")
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for f in figs:
        groups[tuple(f[k] for k in KEY)].append(f)
    out = []
    for key, members in groups.items():
        g = dict(zip(KEY, key, strict=True))
        refused = cannot_compose(g)
        rows = {}
        if not refused:
            rows, refused = compose(g, sorted({int(m["batch"]) for m in members}))
        for m in members:
            r = rows.get(int(m["batch"]), {})
            why = refused or (gap(r) if r else "no row for this batch") or speculative(m)
            comp = float(r["tpot_ms"]) if r and not why else float("nan")
            ratio = comp / float(m["tpot_ms"])
            out.append(
                {
                    **{
                        k: m[k]
                        for k in (
                            "id",
                            "engine",
                            "version",
                            "model",
                            "hardware",
                            "deployment",
                            "engine_config",
                            "tp",
                            "ep",
                            "batch",
                            "input_len",
                            "output_len",
                            "kv_dtype",
                            "statistic",
                            "tpot_ms",
                        )
                    },
                    "composed_tpot_ms": comp,
                    "composed_over_engine": ratio,
                    "in_band": BAND[0] <= ratio <= BAND[1] if ratio == ratio else "",
                    "bound": r.get("bound", ""),
                    "tpot_low_ms": r.get("tpot_low_ms", ""),
                    "tpot_high_ms": r.get("tpot_high_ms", ""),
                    "gap_or_refusal": why,
                    "source_url": m["source_url"],
                }
            )
    write_table(target, pd.DataFrame(out))  # built aside, renamed in whole
    report(out)


def score(rows: list[dict]) -> str:
    """Return n, composed/engine min/median/max, in-band count and median |error| of rows."""
    done = [
        r["composed_over_engine"]
        for r in rows
        if r["composed_over_engine"] == r["composed_over_engine"]
    ]
    if not done:
        return f"n={len(rows)} composed=0"
    inb = sum(BAND[0] <= x <= BAND[1] for x in done)
    err = statistics.median(abs(x - 1) * 100 for x in done)
    return (
        f"n={len(rows)} composed={len(done)} ratio min/med/max="
        f"{min(done):.2f}/{statistics.median(done):.2f}/{max(done):.2f} "
        f"in band {inb}/{len(done)} median|err|={err:.1f}%"
    )


def report(out: list[dict]) -> None:
    """Print per-family (model x GPU x engine) and overall scores, and every gap/refusal."""
    fam: dict[tuple, list[dict]] = defaultdict(list)
    for r in out:
        fam[(r["model"], r["hardware"], r["engine"])].append(r)
    for k, rows in sorted(fam.items()):
        print(" x ".join(k), "|", score(rows))
    print("overall |", score(out))
    for r in out:
        if r["gap_or_refusal"]:
            print("gap/refused:", r["id"], "|", r["gap_or_refusal"])


if __name__ == "__main__":
    sys.exit(tool_main("holdout", main))
