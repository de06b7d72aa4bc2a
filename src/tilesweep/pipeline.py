"""What the Snakefile needs: the composed config, the cells, output paths and each rule's code
hash (rerun_keys); the `--config` keys it takes are command_config's."""

import sys
from pathlib import Path

from tilesweep import backends, deployment_refusals, device, grid
from tilesweep.config import compose_settings
from tilesweep.deployment_verdict import DECODE_DTYPE
from tilesweep.errors import ConfigError
from tilesweep.io import check_results_dir, project_path
from tilesweep.plan.calibration import FIT_LAYOUT
from tilesweep.report_paths import REPORT_FILES, Stage5
from tilesweep.rerun_keys import code_hash

# The fields that name a kernel configuration, as grid.build_cells writes them.
KERNEL_FIELDS = ("dtype", "tile_m", "tile_n", "tile_k", "stages", "warps", "epilogue")


def _pick(row: dict, keys: tuple[str, ...]) -> dict:
    """Return the given keys of a grid row, leaving out absent and NaN (missing) values."""
    return {k: row[k] for k in keys if k in row and row[k] == row[k]}


# The stage module each core rule calls: every module of src/tilesweep/stages/ has its rule's
# name, and the device's ceilings are the decode stage's; a tuner's rules call the modules its
# role names (Tuner.rule_modules).
_STAGES = Path(__file__).parent / "stages"
RULE_STAGES = {p.stem: f"stages/{p.name}" for p in _STAGES.glob("[!_]*.py")}
RULE_STAGES["device"] = "stages/decode.py"


def _module_path(obj: object) -> str:
    """Return the file defining obj's class (absolute for a plugin)."""
    name = type(obj).__module__
    if name.startswith("tilesweep."):
        return str(Path(*name.split(".")[1:]).with_suffix(".py"))
    return str(Path(sys.modules[name].__file__).resolve())


class Sweep:
    """The composed config and every cell, computed once per Snakefile read."""

    def __init__(self, overrides: list[str], conf_dir: Path | None):
        self.settings = compose_settings(overrides, conf_dir)
        # The machine the jobs are planned for: decided once, by the `device` setting.
        self.device = device.resolve(self.settings.device, self.settings.catalog)
        gpus = self.device.gpus
        self.results = check_results_dir(self.settings.results_dir)

        grid.check_size(self.settings)
        why = deployment_refusals.refusal(self.settings)
        if why:
            raise ConfigError(why)
        self.builds = grid.build_cells(self.settings)
        self.launches = grid.launch_cells(self.settings, self.builds)
        self.kernels = grid.bench_kernels(self.settings, self.builds)
        # Each enabled backend's decode jobs on this machine (the CUTLASS SM90 program only
        # where an SM90 device of the catalog is at hand).
        self._decode_owner = {
            job: backend
            for backend in backends.enabled(self.settings)
            if backend.decoder
            for job in backend.decoder.decode_jobs(self.settings, self.kernels, gpus)
        }
        self.decode_jobs = list(self._decode_owner)
        self._by_kernel = {r["kernel"]: r for r in self.kernels.to_dict("records")}
        self._check_step_runner()
        self._codes: dict[tuple[str, ...], str] = {}
        self.layouts = grid.layouts(self.settings)
        self._by_build = {r["build_id"]: r for r in self.builds.to_dict("records")}
        self._by_launch = {r["launch_id"]: r for r in self.launches.to_dict("records")}
        self._by_layout = {r["layout"]: r for r in self.layouts.to_dict("records")}

    def _check_step_runner(self) -> None:
        """Raise ConfigError when bench.step_runner cannot run with this grid's kernels."""
        runner = self.settings.bench.step_runner
        found = backends.step_backend(runner) if runner != "auto" else None
        why = found.stepper.runner_fault(runner, self._by_kernel) if found else None
        if why:
            raise ConfigError(f"bench.step_runner={runner!r}: {why}")

    def rule_code(self, rule: str, key: str | None = None) -> str:
        """Return one rule's code hash: its stage, imports and the modules it runs."""
        tuner = backends.rule_tuner(rule) if rule not in RULE_STAGES else None
        stage = tuner.rule_modules[rule] if tuner else RULE_STAGES[rule]
        registered = backends.registered()
        if tuner:
            runs = [tuner]
        elif rule in ("build", "launch"):
            runs = [backends.builder(key)]
        elif rule == "decode":
            runs = [self._decode_owner[key].decoder] if key in self._decode_owner else []
        elif rule == "layout":
            runs = [b.stepper for b in registered if b.stepper]
        elif rule == "tables":  # which decode rows ran a launch row's kernel, the extra rows
            runs = [b.decoder for b in registered if b.decoder]
        else:
            runs = []
        modules = (stage, *sorted({_module_path(b) for b in runs}))
        if modules not in self._codes:  # one hash per module set per Snakefile read
            self._codes[modules] = code_hash(*modules)
        return self._codes[modules]

    def path(self, *parts: str) -> str:
        """Return a path under the results folder."""
        return str(self.results.joinpath(*parts))

    def build_cell(self, backend: str, arch: str, kernel: str) -> str:
        """Return the canonical JSON of one build cell."""
        row = self._by_build[f"{backend}/{arch}/{kernel}"]
        return grid.canonical(_pick(row, ("backend", "arch", *KERNEL_FIELDS, "unsupported")))

    def launch_cell(self, backend: str, target: str, kernel: str) -> str:
        """Return the canonical JSON of one launch check: the target's spec and the kernel."""
        row = self._by_launch[f"{backend}/{target}/{kernel}"]
        spec = self.settings.catalog[target]
        keep = ("backend", "target", "arch", *KERNEL_FIELDS, "kernel")
        return grid.canonical({"cell": {k: row[k] for k in keep}, "hardware": spec})

    def bench_cell(self, kernel: str) -> str:
        """Return the canonical JSON of one decode benchmark job: kernel, model, batches, method."""
        row = dict(self._by_kernel[kernel]) if kernel in self._by_kernel else {"kernel": kernel}
        return self._measured(kernel=row)

    def collective_cell(self, layout: str) -> str:
        """Return the canonical JSON of one collective benchmark: layout, model, batches."""
        return self._measured(layout=self._by_layout[layout])

    def _measured(self, **what: dict) -> str:
        """Return the canonical JSON of a benchmark of `what` on the model by the bench's method."""
        ours = self.settings
        per_expert = ours.grid.tokens_per_expert
        return grid.canonical(
            {**what, "model": ours.model, "tokens_per_expert": per_expert, "bench": ours.bench}
        )

    def batch_cells(self, backend: str, arch: str) -> str:
        """Return the canonical JSON list of every cell one architecture's batch build takes."""
        rows = self.builds[(self.builds["backend"] == backend) & (self.builds["arch"] == arch)]
        keep = ("backend", "arch", *KERNEL_FIELDS, "kernel", "unsupported")
        cells = [_pick(r, keep) for r in rows.to_dict("records")]
        return grid.canonical(cells)

    def build_toolchain(self, backend: str) -> str:
        """Return the versions that decide what a backend's builds produce (a rule param)."""
        return backends.builder(backend).toolchain()

    def build_record(self, backend: str, target: str, kernel: str) -> str:
        """Return the build output a launch check of this kernel on this target reads."""
        arch = self.settings.catalog[target].arch
        if backends.builder(backend).build_per == "arch":
            return self.path("build", backend, arch, "batch.json")
        return self.path("build", backend, arch, kernel, "build.json")

    def launch_outputs(self) -> list[str]:
        """Return every launch-check output path."""
        return [
            self.path("launch", r["backend"], r["target"], f"{r['kernel']}.json")
            for r in self.launches.to_dict("records")
        ]

    def cell_outputs(self) -> list[str]:
        """Return every planned per-cell output, each written with its record (cells.py)."""
        launches = self.launches.to_dict("records")
        builds = {self.build_record(r["backend"], r["target"], r["kernel"]) for r in launches}
        joined = [p for paths in self.table_inputs().values() for p in paths]
        return [self.path("device", "ceilings.json"), *sorted(builds), *joined]

    def table_inputs(self) -> dict[str, list[str]]:
        """Return the per-cell outputs the tables step joins, by table (its named inputs)."""
        return {
            "launch": self.launch_outputs(),
            "decode": self.decode_outputs(),
            "collective": self.collective_outputs(),
            "layout": self.layout_outputs(),
            "power": [self.path("power", "power.csv")],
            "tune": self.tune_tables(),
        }

    def decode_outputs(self, jobs: list[str] | None = None) -> list[str]:
        """Return the decode benchmark outputs of `jobs` (every job of each enabled backend)."""
        return [
            self.path("decode", f"{name}.csv")
            for name in (self.decode_jobs if jobs is None else jobs)
        ]

    def answer_decode_jobs(self) -> list[str]:
        """Return the decode jobs timing the verdict's operand type."""
        return [
            job
            for job, backend in self._decode_owner.items()
            if DECODE_DTYPE in backend.decoder.row_dtypes(self._by_kernel.get(job, {"kernel": job}))
        ]

    def collective_outputs(self) -> list[str]:
        """Return every collective output path (an experts=ep layout shares its TP twin's)."""
        rows = self.layouts[self.layouts["experts"] == "tp"]
        return [self.path("collective", f"{name}.csv") for name in rows["layout"]]

    def layout_outputs(self) -> list[str]:
        """Return every whole-step output: layouts that fit here, and emulated larger ones."""
        gpus = len(self.device.gpus)
        bench = self.settings.bench
        cap = gpus if gpus else bench.step_cpu_world_cap
        return [
            self.path("layout", f"{r['layout']}.csv")
            for r in self.layouts.to_dict("records")
            if (r["world"] <= cap or bench.step_emulate) and r["experts"] == "tp"
        ]  # the measured step splits experts over TP only: experts=ep layouts are composed

    def fit_layout_outputs(self) -> list[str]:
        """Return the whole steps a GPU verdict fits on (calibration.FIT_LAYOUT); none off a GPU."""
        if not self.device.gpus:
            return []
        path = self.path("layout", f"{FIT_LAYOUT}.csv")
        return [path] if path in self.layout_outputs() else []

    def shipped_fit(self) -> list[str]:
        """Return [the shipped fit] when it exists, so a changed fit reruns the aggregate."""
        path = self.settings.deployment.fit_file
        return [str(project_path(path))] if path and project_path(path).is_file() else []

    def layout_step_cell(self, layout: str) -> str:
        """Return the canonical JSON of one whole-step job."""
        bench = self.settings.bench
        keep = ("warmup", "repeats", "cpu_repeats", "seed")
        kernels, inputs = {}, {}
        gpus = self.device.gpus
        if gpus and not self.kernels.empty:
            kernels = dict(self._by_kernel)
        if gpus:  # what the GPU step's runner reads, so that a changed tuned table reruns it
            runner = bench.step_runner
            runner = backends.default_step_runner(True) if runner == "auto" else runner
            layout_row = self._by_layout[layout]
            inputs = backends.step_inputs(self.settings, runner, layout_row, gpus[0])
        # The engine's list only where asked for: a lean step's key is what it was before the
        # setting existed, and the engine and weight dtype rerun only the engine's steps.
        lean = bench.step_kernel_list == "lean"
        if not lean:
            inputs["engine"] = self.settings.engine
            inputs["weight_dtype"] = self.settings.deployment.weight_dtype
        # The whole step's batches: the deployment's and the grid's.
        model = self.settings.model
        per_expert = [
            t * model.routed_experts // model.top_k for t in self.settings.grid.tokens_per_expert
        ]
        batches = sorted({*self.settings.deployment.batches, *(max(1, b) for b in per_expert)})
        return grid.canonical(
            {
                "layout": self._by_layout[layout],
                "model": model,
                "batches": batches,
                # model_dump: output only (the rule's JSON param, its rerun key, as canonical())
                "bench": {
                    k: v
                    for k, v in bench.model_dump(exclude_unset=True).items()
                    if (k in keep or k.startswith("step_"))
                    and not (k == "step_kernel_list" and lean)
                },
                "kernels": kernels,
                **inputs,
            }
        )

    def tune_dtypes(self) -> list[str]:
        """Return the dtypes the enabled backends tune on this machine (none without a GPU)."""
        gpus = self.device.gpus
        return [
            d
            for b in backends.enabled(self.settings)
            if b.tuner
            for d in b.tuner.tune_jobs(self.settings, gpus)
        ]

    def tune_tables(self) -> list[str]:
        """Return the tuners' tables the tables step joins (one per tuned dtype, say)."""
        return [self.path(p) for p in backends.tune_tables(self.settings, self.device.gpus)]

    def tuned_outputs(self) -> list[str]:
        """Return everything the enabled tuners write here, keyed by backend."""
        return [self.path(p) for p in backends.tune_outputs(self.settings, self.device.gpus)]

    def tune_settings_json(self) -> str:
        """Return the canonical JSON of what tuning reads."""
        s = self.settings
        return grid.canonical(
            {
                "model": s.model,
                "grid": {"layouts": s.grid.layouts},
                "backend": backends.tune_inputs(self.settings),
                "bench": {"zipf_alpha": s.bench.zipf_alpha, "seed": s.bench.seed},
                "catalog": s.catalog,
            }
        )

    def settings_json(self) -> str:
        """Return the whole resolved config as canonical JSON (the aggregate's param)."""
        return grid.canonical(self.settings)

    def check_settings_json(self) -> str:
        """Return the canonical JSON of what the check step reads (its only rerun key)."""
        dep = self.settings.deployment
        return grid.canonical(
            {
                "model": self.settings.model,
                "deployment": {k: getattr(dep, k) for k in ("fit_batches", "attention_table")},
            }
        )

    def final_outputs(self) -> list[str]:
        """Return what a full sweep ends in: tables, verdict, reports, tuning and power readings."""
        stage = self.stage5()
        tables = ["launch", "decode", "collective", "verdict"]
        return [
            *(str(stage.tables / f"{t}.csv") for t in tables),
            *(str(stage.reports / name) for name in REPORT_FILES),
            *self.tuned_outputs(),
            self.path("power", "power.csv"),
        ]

    def stage5(self, example: str | None = None):
        """Return where the verdict, figures and reports read and write (report_paths.Stage5)."""
        return Stage5(self, example)
