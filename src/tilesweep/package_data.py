"""The tables a package ships as data (its data/ folder), each file read once and checked."""

from __future__ import annotations

import functools
import importlib.resources
import re

import yaml

COLUMNS_FILE = "data/columns.yaml"
_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def _flat(items: list) -> list:
    """Return a list with each nested list (a `*alias` of another list) spliced in place."""
    return [x for item in items for x in (item if isinstance(item, list) else [item])]


def parse_columns(text: str, where: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Return a column file's lists by module and name, checked, or raise a one-line ValueError
    that names the file (`where`) and the list."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping of module to lists, got {data!r}")
    out = {}
    for module, lists in data.items():
        if not isinstance(lists, dict) or not lists:
            raise ValueError(f"{where}: {module}: expected a mapping of names to lists")
        out[module] = {}
        for key, items in lists.items():
            at = f"{where}: {module}.{key}"
            if not isinstance(key, str) or not _NAME.fullmatch(key):
                raise ValueError(f"{at}: the name is not an UPPER_CASE Python name")
            if not isinstance(items, list) or not items:
                raise ValueError(f"{at}: expected a non-empty list of column names")
            flat = _flat(items)
            bad = [x for x in flat if not isinstance(x, str) or not x.strip()]
            if bad:
                raise ValueError(f"{at}: {bad[0]!r} is not a column name (quote it)")
            if len(set(flat)) != len(flat):
                twice = sorted({x for x in flat if flat.count(x) > 1})
                raise ValueError(f"{at}: columns named twice: {', '.join(twice)}")
            out[module][key] = tuple(flat)
    return out


@functools.cache
def column_file(package: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Return `package`'s data/columns.yaml, read once and checked (parse_columns)."""
    text = importlib.resources.files(package).joinpath(COLUMNS_FILE).read_text("utf-8")
    return parse_columns(text, f"{package.replace('.', '/')}/{COLUMNS_FILE}")


def column_lists(module: str, package: str = "tilesweep") -> dict[str, list[str]]:
    """Return the column lists `package`'s data/columns.yaml declares for `module`, by name, each
    a fresh list."""
    lists = column_file(package)
    if module not in lists:
        raise ValueError(f"{package.replace('.', '/')}/{COLUMNS_FILE}: no lists for {module}")
    return {key: list(items) for key, items in lists[module].items()}
