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
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{where}: not YAML ({line}{problem})") from None
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


class BrokenPackageData(SystemExit):
    """A data file the package ships, damaged (emptied, not YAML, not text, deleted, a list
    missing): nothing can run, so the process ends with one line naming the file, from any
    entry point (the command, the Snakefile, a job's script, a tool), never a traceback."""

    def __init__(self, why: str):
        super().__init__(
            f"tilesweep: {why}; the installed package is damaged (reinstall it, or "
            "git checkout its data/ folder)"
        )


@functools.cache
def column_file(package: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Return `package`'s data/columns.yaml, read once and checked (parse_columns); a damaged
    one ends the process in one line (BrokenPackageData)."""
    where = f"{package.replace('.', '/')}/{COLUMNS_FILE}"
    try:
        text = importlib.resources.files(package).joinpath(COLUMNS_FILE).read_text("utf-8")
        return parse_columns(text, where)
    except UnicodeDecodeError:
        raise BrokenPackageData(f"{where}: not text (bytes that are not UTF-8)") from None
    except OSError as exc:
        raise BrokenPackageData(f"{where}: unreadable ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise BrokenPackageData(str(exc)) from None


class _Lists(dict):
    """One module's column lists by name: a name the file lacks is one line naming the file."""

    where = ""

    def __missing__(self, key: str):
        raise BrokenPackageData(f"{self.where}: no list {key}")


def column_lists(module: str, package: str = "tilesweep") -> dict[str, list[str]]:
    """Return the column lists `package`'s data/columns.yaml declares for `module`, by name, each
    a fresh list (a name it lacks, or a module with none, ends the process in one line)."""
    lists = column_file(package)
    where = f"{package.replace('.', '/')}/{COLUMNS_FILE}"
    if module not in lists:
        raise BrokenPackageData(f"{where}: no lists for {module}")
    out = _Lists({key: list(items) for key, items in lists[module].items()})
    out.where = f"{where}: {module}"
    return out
