"""Stage 3: device ceilings, then the decode benchmark of one kernel (or the baselines)."""

from __future__ import annotations

import json

import pandas as pd

from tilesweep.bench import roofline
from tilesweep.io import read_json, write_json, write_table
from tilesweep.steps import logged

NO_GPU = "no CUDA device here: Triton kernels are built and launch-checked, not timed"


def measure_device(catalog_json: str, record_path: str, log_path: str | None = None) -> dict:
    """Measure the device's copy bandwidth and matrix rates; write and return them."""
    from tilesweep.bench.ceilings import measure

    with logged(log_path) as log:
        record = measure(json.loads(catalog_json))
        log.info("ceilings %s", record)
    write_json(record_path, record)
    return record


def _roof_columns(row: dict, dtype: str, ceilings: dict) -> dict:
    """Return the roofline columns of a measured row against the measured ceilings."""
    peak = ceilings["matmul_tflops"].get(dtype) or ceilings["matmul_tflops"].get("bf16")
    bw = ceilings["copy_gbs"]
    cols = {
        "ceiling_copy_gbs": bw,
        "ceiling_matmul_tflops": peak,
        "ridge_flop_per_byte": roofline.ridge_point(peak, bw),
        "bound": roofline.bound(row["flops"], row["bytes"], peak, bw),
    }
    sheet = ceilings.get("datasheet")
    if sheet:
        cols["datasheet_copy_gbs"] = sheet["copy_gbs"]
        cols["datasheet_tflops"] = sheet["matmul_tflops"].get(dtype)
    if row.get("status") == "ok":
        floor = roofline.floor_ms(row["flops"], row["bytes"], peak, bw)
        cols.update(
            {
                "frac_copy_bw": row["gbs"] / bw,
                "frac_matmul_peak": row["tflops"] / peak,
                "frac_roofline": floor["floor_ms"] / row["time_ms"],
            }
        )
    return cols


def _cases(settings: dict, cuda: bool):
    """Yield (op, n, k, routing, tokens_per_expert, counts) for every case of the sweep."""
    from tilesweep.bench.decode import expert_counts, expert_ops

    bench = settings["bench"]
    experts = bench["gpu_experts"] if cuda else bench["cpu_experts"]
    for op, (n, k) in expert_ops(settings["model"]).items():
        for routing in bench["routing"]:
            for t in settings["tokens_per_expert"]:
                counts = expert_counts(t, experts, routing, bench["zipf_alpha"], bench["seed"])
                yield op, n, k, routing, t, counts


def _runners(kernel: dict, cuda: bool):
    """Yield (runner name, dtype, output dtype name, factory or skip reason) for a job."""
    from tilesweep.bench import decode

    if kernel["kernel"] == "baselines":
        for name in decode.BASELINES:
            if name == "torch_grouped_mm" and not cuda:
                yield name, "bf16", "bf16", "torch._grouped_mm runs on CUDA devices only"
                continue
            yield (
                name,
                "bf16",
                "bf16",
                (lambda c, name=name: decode.baseline_runner(name, c, "bf16")),
            )
        return
    out = "fp32" if kernel["epilogue"] == "finalize" else "bf16"
    if not cuda:
        yield f"triton:{kernel['kernel']}", kernel["dtype"], out, NO_GPU
        return
    yield (
        f"triton:{kernel['kernel']}",
        kernel["dtype"],
        out,
        lambda c: decode.triton_runner(kernel, c),
    )


def bench_decode(
    cell_json: str, ceilings_path: str, table_path: str, log_path: str | None = None
) -> pd.DataFrame:
    """Time one kernel (or the torch baselines) at every batch and routing; write the table."""
    import torch

    from tilesweep.bench.decode import measure_case
    from tilesweep.provenance import stamp

    spec = json.loads(cell_json)
    kernel, cuda = spec["kernel"], torch.cuda.is_available()
    ceilings = read_json(ceilings_path)
    l2 = (ceilings.get("properties") or {}).get("l2_bytes") or (50 << 20)
    prov = stamp()
    rows = []
    with logged(log_path) as log:
        gen = torch.Generator().manual_seed(spec["bench"]["seed"])
        for name, dtype, out, factory in _runners(kernel, cuda):
            out_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[out]
            for op, n, k, routing, t, counts in _cases(spec, cuda):
                base = {
                    "runner": name,
                    "kernel": kernel["kernel"],
                    "dtype": dtype,
                    "op": op,
                    "n": n,
                    "k": k,
                    "routing": routing,
                    "tokens_per_expert": t,
                    "experts": len(counts),
                    "max_tokens_per_expert": max(counts),
                    "model": spec["model"]["name"],
                }
                if isinstance(factory, str):
                    rows.append({**base, "status": "unsupported", "reason": factory, **prov})
                    continue
                try:
                    result = measure_case(
                        name,
                        lambda f=factory, c=counts: f(c),
                        counts,
                        n,
                        k,
                        dtype,
                        out_dtype,
                        spec,
                        cuda,
                        l2,
                        gen,
                    )
                except Exception as exc:  # a kernel that cannot launch is a row, not a crash
                    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    status = "launch" if "resources" in msg or "shared" in msg else "runtime"
                    result = {"status": status, "reason": f"{type(exc).__name__}: {msg}"}
                row = {**base, **result, **prov}
                if "flops" in row:
                    row.update(_roof_columns(row, dtype, ceilings))
                log.info(
                    "%s %s %s t=%d: %s %s",
                    name,
                    op,
                    routing,
                    t,
                    row["status"],
                    row.get("time_ms", ""),
                )
                rows.append(row)
                if cuda:
                    torch.cuda.empty_cache()
    frame = pd.DataFrame(rows)
    write_table(table_path, frame)
    return frame
