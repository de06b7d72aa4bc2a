"""Errors a user sees as one line."""

import re
import sys
import tempfile
import traceback
import zipfile
from pathlib import Path


class ConfigError(ValueError):
    """A config value or override that cannot describe a real sweep."""


class LaunchError(RuntimeError):
    """A kernel launch the device (or the launcher) refused; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def last_line(exc: BaseException) -> str:
    """Return an exception's type and the last line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:400]


class CellError(ValueError):
    """A per-cell output that is not what its job wrote (emptied, cut short, edited)."""


def unexpected(err: BaseException, trace: str | Path | None = None) -> str:
    """Return the one line for an unexpected error, naming where its trace went."""
    where = keep_trace(err, trace)
    where = f"the full trace: {where}" if where else "no trace file could be written"
    return f"unexpected error, {last_line(err)} (a bug, or the installed package changed; {where})"


def keep_trace(err: BaseException, trace: str | Path | None = None) -> str | None:
    """Return where `err`'s full trace was added, None where none was written."""
    text = "".join(traceback.format_exception(err))
    try:
        if trace is None:
            with tempfile.NamedTemporaryFile(
                "w", prefix="tilesweep-trace-", suffix=".txt", delete=False
            ) as handle:
                handle.write(text)
            return handle.name
        Path(trace).parent.mkdir(parents=True, exist_ok=True)
        with open(trace, "a") as handle:
            handle.write(text)
        return str(trace)
    except OSError:
        return None


def tool_main(name: str, main) -> int:
    """Run a tools/ script's main; return its exit status, errors as one line."""
    try:
        return int(main() or 0)
    except ConfigError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        return 2
    except (OSError, ValueError, LookupError, RecursionError, zipfile.BadZipFile) as exc:
        sys.stderr.write(f"{name}: {last_line(exc)}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user: one line, trace kept
        sys.stderr.write(f"{name}: {unexpected(exc)}\n")
        return 1


# Where a YAML parser says its error is.
_YAML_AT = re.compile(r'in "(.+)", line (\d+), column \d+')


def one_line(exc: Exception) -> str:
    """Return the first meaningful line of a Hydra/OmegaConf error."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else type(exc).__name__
    where = next((m for ln in lines if (m := _YAML_AT.match(ln))), None)
    if where:  # a YAML error: the file and line first, then what the parser says
        said = "; ".join(ln for ln in lines if not _YAML_AT.match(ln))
        return f"{where.group(1)}, line {where.group(2)}: not valid YAML ({said})"
    cause = exc.__cause__
    if cause is not None and head.startswith(("Could not override", "Error merging override")):
        # Hydra's head names the override, its cause says why: no such key, a list given a mapping
        said = str(cause).strip().splitlines()
        why = re.sub(r"Key '(.+)' is not in struct", r"no key '\1' there", said[0] if said else "")
        why = why.replace("DictConfig", "a mapping").replace("ListConfig", "a list")
        return f"bad config: {head.rstrip('.')} ({why or type(cause).__name__})"
    if "Could not find" in head or "not found in" in head:
        # Hydra lists the valid options on the next lines: keep them on one line.
        opts = [
            ln.lstrip("\t ")
            for ln in lines[1:]
            if not ln.startswith(("Config search path", "provider="))
        ]
        if opts:
            head = f"{head} {' '.join(opts)}"
    return f"bad config: {head}"
