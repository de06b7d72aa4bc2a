"""One module per pipeline stage: what each Snakemake rule calls through its thin script."""

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from tilesweep.errors import CellError, ConfigError, keep_trace, unexpected


@contextlib.contextmanager
def logged(path: str | None) -> Iterator[logging.Logger]:
    """Yield a logger whose records, and all stdout/stderr, go to the step's log file."""
    logger = logging.getLogger("tilesweep")
    if not path:
        yield logger
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
                yield logger
        finally:
            logger.removeHandler(handler)


@contextlib.contextmanager
def job(smk) -> Iterator[None]:
    """Run a script's call as its job: an error is one line, its trace in the log."""
    trace = str(smk.log[0]) if len(smk.log) else f"{smk.output[0]}.trace.txt"
    try:
        yield
    except (ConfigError, CellError) as err:  # a refusal or a damaged input: its own line
        kept = keep_trace(err, trace)
        where = f"its log: {kept}" if kept else f"its log {trace} could not be written"
        sys.stderr.write(f"tilesweep: {smk.rule}: {err} ({where})\n")
        raise SystemExit(1) from None
    except Exception as err:  # noqa: BLE001 - no traceback reaches a user: one line, trace kept
        sys.stderr.write(f"tilesweep: {smk.rule}: {unexpected(err, trace)}\n")
        raise SystemExit(1) from None


def utc_now() -> str:
    """Return the current time as an ISO-8601 UTC string with microseconds."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


def named_files(named) -> dict[str, list[str]]:
    """Return a Snakemake job's named inputs as lists of paths (a single path as a list of one)."""
    return {
        name: [str(f) for f in files] if isinstance(files, list) else [str(files)]
        for name, files in named.items()
    }
