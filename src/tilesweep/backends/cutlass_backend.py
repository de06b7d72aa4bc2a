"""CUTLASS backend: shared-memory accounting for every architecture it covers (one batch job per
architecture, compiled from CUTLASS's own types), and the SM90 FP8 grouped-GEMM program timed on
an SM90 device (`cutlass:<tile>` runners)."""

from __future__ import annotations

import itertools
from pathlib import Path

from tilesweep.backends import Backend, kernel_cell, register
from tilesweep.backends.cutlass_gpu import ARCH as PROGRAM_ARCH
from tilesweep.settings.strict import Section

NAME = "cutlass"
ARCHS = ("sm_90", "sm_100", "sm_120")
# The SM90 program's decode job (it runs on an sm_90 device for real: PROGRAM_ARCH).
PROGRAM_JOB = "cutlass-sm90-fp8"


def cells(settings: dict, arch: str) -> list[dict]:
    """Return the CUTLASS accounting cells for one architecture."""
    conf = settings["backend"][NAME]
    dtype = conf["dtype_by_arch"].get(arch, "none")
    out = []
    for tile, stages, epilogue in itertools.product(
        settings["grid"]["tiles"], conf["stages"], conf["epilogues"]
    ):
        cell = kernel_cell(NAME, arch, dtype, tile, stages, 0, epilogue)
        if arch not in ARCHS or dtype == "none":
            cell["unsupported"] = f"the CUTLASS backend covers {', '.join(ARCHS)}; not {arch}"
        out.append(cell)
    return out


def account_cells(cells: list[dict], out_dir: Path, jobs: int = 1) -> list[dict]:
    """Return one accounting result per cell, in order; unsupported cells are not compiled."""
    from tilesweep.cutlass.accounting import account

    workdir = Path(out_dir).parents[1] / "cutlass-work"
    todo = [c for c in cells if not c.get("unsupported")]
    results = iter(account(todo, workdir, jobs=jobs) if todo else [])
    out = []
    for cell in cells:
        if cell.get("unsupported"):
            out.append({"status": "unsupported", "reason": cell["unsupported"]})
        else:  # the accounting's toolchain is nvcc's version: keep it under its own name
            result = dict(next(results))
            result["nvcc"] = result.pop("toolchain", None)
            if result.get("smem_bytes") is not None:
                # device_kernel declares SharedStorage as `extern __shared__` only: all dynamic.
                result["smem_dynamic_bytes"], result["smem_static_bytes"] = result["smem_bytes"], 0
            out.append(result)
    return out


def program_rows(spec: dict, log) -> list[dict]:
    """Return decode rows from the SM90 FP8 program at every batch (traffic, no roofline)."""
    from tilesweep.backends import cutlass_gpu
    from tilesweep.plan.expert_shapes import expert_ops, traffic

    bench, model = spec["bench"], spec["model"]
    experts = min(bench["gpu_experts"], model["routed_experts"])
    rows = []
    binary, note = cutlass_gpu.ensure_binary()
    log.info("CUTLASS program: %s (%s)", binary, note)
    for op, (n, k) in expert_ops(model).items():
        if binary is None:
            rows.append({"runner": "cutlass", "op": op, "status": "unsupported", "reason": note})
            continue
        records = cutlass_gpu.run(
            binary,
            n,
            k,
            experts,
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
            rows.append(row)
    return rows


class CutlassSettings(Section):
    """backend.cutlass: on or off, operand type per architecture, epilogues, stage counts."""

    enabled: bool
    dtype_by_arch: dict[str, str]
    epilogues: list[str]
    stages: list[int | str]  # "auto" or stage counts


@register
class CutlassBackend(Backend):
    """CUTLASS: accounting per architecture, the SM90 program on an SM90 device."""

    name = NAME
    order = 2
    build_per = "arch"
    source = "cutlass-types"
    runner_prefix = "cutlass"
    # The program as a whole, in the row that says why it could not be built.
    runner_names = ("cutlass",)
    settings_model = CutlassSettings

    def validate(self, settings: dict) -> None:
        """Raise ConfigError for stage counts, epilogues or operand types CUTLASS cannot build."""
        from tilesweep.config import ALLOWED_DTYPES, ALLOWED_EPILOGUES, check_choices
        from tilesweep.errors import ConfigError

        conf = settings["backend"][NAME]
        check_choices(conf["epilogues"], ALLOWED_EPILOGUES, "backend.cutlass.epilogues")
        if not conf["stages"]:
            raise ConfigError("backend.cutlass.stages=[]: give 'auto' or at least one stage count")
        for arch, dtype in conf["dtype_by_arch"].items():
            if dtype not in (*ALLOWED_DTYPES, "none"):
                raise ConfigError(
                    f"backend.cutlass.dtype_by_arch.{arch}={dtype!r}: allowed: "
                    f"{', '.join(ALLOWED_DTYPES)}, none"
                )
        for i, stages in enumerate(conf["stages"]):
            if (
                isinstance(stages, str)
                and stages != "auto"
                or isinstance(stages, int)
                and stages < 1
            ):
                raise ConfigError(
                    f"backend.cutlass.stages[{i}]={stages!r}: must be 'auto' or an integer >= 1"
                )

    def cells(self, settings: dict, arch: str, cc: int) -> list[dict]:
        """Return the CUTLASS accounting cells for one architecture."""
        return cells(settings, arch)

    def kernel_tail(self, cell: dict) -> str:
        """Return the cluster shape: every accounted kernel is 1x1."""
        return "c1x1"

    def build(self, cells: list[dict], out_dir, jobs: int = 1) -> list[dict]:
        """Return the accounting result of each cell of one architecture."""
        return account_cells(cells, Path(out_dir), jobs)

    def toolchain(self) -> str:
        """Return the nvidia-cutlass version whose headers were compiled."""
        from tilesweep.provenance import package_version

        return f"nvidia-cutlass {package_version('nvidia-cutlass')}"

    def launch_threads(self, build: dict) -> int:
        """Return the threads per block of the kernel as accounted (its schedule's
        MaxThreadsPerBlock, read from the compiled types)."""
        threads = build.get("threads_per_block")
        if not threads:
            raise ValueError("the CUTLASS build record carries no threads_per_block")
        return int(threads)

    def decode_jobs(self, settings: dict, kernels, gpus: tuple[str, ...]) -> list[str]:
        """Return the SM90 program's job when a GPU here is an SM90 device of the catalog."""
        from tilesweep.hardware import catalog_name

        catalog = settings["catalog"]
        for gpu in gpus:
            name = catalog_name(gpu, catalog)
            if name and catalog[name]["arch"] == PROGRAM_ARCH:
                return [PROGRAM_JOB]
        return []

    def owns_job(self, kernel: dict) -> bool:
        """Return whether the decode job is the SM90 program."""
        return kernel.get("kernel") == PROGRAM_JOB

    def bench(self, spec: dict, ceilings: dict, log) -> list[dict] | None:
        """Return the SM90 program's rows at every batch."""
        return program_rows(spec, log)

    def measured_rows(self, launch_row: dict, decode):
        """Return the program's rows for an auto-stage, default-epilogue tile that built, timed
        with the launch row's kernel schedule; only those compare."""
        if launch_row["stages_requested"] != "auto" or launch_row["status"] != "ok":
            return None
        if launch_row["epilogue"] != "default" or "schedule" not in decode:
            return decode.iloc[0:0]
        from tilesweep.cutlass.cells import kernel_schedule

        schedule = launch_row.get("schedule")
        if not isinstance(schedule, str):  # a row from before the column: the same function
            schedule = kernel_schedule(launch_row["arch"], int(launch_row["tile_m"]))
        tile = f"{launch_row['tile_m']}x{launch_row['tile_n']}x{launch_row['tile_k']}"
        return decode[
            (decode["runner"] == f"cutlass:{tile}")
            & (decode["dtype"] == launch_row["dtype"])
            & (decode["schedule"] == schedule)
        ]
