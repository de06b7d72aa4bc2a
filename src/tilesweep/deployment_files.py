"""The files the deployment names (fit_file, attention_table), checked before any job runs."""

import errno
import json
import stat
from pathlib import Path
from typing import Literal, get_args

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tilesweep.errors import ConfigError
from tilesweep.io import PROJECT_ROOT, project_path
from tilesweep.settings import RootSettings
from tilesweep.settings.engine_spec import KernelKind


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


# The part kinds a fitted group may cover: the engines' kernel kinds but `allreduce`.
PartKind = Literal[tuple(k for k in get_args(KernelKind) if k != "allreduce")]
_NUMBERS = ConfigDict(strict=True, allow_inf_nan=False)  # no bool, NaN or inf for a number


class _FitGroup(BaseModel):
    """What the composition reads of each fitted group: its efficiencies (at most a little over 1
    before they are put on a datasheet), its per-kernel cost and launches, and its part kinds."""

    model_config = _NUMBERS
    e_bw: float = Field(ge=0.0, le=2.0)
    e_math: float = Field(ge=0.0, le=2.0)
    per_kernel_us: float = Field(ge=0.0, le=1e6)
    launches_per_occurrence: float = Field(ge=0.0, le=1e6)
    kinds: list[PartKind] = Field(min_length=1)


class _Fit(BaseModel):
    """What the verdict reads of a shipped fit: a per-kernel cost, the fitted groups and, where
    given, the launch cost overlap hides, the largest efficiency and the light kernels' cost."""

    model_config = _NUMBERS
    per_kernel_us: float = Field(ge=0.0)
    groups: dict[str, _FitGroup] = Field(min_length=1)
    device: str
    overlap: float = Field(0.0, ge=0.0, le=0.99)
    e_bw_max: float = Field(0.01, ge=0.01, le=2.0)
    light_kernel_us: float = Field(0.0, ge=0.0, le=1e6)


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
    try:
        _Fit.model_validate(fit)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(k) for k in first["loc"])
        return f"not a fit: {where}: {first['msg']}"
    return None


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
    ok = rows["status"].astype(str) == "ok"
    for col in ("heads", "sequences", "top", "ms"):
        if not pd.api.types.is_numeric_dtype(rows[col]):
            return f"not an attention table: column {col} is not numbers"
        bad = rows.loc[ok, col]
        if (~bad.map(lambda v: v == v and abs(v) != float("inf")) | (bad < 0)).any():
            return f"column {col} holds a negative, NaN or infinite value on an ok row"
    return None
