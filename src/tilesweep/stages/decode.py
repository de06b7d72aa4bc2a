"""Stage 3: device ceilings, then the decode benchmark of one kernel (or the baselines)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tilesweep.gpu_slot import gpu_slot
from tilesweep.io import read_json, write_json, write_table
from tilesweep.plan import roofline
from tilesweep.stages import logged, utc_now

NO_GPU = "no CUDA device here: Triton kernels are built and launch-checked, not timed"


def _measure_device(
    catalog_json: str, record_path: str, log_path: str | None = None, threads: int = 1
) -> dict:
    """Measure the device's copy bandwidth and matrix rates; write and return them."""
    import torch

    from tilesweep.measure.ceilings import measure

    torch.set_num_threads(threads)
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


def group_size(bench: dict, model: dict, cuda: bool) -> int:
    """Return the experts per timed grouped GEMM: the bench setting, at most the model's experts."""
    return min(bench["gpu_experts"] if cuda else bench["cpu_experts"], model["routed_experts"])


def _cases(settings: dict, cuda: bool):
    """Yield (op, n, k, routing, tokens_per_expert, counts) for every case of the sweep."""
    from tilesweep.plan.expert_shapes import expert_counts, expert_ops

    bench = settings["bench"]
    experts = group_size(bench, settings["model"], cuda)
    for op, (n, k) in expert_ops(settings["model"]).items():
        for routing in bench["routing"]:
            for t in settings["tokens_per_expert"]:
                counts = expert_counts(t, experts, routing, bench["zipf_alpha"], bench["seed"])
                yield op, n, k, routing, t, counts


def _runners(kernel: dict, cuda: bool) -> list[tuple[str, str, str, str | None]]:
    """Return (runner name, dtype, output dtype, skip reason or None) for one job's kernel."""
    from tilesweep.measure import gemm_case as decode

    name = kernel["kernel"]
    if name == "baselines":
        return [
            (
                b,
                "bf16",
                "bf16",
                "torch._grouped_mm runs on CUDA devices only"
                if b == "torch_grouped_mm" and not cuda
                else None,
            )
            for b in decode.BASELINES
        ]
    if name.startswith("fault-"):
        return [(name, "bf16", "bf16", None)]
    out = "fp32" if kernel["epilogue"] == "finalize" else "bf16"
    return [(f"triton:{name}", kernel["dtype"], out, _skip_reason(kernel["dtype"], cuda))]


def _skip_reason(dtype: str, cuda: bool) -> str | None:
    """Return why a Triton kernel of this dtype is not timed on the device at hand, or None."""
    if not cuda:
        return NO_GPU
    if dtype == "nvfp4":
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major < 10:
            return f"unsupported on this device: sm_{major}{minor} has no FP4 tensor cores"
        return "no NVFP4 Triton kernel in this backend yet; see the CUTLASS rows"
    return None


def _make_runner(runner: str, kernel: dict, counts: list[int], dtype: str, cuda: bool):
    """Return the call that computes one grouped GEMM with the named runner."""
    from tilesweep.kernels import faults
    from tilesweep.measure import gemm_case as decode

    if runner.startswith("triton:"):
        return decode.triton_runner(kernel, counts)
    if runner.startswith("fault-"):
        return faults.runner(runner.removeprefix("fault-"), cuda)
    return decode.baseline_runner(runner, counts, dtype)


def _measure_runner(
    spec: dict, runner: str, dtype: str, out: str, ceilings: dict, progress: str, threads: int
) -> None:
    """Measure one runner at every case, appending each row to `progress` (runs in a child)."""
    import torch

    from tilesweep.measure.gemm_case import measure_case

    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    l2 = (ceilings.get("properties") or {}).get("l2_bytes") or (50 << 20)
    out_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[out]
    gen = torch.Generator(device="cuda" if cuda else "cpu").manual_seed(spec["bench"]["seed"])
    kernel = spec["kernel"]
    for op, n, k, routing, t, counts in _cases(spec, cuda):
        try:
            result = measure_case(
                runner,
                lambda c=counts: _make_runner(runner, kernel, c, dtype, cuda),
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
        result = {key: v for key, v in result.items() if not callable(v)}
        with open(progress, "a") as stream:
            stream.write(json.dumps({"case": [op, routing, t], **result}) + "\n")
        if cuda:
            torch.cuda.empty_cache()


def _read_progress(path: str) -> dict[tuple, dict]:
    """Return the rows a (possibly killed) child wrote, by case."""
    rows = {}
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return rows
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
        rows[tuple(rec.pop("case"))] = rec
    return rows


def _bench_decode(
    cell_json: str,
    ceilings_path: str,
    table_path: str,
    log_path: str | None = None,
    threads: int = 1,
) -> pd.DataFrame:
    """Time one kernel (or the torch baselines) at every batch and routing; write the table.

    Each runner is measured in its own process with a time limit (`bench.kernel_timeout_s`): a
    crash, an illegal memory access or a hang becomes rows with that status, and what was
    measured before it is kept.
    """
    import tempfile

    import torch

    from tilesweep.isolate import Isolated, run_isolated
    from tilesweep.provenance import cell_hash, stamp

    spec = json.loads(cell_json)
    kernel, cuda = spec["kernel"], torch.cuda.is_available()
    ceilings = read_json(ceilings_path)
    prov = {**stamp(), "cell_hash": cell_hash(cell_json)}
    timeout = spec["bench"]["kernel_timeout_s"]
    job_start = utc_now()
    rows = []
    with logged(log_path) as log, tempfile.TemporaryDirectory() as tmp:
        for runner, dtype, out, skip in _runners(kernel, cuda):
            failure = None
            progress = f"{tmp}/{len(rows)}.jsonl"
            if skip is None:
                try:
                    run_isolated(
                        _measure_runner,
                        spec,
                        runner,
                        dtype,
                        out,
                        ceilings,
                        progress,
                        threads,
                        timeout=timeout,
                    )
                except Isolated as exc:
                    failure = {"status": exc.kind, "reason": f"{runner}: {exc.message}"}
                    log.warning("%s failed: %s", runner, exc.message)
            done = _read_progress(progress)
            for op, n, k, routing, t, counts in _cases(spec, cuda):
                base = {
                    "runner": runner,
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
                if skip is not None:
                    result = {"status": "unsupported", "reason": skip}
                else:
                    result = (
                        done.get((op, routing, t))
                        or failure
                        or {"status": "runtime", "reason": "no result from the measuring process"}
                    )
                row = {**base, **result, **prov}
                if "flops" in row:
                    row.update(_roof_columns(row, dtype, ceilings))
                log.info(
                    "%s %s %s t=%d: %s %s",
                    runner,
                    op,
                    routing,
                    t,
                    row["status"],
                    row.get("time_ms", ""),
                )
                rows.append(row)
    frame = pd.DataFrame(rows).assign(job_start_utc=job_start, job_end_utc=utc_now())
    write_table(table_path, frame)
    return frame


def _bench_cutlass(
    cell_json: str, ceilings_path: str, table_path: str, log_path: str | None = None
) -> pd.DataFrame:
    """Run the CUTLASS SM90 FP8 grouped GEMM program at every batch; write decode rows."""
    from tilesweep.backends import cutlass_gpu
    from tilesweep.plan.expert_shapes import expert_ops, traffic
    from tilesweep.provenance import cell_hash, stamp

    spec = json.loads(cell_json)
    bench, model = spec["bench"], spec["model"]
    ceilings = read_json(ceilings_path)
    prov = {**stamp(), "cell_hash": cell_hash(cell_json)}
    rows = []
    with logged(log_path) as log:
        binary, note = cutlass_gpu.ensure_binary()
        log.info("CUTLASS program: %s (%s)", binary, note)
        for op, (n, k) in expert_ops(model).items():
            if binary is None:
                rows.append(
                    {"runner": "cutlass", "op": op, "status": "unsupported", "reason": note}
                )
                continue
            records = cutlass_gpu.run(
                binary,
                n,
                k,
                group_size(bench, model, cuda=True),
                spec["tokens_per_expert"],
                bench["repeats"],
                bench["kernel_timeout_s"],
            )
            for rec in records:
                row = {
                    **cutlass_gpu.to_row(rec),
                    "op": op,
                    "routing": "uniform",
                    "model": model["name"],
                }
                if row.get("tokens_per_expert"):
                    counts = [row["tokens_per_expert"]] * row["experts"]
                    info = traffic(counts, n, k, "fp8", 2)
                    row.update(info)
                    if row["status"] == "ok":
                        seconds = row["time_ms"] * 1e-3
                        row["tflops"] = info["flops"] / seconds / 1e12
                        row["gbs"] = info["bytes"] / seconds / 1e9
                    row.update(_roof_columns(row, "fp8", ceilings))
                log.info(
                    "%s %s t=%s: %s", row["runner"], op, row.get("tokens_per_expert"), row["status"]
                )
                rows.append({**row, **prov})
    frame = pd.DataFrame(rows)
    write_table(table_path, frame)
    return frame


def measure_device(*args, **kwargs) -> dict:
    """Measure the device's ceilings on a GPU of this job's own; see _measure_device."""
    with gpu_slot():
        return _measure_device(*args, **kwargs)


def bench_decode(*args, **kwargs) -> pd.DataFrame:
    """Benchmark one kernel on a GPU of this job's own; see _bench_decode."""
    with gpu_slot():
        return _bench_decode(*args, **kwargs)


def bench_cutlass(*args, **kwargs) -> pd.DataFrame:
    """Run the CUTLASS program on a GPU of this job's own; see _bench_cutlass."""
    with gpu_slot():
        return _bench_cutlass(*args, **kwargs)
