"""Every table's columns, keys and statuses, declared once (long lists in data/columns.yaml), and
the rule for the fastest correct runner."""

from collections.abc import Sequence
from enum import StrEnum

import pandas as pd

from tilesweep import package_data


class Status(StrEnum):
    """What happened to one row: ok, or why it has no number (Kernel Tuner's habit)."""

    OK = "ok"
    COMPILE = "compile"  # the kernel did not compile (or its host program printed nothing)
    LAUNCH = "launch"  # it compiled but does not fit the target, or the device refused it
    RUNTIME = "runtime"  # it launched and then failed, or the measuring process sent nothing
    CRASH = "crash"  # the isolated process died (a signal, an illegal memory access)
    TIMEOUT = "timeout"  # the isolated process ran past its limit and was killed
    ERROR = "error"  # the isolated process raised (the exception's last line is the reason)
    CORRECTNESS = "correctness"  # it ran but its result disagrees with the reference
    CONSTRAINT = "constraint"  # the configuration breaks a rule of the kernel or layout
    UNSUPPORTED = "unsupported"  # this backend or device cannot run the case: a result
    SKIPPED = "skipped"  # left out on purpose (too large for this machine, not asked for)
    MISSING = "missing"  # the file or row recorded no status: a failure, never read as ok


# Statuses that are a property of the kernel or device, not a failure to retry.
SETTLED = frozenset({Status.OK, Status.UNSUPPORTED, Status.SKIPPED})


def status_of(value: object) -> Status:
    """Return the Status a recorded value names; MISSING for None, NaN or empty text."""
    if value is None or (isinstance(value, float) and value != value) or str(value) == "":
        return Status.MISSING
    return Status(str(value))


_LISTS = package_data.column_lists("tilesweep.columns")  # data/columns.yaml

# Columns that identify a row of each aggregated table (results/tables/<name>.csv).
TABLE_KEYS = {
    "launch": ["backend", "target", "kernel"],
    "decode": ["runner", "dtype", "op", "routing", "tokens_per_expert"],
    "collective": ["layout", "collective", "backend", "group", "bytes"],
    "verdict": ["model", "hardware", "layout", "batch"],
    "check": ["layout", "batch", "kernel_list"],
    "engines": ["engine", "version", "model", "hardware", "layout", "batch", "context_len"],
    "power": ["load"],
    "tune": ["dtype", "experts", "n", "m", "routing", "runner", "source", "config", "op"],
}

# ---- provenance: where every row came from (tilesweep.provenance writes these keys) ---------

# A measured row's (provenance.stamp): the device it ran on, the versions that shaped it and the
# commit, in the order the report and `tilesweep compare` list them.
PROVENANCE_KEYS = ("device", "driver", "cuda_runtime", "torch", "triton", "cutlass", "commit")
# A build or launch row's (provenance.build_stamp): compiled on the host, it names its toolchain
# (the versions in one string) and no device that ran it.
TOOLCHAIN_KEY = "toolchain"
BUILD_PROVENANCE_KEYS = ("device", TOOLCHAIN_KEY, "commit")
# Every provenance key a run's tables hold, in the order `tilesweep compare` lists changes.
RUN_PROVENANCE_KEYS = (*PROVENANCE_KEYS[:-1], TOOLCHAIN_KEY, "commit")

# ---- the lists data/columns.yaml holds (its comments say what each is) ----------------------

LAUNCH_COLUMNS = _LISTS["LAUNCH_COLUMNS"]
assert LAUNCH_COLUMNS[-3:] == list(BUILD_PROVENANCE_KEYS), "data/columns.yaml LAUNCH_COLUMNS"
PROVENANCE_COLUMNS = _LISTS["PROVENANCE_COLUMNS"]
VERDICT_COLUMNS = _LISTS["VERDICT_COLUMNS"]
# The split of a step that decides its verdict, in ms, in the order the figures stack it.
SPLIT_COLUMNS = ["memory_ms", "math_ms", "comm_ms", "other_ms", "host_ms"]
STEP_COLUMNS = _LISTS["STEP_COLUMNS"]
CHECK_COLUMNS = _LISTS["CHECK_COLUMNS"]
ENGINE_COLUMNS = _LISTS["ENGINE_COLUMNS"]
# The question's panel: winners per batch (and BAND_COLUMNS, the half/double sensitivity band).
WINNER_COLUMNS = ["batch", "winner", "tokens_per_s", "runner_up", "runner_up_tokens_per_s", "lead"]
BAND_COLUMNS = _LISTS["BAND_COLUMNS"]
TUNE_COLUMNS = _LISTS["TUNE_COLUMNS"]
POWER_COLUMNS = _LISTS["POWER_COLUMNS"]
# tokens_per_s_per_user, which the report shows first, is 1,000 / tpot_ms, added by the report.
REPORT_KEY_VERDICT_COLUMNS = _LISTS["REPORT_KEY_VERDICT_COLUMNS"]
VERDICT_NO_FIT_COLUMNS = _LISTS["VERDICT_NO_FIT_COLUMNS"]
# Per kernel timed in decode, a backend's own (not a library baseline).
LAUNCH_COVERAGE_COLUMNS = _LISTS["LAUNCH_COVERAGE_COLUMNS"]
REPORT_DROPIN_COLUMNS = _LISTS["REPORT_DROPIN_COLUMNS"]

# ---- the tables the reports show (both reports render these lists) ------------------------

REPORT_LAUNCH_COLUMNS = _LISTS["REPORT_LAUNCH_COLUMNS"]
FIT_COUNT_COLUMNS = ["target", "backend", "default", "optin", "no", "unknown"]
LAUNCH_FAILURE_COLUMNS = _LISTS["LAUNCH_FAILURE_COLUMNS"]
ESTIMATE_COLUMNS = _LISTS["ESTIMATE_COLUMNS"]
BEST_PER_BATCH_KEYS = _LISTS["BEST_PER_BATCH_KEYS"]
BEST_PER_BATCH_COLUMNS = _LISTS["BEST_PER_BATCH_COLUMNS"]
DECODE_TARGET_COLUMNS = _LISTS["DECODE_TARGET_COLUMNS"]
NOT_TIMED_COLUMNS = ["runner", "dtype", "status", "reason", "rows"]
COLLECTIVE_REPORT_COLUMNS = _LISTS["COLLECTIVE_REPORT_COLUMNS"]
# A collective row's `timing`: a CUDA graph of `calls_per_replay` calls (NCCL, as engines run
# decode) or eager launches (gloo always); only cuda-graph NCCL rows calibrate the interconnect.
COLLECTIVE_TIMINGS = ("cuda-graph", "eager")
LATENCY_FLOOR_COLUMNS = _LISTS["LATENCY_FLOOR_COLUMNS"]
# The verdict as the reports show it: less the layout's factors and the long provenance.
REPORT_VERDICT_COLUMNS = [
    c
    for c in VERDICT_COLUMNS
    if c not in {"tp", "pp", "ep", "context_len", "inputs_json", *PROVENANCE_COLUMNS}
]
# The columns each wide table exists for, first, so a 1,280 px page shows them unscrolled.
REPORT_CHECK_KEY_COLUMNS = ["layout", "batch", "measured_ms", "composed_ms", "composed_error_pct"]
REPORT_CHECK_COLUMNS = REPORT_CHECK_KEY_COLUMNS + [
    c for c in CHECK_COLUMNS if c not in {"tp", "pp", "ep", "model", *REPORT_CHECK_KEY_COLUMNS}
]
REPORT_ENGINE_KEY_COLUMNS = _LISTS["REPORT_ENGINE_KEY_COLUMNS"]
REPORT_ENGINE_COLUMNS = REPORT_ENGINE_KEY_COLUMNS + [
    c
    for c in ENGINE_COLUMNS
    if c not in {"version", "fits_memory", "context_len", "speculative", "composed_source"}
    and c not in REPORT_ENGINE_KEY_COLUMNS
]
TUNE_SUMMARY_COLUMNS = _LISTS["TUNE_SUMMARY_COLUMNS"]
TUNE_TOP_COLUMNS = _LISTS["TUNE_TOP_COLUMNS"]
TUNE_TARGET_COLUMNS = _LISTS["TUNE_TARGET_COLUMNS"]
REPORT_POWER_COLUMNS = _LISTS["REPORT_POWER_COLUMNS"]


def consistency_columns(reader: str) -> list[str]:
    """Return a power reading's consistency columns, the reading's named after its reader."""
    return ["load", "expected_bound", "band", reader, "consistent"]


# ---- the fastest correct runner -------------------------------------------------------------


def fastest_runner(
    frame: pd.DataFrame, by: Sequence[str] = (), time: str = "time_ms"
) -> pd.DataFrame:
    """Return the fastest correct row per `by` group (ties by runner, then kernel)."""
    by = list(by)
    if frame.empty or time not in frame or "status" not in frame:
        return frame.iloc[0:0].copy() if not frame.empty else pd.DataFrame(columns=[*by, time])
    seconds = pd.to_numeric(frame[time], errors="coerce")
    ok = frame[(frame["status"].astype(str) == Status.OK) & seconds.notna() & (seconds >= 0)]
    ok = ok.assign(**{time: seconds[ok.index].astype(float)})
    names = [c for c in ("runner", "kernel") if c in ok and c not in by]
    ordered = ok.sort_values([time, *names], kind="stable")
    if not by:
        return ordered.head(1).reset_index(drop=True)
    return ordered.groupby(by, sort=False).head(1).sort_values(by).reset_index(drop=True)


# ---- the columns the code reads by name, checked against data/columns.yaml at import --------

# Per list, the columns code reads by name: a rename in the file is refused here, not met far
# away as "unexpected error, KeyError" (issue 50, P06).
_ASKED = {
    "VERDICT_COLUMNS": (
        *TABLE_KEYS["verdict"],
        *SPLIT_COLUMNS,
        "tpot_ms",
        "tp",
        "pp",
        "ep",
        "context_len",
        "inputs_json",
        *PROVENANCE_COLUMNS,
        *(c for c in REPORT_KEY_VERDICT_COLUMNS if c != "tokens_per_s_per_user"),
        *VERDICT_NO_FIT_COLUMNS,
    ),
    "CHECK_COLUMNS": (*TABLE_KEYS["check"], *REPORT_CHECK_KEY_COLUMNS),
    "ENGINE_COLUMNS": (
        *TABLE_KEYS["engines"],
        *REPORT_ENGINE_KEY_COLUMNS,
        "version",
        "fits_memory",
        "speculative",
        "composed_source",
    ),
    "LAUNCH_COLUMNS": (*TABLE_KEYS["launch"], *BUILD_PROVENANCE_KEYS, *LAUNCH_FAILURE_COLUMNS),
    "TUNE_COLUMNS": TABLE_KEYS["tune"],
    "POWER_COLUMNS": (*TABLE_KEYS["power"], *REPORT_POWER_COLUMNS),
}


def missing_asked(lists: dict, asked: dict = _ASKED) -> tuple[str, str] | None:
    """Return the first (list, column) the code reads by name that `lists` lacks, or None."""
    for name, wanted in asked.items():
        have = set(lists[name])
        for column in wanted:
            if column not in have:
                return name, column
    return None


# The process ends in one line if data/columns.yaml lacks a column the code reads by name.
_GAP = missing_asked(_LISTS)
if _GAP is not None:
    raise package_data.BrokenPackageData(
        f"{_LISTS.where}.{_GAP[0]}: no column {_GAP[1]!r}, which the code reads by name "
        "(renamed or removed?)"
    )
