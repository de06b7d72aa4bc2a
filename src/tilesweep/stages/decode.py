"""Stage 3: device ceilings, then the decode benchmark of one kernel (or the baselines)."""

import contextlib
import fcntl
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pandas as pd

from tilesweep import backends
from tilesweep.cells import read_cell_json, write_cell_json, write_cell_table
from tilesweep.errors import LaunchError
from tilesweep.isolate import Isolated, run_isolated
from tilesweep.measure.ceilings import measure
from tilesweep.measure.gemm_case import measure_case
from tilesweep.plan import roofline
from tilesweep.plan.expert_shapes import expert_counts, expert_ops
from tilesweep.provenance import cell_hash, gpu_names, stamp
from tilesweep.settings import BenchSettings, DecodeCell, ModelSettings, catalog_from_json
from tilesweep.stages import logged, utc_now


@contextlib.contextmanager
def gpu_slot(wait_s: float = 3600.0) -> Iterator[str | None]:
    """Yield the GPU index this job holds, or None where none is assigned here (Snakemake counts
    GPUs, it does not assign them)."""
    count = len(gpu_names())
    if count == 0 or os.environ.get("CUDA_VISIBLE_DEVICES"):
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / "tilesweep-gpu-locks"
    lock_dir.mkdir(exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        for index in range(count):
            handle = open(lock_dir / f"gpu{index}.lock", "w")  # noqa: SIM115 (held while yielding)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
            try:
                yield str(index)
            finally:
                del os.environ["CUDA_VISIBLE_DEVICES"]
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no free GPU among {count} after {wait_s:.0f} s")
        time.sleep(0.5)


@gpu_slot()  # on a GPU of this job's own
def measure_device(
    catalog_json: str, record_path: str, log_path: str | None = None, threads: int = 1
) -> dict:
    """Measure the device's copy bandwidth and matrix rates; write and return them."""
    import torch

    torch.set_num_threads(threads)
    with logged(log_path) as log:
        record = measure(catalog_from_json(catalog_json))
        log.info("ceilings %s", record)
    write_cell_json(record_path, record)
    return record


# A measured rate this far above its measured ceiling gets no fraction (the ceiling's own noise).
ABOVE_CEILING = 1.05


def peak_for(ceilings: dict, dtype: str) -> tuple[float | None, str]:
    """Return (the dtype's measured matmul peak, '') or (None, why); no other dtype stands in."""
    peak = (ceilings.get("matmul_tflops") or {}).get(dtype)
    if peak:
        return peak, ""
    why = (ceilings.get("matmul_errors") or {}).get(dtype) or "not measured on this device"
    return None, f"no measured {dtype} matrix-product peak: {why}"


def _roof_columns(row: dict, dtype: str, ceilings: dict) -> dict:
    """Return a row's roofline columns (empty, with `roofline_gap`, without a peak)."""
    peak, gap = peak_for(ceilings, dtype)
    bw = ceilings["copy_gbs"]
    cols = {"ceiling_copy_gbs": bw, "ceiling_matmul_tflops": peak, "roofline_gap": gap}
    if peak is not None:
        cols["ridge_flop_per_byte"] = roofline.ridge_point(peak, bw)
        cols["bound"] = roofline.bound(row["flops"], row["bytes"], peak, bw)
    sheet = ceilings.get("datasheet")
    if sheet:
        cols["datasheet_copy_gbs"] = sheet["copy_gbs"]
        cols["datasheet_tflops"] = sheet["matmul_tflops"].get(dtype)
    if row.get("status") == "ok":
        above = []  # a rate above its measured ceiling is no fraction: the ceiling is wrong there
        # The columns exist either way (NaN), so tables of two runs have the same columns.
        cols.update(frac_copy_bw=math.nan, frac_matmul_peak=math.nan, frac_roofline=math.nan)
        if row["gbs"] > bw * ABOVE_CEILING:
            above.append(f"{row['gbs']:.3g} GB/s above the measured copy bandwidth {bw:.3g}")
        else:
            cols["frac_copy_bw"] = row["gbs"] / bw
        if peak is not None and row["tflops"] > peak * ABOVE_CEILING:
            above.append(f"{row['tflops']:.3g} TFLOP/s above the measured {dtype} peak {peak:.3g}")
        elif peak is not None:
            floor = roofline.floor_ms(row["flops"], row["bytes"], peak, bw)
            cols["frac_matmul_peak"] = row["tflops"] / peak
            cols["frac_roofline"] = floor["floor_ms"] / row["time_ms"]
        if above:
            cols["roofline_gap"] = "; ".join(filter(None, [gap, *above])) + ": no fraction"
    return cols


def group_size(bench: BenchSettings, model: ModelSettings, cuda: bool) -> int:
    """Return the experts per timed grouped GEMM: the bench setting, at most the model's experts."""
    return min(bench.gpu_experts if cuda else bench.cpu_experts, model.routed_experts)


def _cases(cell: DecodeCell, cuda: bool):
    """Yield (a case's row columns: op, n, k, routing, tokens per expert, experts, the most tokens
    of one; its tokens per expert) for every case of the sweep."""
    bench = cell.bench
    experts = group_size(bench, cell.model, cuda)
    for op, (n, k) in expert_ops(cell.model).items():
        for routing in bench.routing:
            for t in cell.tokens_per_expert:
                counts = expert_counts(t, experts, routing, bench.zipf_alpha, bench.seed)
                case = {"op": op, "n": n, "k": k, "routing": routing, "tokens_per_expert": t}
                yield {**case, "experts": len(counts), "max_tokens_per_expert": max(counts)}, counts


def l2_for_rotation(ceilings: dict) -> tuple[int | None, str]:
    """Return the L2 size for buffer rotation and its source: device, hardware file, else None."""
    device = (ceilings.get("properties") or {}).get("l2_bytes")
    if device:
        return int(device), "device"
    sheet = (ceilings.get("datasheet") or {}).get("l2_bytes")
    if sheet:
        return int(sheet), f"conf/hardware/{ceilings.get('catalog_name')}.yaml"
    return None, "unknown: the device reports none and no hardware file lists it"


def _measure_runner(
    backend, cell: DecodeCell, run: backends.Runner, ceilings: dict, progress: str, threads: int
) -> None:
    """Measure one runner at every case, appending rows to `progress` (in a child process)."""
    import torch

    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    l2, l2_source = l2_for_rotation(ceilings)
    out_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[run.out_dtype]
    gen = torch.Generator(device="cuda" if cuda else "cpu").manual_seed(cell.bench.seed)
    for case, counts in _cases(cell, cuda):
        make = partial(backend.make_runner, run.name, cell.kernel, counts, run.dtype, cuda)
        n, k, key = case["n"], case["k"], [case[c] for c in ("op", "routing", "tokens_per_expert")]
        try:
            result = measure_case(
                make, counts, n, k, run.dtype, out_dtype, cell.bench, cuda, l2, gen
            )
        except LaunchError as exc:  # the launch itself was refused: the runner says so
            result = {"status": "launch", "reason": exc.reason}
        except Exception as exc:  # anything else a kernel raises is a row, not a crash
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            result = {"status": "runtime", "reason": f"{type(exc).__name__}: {msg}"}
        result = {key: v for key, v in result.items() if not callable(v)}
        if cuda:  # only a GPU rotates buffers past its L2
            result["l2_bytes_assumed"], result["l2_source"] = l2, l2_source
        with open(progress, "a") as stream:
            stream.write(json.dumps({"case": key, **result}) + "\n")
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


def _runner_rows(where: tuple, run: backends.Runner, progress: str, threads: int) -> list[dict]:
    """Return one runner's rows, measured in its own process under the time limit."""
    backend, cell, ceilings, prov, cuda, log = where
    runner, dtype, skip = run.name, run.dtype, run.skip
    failure = None
    if skip is None:
        try:
            args = (backend, cell, run, ceilings, progress, threads)
            run_isolated(_measure_runner, *args, timeout=cell.bench.kernel_timeout_s)
        except Isolated as exc:
            failure = {"status": exc.kind, "reason": f"{runner}: {exc.message}"}
            log.warning("%s failed: %s", runner, exc.message)
    done = _read_progress(progress)
    rows = []
    for case, _counts in _cases(cell, cuda):
        op, routing, t = case["op"], case["routing"], case["tokens_per_expert"]
        base = {"runner": runner, "kernel": cell.kernel["kernel"], "dtype": dtype, **case}
        base["model"] = cell.model.name
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
            "%s %s %s t=%d: %s %s", runner, op, routing, t, row["status"], row.get("time_ms", "")
        )
        rows.append(row)
    return rows


@gpu_slot()  # on a GPU of this job's own
def bench_decode(
    cell_json: str,
    ceilings_path: str,
    table_path: str,
    log_path: str | None = None,
    threads: int = 1,
) -> pd.DataFrame:
    """Time one decode job, each runner in its own process; write the table."""
    import torch

    cell = DecodeCell.from_json(cell_json)
    kernel, cuda = cell.kernel, torch.cuda.is_available()
    ceilings = read_cell_json(ceilings_path)
    prov = {**stamp(), "cell_hash": cell_hash(cell_json)}
    job_start = utc_now()
    backend = backends.decode_backend(kernel).decoder
    rows = []
    with logged(log_path) as log, tempfile.TemporaryDirectory() as tmp:
        own = backend.bench(cell, ceilings, log)
        if own is not None:  # the backend's own program measured every case
            for row in own:
                if "flops" in row:
                    row.update(_roof_columns(row, row["dtype"], ceilings))
                rows.append({**row, **prov})
        where = (backend, cell, ceilings, prov, cuda, log)
        for run in [] if own is not None else backend.runners(kernel, cuda):
            rows += _runner_rows(where, run, f"{tmp}/{len(rows)}.jsonl", threads)
    frame = pd.DataFrame(rows).assign(job_start_utc=job_start, job_end_utc=utc_now())
    write_cell_table(table_path, frame)
    return frame
