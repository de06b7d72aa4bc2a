"""Run one risky call (compile, launch, benchmark) in its own process with a time limit."""

import multiprocessing as mp
import traceback
from collections.abc import Callable
from typing import Any


class Isolated(RuntimeError):
    """A call that failed in its child process: `kind` is crash, timeout or error."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _child(conn, fn: Callable, args: tuple, kwargs: dict) -> None:
    """Run fn and send ("ok", result) or ("error", one-line message) back."""
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as exc:  # everything becomes a row upstream
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        conn.send(("error", last.splitlines()[0] if last else type(exc).__name__))
    finally:
        conn.close()


def run_isolated(
    fn: Callable, *args: Any, timeout: float = 600.0, start: str = "spawn", **kwargs: Any
) -> Any:
    """Return fn(*args, **kwargs) computed in a child process, or raise Isolated."""
    ctx = mp.get_context(start)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, kwargs), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            proc.kill()
            proc.join()
            raise Isolated("timeout", f"no result after {timeout:.0f} s; the process was killed")
        try:
            status, payload = parent.recv()
        except EOFError:
            proc.join()
            code = proc.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            raise Isolated("crash", f"process died ({how})") from None
    finally:
        parent.close()
    proc.join()
    if status == "error":
        raise Isolated("error", payload)
    return payload
