"""The files the deployment names (fit_file, attention_table), checked before any job runs."""

from __future__ import annotations

import errno
import json
import math
import stat
from pathlib import Path

import pandas as pd

from tilesweep.errors import ConfigError
from tilesweep.io import PROJECT_ROOT, project_path
from tilesweep.settings import RootSettings


def check_files(settings: RootSettings) -> None:
    """Raise ConfigError for a deployment file missing, not of its kind, or outside the checkout
    and results_dir unless read_outside is true."""
    dep = settings.deployment
    allowed = [PROJECT_ROOT, Path(settings.results_dir).resolve()]
    hints = {
        "fit_file": "a kept GPU run's tables/fit.json",
        "attention_table": "tools/h200_mla_tune.py writes one",
    }
    for key, fault in (("fit_file", _fit_fault), ("attention_table", _attention_fault)):
        value = getattr(dep, key)
        if not value:
            continue
        shown = repr(value) if len(value) <= 120 else repr(value[:117] + "...")
        where = f"deployment.{key}={shown}"
        path = project_path(value)
        kind = _kind_of(path)
        if kind:
            raise ConfigError(f'{where}: {kind} ({hints[key]}; "" for none)')
        inside = any(path.resolve().is_relative_to(a) for a in allowed)
        if not inside and not settings.read_outside:
            raise ConfigError(
                f"{where}: outside the checkout and results_dir; copy it into either, or set "
                "read_outside=true to read it where it is"
            )
        why = fault(path)
        if why:
            raise ConfigError(f"{where}: {why} ({hints[key]})")


def _kind_of(path: Path) -> str | None:
    """Return why a path is no file to read (None for a plain file)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "no such file"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    if not stat.S_ISREG(mode):
        return "not a plain file (a pipe or a device)"
    return None


# What the verdict reads of a shipped fit: a per-kernel cost and the fitted groups.
_FIT_KEYS = {"per_kernel_us": (int, float), "groups": dict, "device": str}
_MAX_FIT_BYTES = 1 << 24


def _fit_fault(path: Path) -> str | None:
    """Return why a file is not a launch-aware fit, or None when it is one."""
    with path.open("rb") as handle:
        data = handle.read(_MAX_FIT_BYTES + 1)
    if len(data) > _MAX_FIT_BYTES:
        return f"over {_MAX_FIT_BYTES:,} bytes: not a fit"
    try:
        fit = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(fit, dict):
        return f"not a fit (a JSON {type(fit).__name__}, not an object)"
    if "gap" in fit and "per_kernel_us" not in fit:
        return f"holds no fit, only why none was made ({str(fit['gap'])[:120]})"
    for key, kind in _FIT_KEYS.items():
        value = fit.get(key)
        if key not in fit or isinstance(value, bool) or not isinstance(value, kind):
            return f"not a fit: no {key} ({_kind_name(kind)})"
    if not math.isfinite(fit["per_kernel_us"]) or fit["per_kernel_us"] < 0:
        return f"per_kernel_us={fit['per_kernel_us']}: not a finite cost"
    if not fit["groups"]:
        return "not a fit: no groups"
    for key, (low, high) in _FIT_NUMBERS.items():
        value = fit.get(key, low)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key}={value!r}: not a number"
        if not math.isfinite(value) or not low <= value <= high:
            return f"{key}={value}: outside {low:g}..{high:g}"
    for name, group in fit["groups"].items():
        why = _group_fault(group)
        if why:
            return f"groups.{name}: {why}"
    return None


# What the composition reads of a fit beside its groups (absent: the first bound, unused): the
# share of launch cost hidden by overlap, the largest efficiency and the light kernels' cost.
_FIT_NUMBERS = {"overlap": (0.0, 0.99), "e_bw_max": (0.01, 2.0), "light_kernel_us": (0.0, 1e6)}
# The part kinds a group may cover (plan.step_parts and the engines' kernel kinds).
_PART_KINDS = (
    "attention",
    "attention_gqa",
    "attention_proj",
    "dense_gemm",
    "embedding",
    "expert_gemm",
    "expert_permute",
    "indexer",
    "lm_head",
    "norm",
    "router",
    "shared_gemm",
    "extra",
)
# What the composition reads of each fitted group: its efficiencies (fractions, at most a little
# over 1 before they are put on a datasheet), its per-kernel cost and launches, and its kinds.
_GROUP_NUMBERS = {
    "e_bw": (0.0, 2.0),
    "e_math": (0.0, 2.0),
    "per_kernel_us": (0.0, 1e6),
    "launches_per_occurrence": (0.0, 1e6),
}


def _group_fault(group: object) -> str | None:
    """Return why one fitted group is not usable, or None."""
    if not isinstance(group, dict):
        return "not a mapping"
    for key, (low, high) in _GROUP_NUMBERS.items():
        value = group.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"no {key} (a number)"
        if not math.isfinite(value) or not low <= value <= high:
            return f"{key}={value}: outside {low:g}..{high:g}"
    kinds = group.get("kinds")
    if not kinds:
        return "no kinds (the part kinds it covers)"
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        return "kinds: not a list of part kinds"
    unknown = [k for k in kinds if k not in _PART_KINDS]
    if unknown:
        return f"kinds: {unknown[0]!r} is not a part kind ({', '.join(_PART_KINDS)})"
    return None


def _kind_name(kind) -> str:
    """Return what a type tuple or type is, in words."""
    return {dict: "a mapping", str: "a string"}.get(kind, "a number")


# What the verdict reads of an attention table (plan/attention_table.py).
_ATTENTION_COLUMNS = ("status", "device", "heads", "sequences", "top", "ms")


def _attention_fault(path: Path) -> str | None:
    """Return why a file is not an attention tune table, or None when it is one."""
    try:
        rows = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        return "not a CSV table"
    missing = [c for c in _ATTENTION_COLUMNS if c not in rows.columns]
    if missing:
        return f"not an attention table: no column {', '.join(missing)}"
    for col in ("heads", "sequences", "top", "ms"):
        if not pd.api.types.is_numeric_dtype(rows[col]):
            return f"not an attention table: column {col} is not numbers"
        ok = rows["status"].astype(str) == "ok"
        bad = rows.loc[ok, col]
        if (~bad.map(lambda v: v == v and abs(v) != float("inf")) | (bad < 0)).any():
            return f"column {col} holds a negative, NaN or infinite value on an ok row"
    return None
