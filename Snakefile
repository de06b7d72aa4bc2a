"""tilesweep: which kernel configurations launch, how fast they decode, what bounds them."""

import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

# The package, imported: a module that fails to import (a damaged install, a missing dependency)
# is one line naming a trace file, not Snakemake's frames; a TILESWEEP_PLUGINS entry that cannot
# be imported is named by the plugin loader's own line (plugin_loader.py).
try:
    from tilesweep import answer_card
    from tilesweep.cells import (
        damaged,
        mark_rebuilds,
        rebuild_lines,
        rebuild_param,
        rebuilds,
        rebuilds_of,
        stale_join,
    )
    from tilesweep.errors import ConfigError, unexpected
    from tilesweep.sweep_lock import hold, probe
    from tilesweep.grid import canonical as grid_json
    from tilesweep.command_config import check_command_config, parse_overrides
    from tilesweep.pipeline import Sweep
    from tilesweep.progress import attach as show_progress
    from tilesweep.plan.calibration import FIT_LAYOUT
    from tilesweep.report_paths import (
        FIGURE_CATEGORIES,
        CHECK_TABLES,
        COMPOSED_TABLES,
        MEASURED_TABLES,
        example_overrides,
    )
    from tilesweep.provenance import package_version, toolchain_key
except Exception as err:
    try:
        from tilesweep.errors import unexpected

        why = unexpected(err)
    except Exception:  # the errors module itself cannot be imported
        why = f"{type(err).__name__}: {err}"
    sys.exit(f"tilesweep: the package cannot be imported: {why}")

# `--config example=docs/examples/h200` re-renders a kept example from its own tables.
EXAMPLE = config.get("example")
# `snakemake -n` (known while the Snakefile is read, unlike workflow.dryrun): it writes nothing.
DRY_RUN = bool(workflow.output_settings.dryrun)
try:
    check_command_config(config)
    # `--config device=h200x8` (as the SLURM profile sets it) comes before the user's overrides,
    # and a kept example's own overrides before both.
    PLANNED = [f"device={config['device']}"] if "device" in config else []
    KEPT = example_overrides(EXAMPLE) if EXAMPLE else []
    SWEEP = Sweep(
        KEPT + PLANNED + parse_overrides(config.get("overrides")),
        Path(workflow.basedir) / "conf",
    )
    R = SWEEP.results
    STAGE5 = SWEEP.stage5(EXAMPLE)
    REBUILDS = rebuilds(R) if not EXAMPLE else {}
    if workflow.is_main_process and not EXAMPLE:
        # One sweep at a time on a results folder: a kernel-held lock that dies with this
        # process (sweep_lock.py; the profiles turn Snakemake's own lock files off). A dry run
        # only asks whether another run holds it, and writes nothing.
        if DRY_RUN:
            probe(R)
        else:
            hold(R)
except ConfigError as err:
    sys.exit(f"tilesweep: {err}")
except Exception as err:  # a bug: one line, its trace in a file the line names
    sys.exit(f"tilesweep: {unexpected(err)}")

if workflow.is_main_process:
    print(f"tilesweep: {SWEEP.device.summary()}", file=sys.stderr)
    # A line per stage with the time left, in place of Snakemake's block per job (progress.py).
    # The answer card as soon as the verdict step ends, before the check and the report.
    show_progress(
        workflow, when_done={"verdict": lambda: answer_card.early_lines(STAGE5.card)}
    )
if workflow.is_main_process and not EXAMPLE:
    # An output a later step reads, emptied, cut short or deleted since its job wrote it, counts
    # one more rebuild, a param of its job: Snakemake's params trigger reruns it (cells.py). A
    # join made from other contents than its inputs hold now (a failing join's restored tables)
    # is rejoined the same way: its content key decides, not mtimes.
    FOUND = damaged(
        SWEEP.cell_outputs() + STAGE5.checked(), Path(STAGE5.table("launch")).exists()
    )
    if not FOUND:
        JOINS = [
            (STAGE5.provenance[0], sum(SWEEP.table_inputs().values(), [])),
            *STAGE5.joins(),
        ]
        FOUND = [s for s in (stale_join(out, ins) for out, ins in JOINS) if s]
    for line in rebuild_lines(FOUND):
        print(f"tilesweep: {line}", file=sys.stderr)
    mark_rebuilds(R, FOUND, REBUILDS, write=not DRY_RUN)


DEVICE = SWEEP.device.identity()
GPUS = len(SWEEP.device.gpus)
TOOLCHAIN = toolchain_key(SWEEP.device.drivers)
# Snakemake lowers a job's threads to --cores: a rule asking this many gets the whole machine.
ALL_CORES = 4096
# On a GPU machine a CPU-heavy job (the CUTLASS accounting) leaves two cores to the GPU jobs,
# whose priority is the answer, instead of waiting for all of them to end.
BESIDE_GPU_JOBS = max(1, (os.cpu_count() or 2) - 2)
# The settings the power loads read (the rest of the config does not rerun them).
POWER_BENCH_KEYS = ("power_seconds", "power_period_s")
POWER_MODEL_KEYS = ("hidden", "moe_intermediate", "routed_experts")
# The priority of the verdict and of the measurements it reads: the answer card comes before the
# measurements only the check and the report need (the other whole steps, power, the CUTLASS
# accounting).
ANSWER_FIRST = 50
# The decode jobs the verdict reads (the others come after the answer).
ANSWER_DECODE = frozenset(SWEEP.answer_decode_jobs()) if not EXAMPLE else frozenset()
# GPU benchmarks never share a GPU: cap the `gpu` resource at the planned GPUs unless the user
# (or a cluster profile) set it.
if "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", GPUS)


if not EXAMPLE:

    include: "workflow/rules/build.smk"
    include: "workflow/rules/launch.smk"
    include: "workflow/rules/decode.smk"
    include: "workflow/rules/fused_moe.smk"
    include: "workflow/rules/collective.smk"
    include: "workflow/rules/layout.smk"
    include: "workflow/rules/power.smk"
    include: "workflow/rules/tables.smk"


if EXAMPLE:

    include: "workflow/rules/fused_moe_replay.smk"


include: "workflow/rules/verdict.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        STAGE5.outputs() if EXAMPLE else SWEEP.final_outputs(),


onsuccess:
    # The answer card ends the console (answer_card.py): the same card opens both reports.
    print(
        f"tilesweep: the report is {STAGE5.reports / 'report.html'} (report.md beside it)"
    )
    for line in answer_card.console_lines(STAGE5.reports / "answer.json"):
        print(f"tilesweep: {line}")
