"""The extra backend modules TILESWEEP_PLUGINS names: each imported, or the bad entry named in one
line (a user's typo, not a bug: no traceback)."""

import difflib
import importlib
import pkgutil
import re
import reprlib
import sys
import traceback

from tilesweep.errors import ConfigError, keep_trace, last_line

VARIABLE = "TILESWEEP_PLUGINS"
# A module's import name: dotted Python identifiers.
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PluginError(ConfigError):
    """A TILESWEEP_PLUGINS entry that cannot be imported as a plugin module."""


def entries(value: str) -> list[str]:
    """Return the module names a TILESWEEP_PLUGINS value lists."""
    if not value.strip():
        return []
    names = []
    for number, raw in enumerate(value.split(","), start=1):
        entry = raw.strip()
        said = f"{VARIABLE}={reprlib.repr(value)}: entry {number}"
        if not entry:
            raise PluginError(f"{said} is empty; give module names separated by single commas")
        if "/" in entry or "\\" in entry or entry.endswith(".py"):
            raise PluginError(
                f"{said} ({entry!r}) is a path; give the module's import name, its folder on "
                "PYTHONPATH (tests/plugins/planted_faults.py is plugins.planted_faults, with "
                "tests/ on PYTHONPATH)"
            )
        if ":" in entry:
            module = entry.split(":", 1)[0]
            raise PluginError(
                f"{said} ({entry!r}) names an attribute; a plugin is a whole module, imported "
                f"for the backends it registers: give {module!r}"
            )
        if not _MODULE.fullmatch(entry):
            raise PluginError(f"{said} ({entry!r}) is not a module name (dotted identifiers)")
        names.append(entry)
    return names


def load(value: str) -> None:
    """Import every module a TILESWEEP_PLUGINS value lists."""
    for entry in entries(value):
        try:
            importlib.import_module(entry)
        except ModuleNotFoundError as err:
            if err.name and (entry == err.name or entry.startswith(f"{err.name}.")):
                raise PluginError(f"{VARIABLE}: {_missing(entry, err.name)}") from None
            raise PluginError(_failed(entry, err)) from None
        except Exception as err:  # noqa: BLE001 - the plugin's own error: one line, trace kept
            raise PluginError(_failed(entry, err)) from None


def _missing(entry: str, name: str) -> str:
    """Return why `entry` names no module, where its first missing part is `name`."""
    parent, _, leaf = name.rpartition(".")
    if not parent:
        near = difflib.get_close_matches(leaf, [m.name for m in pkgutil.iter_modules()], n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        return (
            f"{entry!r}: no module {leaf!r} on the import path (a module outside the installed "
            f"package needs its folder on PYTHONPATH){hint}"
        )
    module = sys.modules.get(parent)
    if module is None or not hasattr(module, "__path__"):
        what = f" ({leaf!r} is an attribute: give {parent!r})" if hasattr(module, leaf) else ""
        return f"{entry!r}: {parent!r} is a module, not a package: no module {leaf!r} in it{what}"
    if hasattr(module, leaf):
        return (
            f"{entry!r}: {leaf!r} is an attribute of {parent!r}, not a module; a plugin is a "
            f"whole module: give {parent!r} or the module that defines it"
        )
    known = sorted(m.name for m in pkgutil.iter_modules(module.__path__))
    near = difflib.get_close_matches(leaf, known, n=3)
    if near:
        hint = f"; did you mean {', '.join(near)}?"
    else:
        hint = f"; its modules: {', '.join(known)}" if 0 < len(known) <= 12 else ""
    return f"{entry!r}: package {parent!r} has no module {leaf!r}{hint}"


def _failed(entry: str, err: BaseException) -> str:
    """Return the line for a plugin whose own import fails."""
    said = last_line(err)
    if isinstance(err, SyntaxError) and err.filename:
        said, where = f"SyntaxError: {err.msg}", f"{err.filename}, line {err.lineno}"
    else:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if "<frozen" not in f.filename]
        where = f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else "its import"
    kept = keep_trace(err)
    trace = f"; the full trace: {kept}" if kept else ""
    return f"{VARIABLE}: {entry!r} failed to import: {said} ({where}{trace})"
