"""How report cells and phrases are written: numbers, missing values, statuses, devices."""

import math
import numbers

import numpy as np
import pandas as pd

from tilesweep.columns import Status


def fmt_value(v: object, digits: int = 3) -> str:
    """Return a table cell's text: numbers to `digits` significant figures, NaN and None empty."""
    if v is None or isinstance(v, bool | np.bool_):
        return "" if v is None else str(v)
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        v = float(v)
        if math.isnan(v):
            return ""
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:,.0f}" if abs(v) >= 1e3 else f"{v:.{digits}g}"
    return str(v)


def utc_minute(value: object) -> str:
    """Return a timestamp as 'YYYY-MM-DD HH:MM UTC', or '' where it is not one."""
    stamp = pd.to_datetime(value, utc=True, errors="coerce")
    return "" if pd.isna(stamp) else stamp.strftime("%Y-%m-%d %H:%M UTC")


def plural(count: object, word: str, words: str | None = None) -> str:
    """Return '1 token' or '8 tokens' (`words` where the plural is not word + 's')."""
    one = isinstance(count, numbers.Real) and float(count) == 1
    return f"{fmt_value(count)} {word if one else (words or word + 's')}"


def column(frame: pd.DataFrame, name: str, default: object = None) -> pd.Series:
    """Return a column, or a column of `default` when the table lacks it."""
    if name in frame:
        return frame[name]
    return pd.Series(default, index=frame.index, dtype=object)


def status_text(value: object) -> str:
    """Return a recorded status as text, `missing` where none was recorded."""
    return Status.MISSING if value is None or value != value or value == "" else str(value)


def distinct(frames: list[pd.DataFrame], key: str) -> str:
    """Return the distinct values of a column across tables, sorted, comma-separated, or ''."""
    values = {str(v) for frame in frames if key in frame for v in frame[key].dropna()}
    return ", ".join(sorted(values))


def devices(frame: pd.DataFrame) -> str:
    """Return the distinct devices a table's rows were measured on, or 'unknown device'."""
    return distinct([frame], "device") or "unknown device"


def verdict_cell(rec: dict) -> str:
    """Return a compact verdict of one row: 'memory 4.2x', or 'does not fit (26 GB short)'."""
    if rec.get("fits_memory") == "no":
        return f"does not fit ({fmt_value(rec.get('mem_short_gb'))} GB short)"
    margin = rec.get("margin")
    margin = margin if isinstance(margin, str) else ""
    return f"{rec.get('bound', 'bound missing')} {margin}".strip()


def whole(value: object) -> object:
    """Return value as an int when it is a whole number, else unchanged."""
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        return value
    return int(as_float) if as_float.is_integer() else value
