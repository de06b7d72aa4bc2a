"""The tables a package ships as data (its data/ folder), each file read once and checked."""

import functools
import importlib.resources
import re

import pydantic
import yaml

COLUMNS_FILE = "data/columns.yaml"
_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def parse_columns(text: str, where: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Return a column file's lists by module and name, or raise a one-line ValueError."""
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
            # each nested list (a `*alias` of another list) spliced in place
            flat = [x for item in items for x in (item if isinstance(item, list) else [item])]
            bad = [x for x in flat if not isinstance(x, str) or not x.strip()]
            if bad:
                raise ValueError(f"{at}: {bad[0]!r} is not a column name (quote it)")
            if len(set(flat)) != len(flat):
                twice = sorted({x for x in flat if flat.count(x) > 1})
                raise ValueError(f"{at}: columns named twice: {', '.join(twice)}")
            out[module][key] = tuple(flat)
    return out


class BrokenPackageData(SystemExit):
    """A damaged shipped data file: the process ends with one line naming it, never a traceback."""

    def __init__(self, why: str):
        super().__init__(
            f"tilesweep: {why}; the installed package is damaged (reinstall it, or "
            "git checkout its data/ folder)"
        )


@functools.cache
def column_file(package: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Return `package`'s data/columns.yaml, read once and checked."""
    where = f"{package.replace('.', '/')}/{COLUMNS_FILE}"
    try:
        return parse_columns(data_file(package, COLUMNS_FILE), where)
    except ValueError as exc:
        raise BrokenPackageData(str(exc)) from None


class _Lists(dict):
    """A data file's entries by name: a name the file lacks is one line naming the file."""

    where = ""
    noun = "list "

    def __missing__(self, key: str):
        raise BrokenPackageData(f"{self.where}: no {self.noun}{key}")


def column_lists(module: str, package: str = "tilesweep") -> dict[str, list[str]]:
    """Return the column lists data/columns.yaml declares for `module`, each a fresh list."""
    lists = column_file(package)
    where = f"{package.replace('.', '/')}/{COLUMNS_FILE}"
    if module not in lists:
        raise BrokenPackageData(f"{where}: no lists for {module}")
    out = _Lists({key: list(items) for key, items in lists[module].items()})
    out.where = f"{where}: {module}"
    return out


def data_file(package: str, name: str) -> str:
    """Return the text of a file in `package`'s folder (BrokenPackageData if damaged)."""
    where = f"{package.replace('.', '/')}/{name}"
    try:
        return importlib.resources.files(package).joinpath(name).read_text("utf-8")
    except UnicodeDecodeError:
        raise BrokenPackageData(f"{where}: not text (bytes that are not UTF-8)") from None
    except OSError as exc:
        raise BrokenPackageData(f"{where}: unreadable ({exc.strerror or exc})") from None


def data_mapping(package: str, name: str) -> dict:
    """Return a YAML mapping `package` ships (data_file), or end the process in one line."""
    where = f"{package.replace('.', '/')}/{name}"
    try:
        data = yaml.safe_load(data_file(package, name))
    except yaml.YAMLError as exc:
        raise BrokenPackageData(f"{where}: not YAML ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not data:
        raise BrokenPackageData(f"{where}: expected a mapping, got {type(data).__name__}")
    out = _Lists(data)
    out.where, out.noun = where, ""
    return out


def data_texts(package: str, name: str, fields: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Return a shipped YAML mapping of names to texts, each entry's `fields` in order, checked."""
    out = {}
    for key, entry in data_mapping(package, name).items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in fields):
            where = f"{package.replace('.', '/')}/{name}: {key}"
            raise BrokenPackageData(f"{where}: expected {', '.join(fields)}, each a text")
        out[str(key)] = tuple(entry[f] for f in fields)
    return out


def data_typed(package: str, name: str, key: str | None, kind):
    """Return entry `key` (None: all) of a shipped YAML mapping, validated as `kind`."""
    data = data_mapping(package, name)
    try:
        return pydantic.TypeAdapter(kind).validate_python(data if key is None else data[key])
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        at = ".".join(str(x) for x in (*([key] if key else []), *err["loc"]))
        where = f"{package.replace('.', '/')}/{name}"
        raise BrokenPackageData(f"{where}: {at}: {err['msg']}") from None
