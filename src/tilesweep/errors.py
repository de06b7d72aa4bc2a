"""Errors a user sees as one line."""


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


def tool_main(name: str, main) -> int:
    """Run a tools/ script's main and return its exit status: a refusal (ConfigError) or a bad
    file or argument (OSError, ValueError, KeyError, LookupError) is one line naming the tool,
    never a traceback (a bad input is the user's to fix; the trace would name our code)."""
    import sys
    import zipfile

    try:
        return int(main() or 0)
    except ConfigError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        return 2
    except (OSError, ValueError, LookupError, RecursionError, zipfile.BadZipFile) as exc:
        sys.stderr.write(f"{name}: {last_line(exc)}\n")
        return 1
