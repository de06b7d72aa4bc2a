"""nvcc's log read back: the errors in it, their one-line reasons and the cells they blame."""

from __future__ import annotations

import re
from pathlib import Path

ERROR_RE = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<fatal>catastrophic )?error: (?P<msg>.*)$"
)
ASSERT_RE = re.compile(r'static assertion failed with "(?P<msg>.*)"')


def error_blocks(log: str) -> list[list[str]]:
    """Return the compiler log split into blocks, each starting at an 'error:' line."""
    blocks: list[list[str]] = []
    for line in log.splitlines():
        if ERROR_RE.match(line) or " error: " in line or line.startswith("error:"):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def block_reason(block: list[str]) -> tuple[str, str]:
    """Return (one-line reason, 'file:line') for one error block."""
    m = ERROR_RE.match(block[0])
    if not m:
        return block[0].strip()[:400], ""
    # A catastrophic error (e.g. a missing header) is the environment's, not the cell's: no
    # location, so the row is not cached.
    where = "" if m.group("fatal") else f"{Path(m.group('file')).name}:{m.group('line')}"
    sa = ASSERT_RE.search(m.group("msg"))
    return (sa.group("msg") if sa else m.group("msg").strip())[:400], where


def block_tu_lines(block: list[str], tu_name: str) -> list[int]:
    """Return the line numbers of the TU that an error block points at."""
    lines = []
    for text in block:
        lines += [int(n) for n in re.findall(rf"at line (\d+) of \S*{re.escape(tu_name)}", text)]
        m = ERROR_RE.match(text)
        if m and m.group("file").endswith(tu_name):
            lines.append(int(m.group("line")))
    return lines


def attribute_errors(log: str, tu_name: str, spans: list[tuple[int, int]]) -> dict[int, tuple]:
    """Return {position in group: (reason, where)} for errors that point into a cell's lines."""
    found: dict[int, tuple] = {}
    for block in error_blocks(log):
        for ln in block_tu_lines(block, tu_name):
            pos = next((i for i, (a, b) in enumerate(spans) if a <= ln <= b), None)
            if pos is not None:
                found.setdefault(pos, block_reason(block))
                break
    return found


def first_error(log: str) -> tuple[str, str]:
    """Return the first error block's reason, or the log's last line if none parses."""
    blocks = error_blocks(log)
    if blocks:
        return block_reason(blocks[0])
    tail = [ln for ln in log.strip().splitlines() if ln.strip()]
    return (tail[-1][:400] if tail else "compiler failed without output"), ""


def has_diagnostic(log: str) -> bool:
    """Return whether the log holds at least one located compiler error."""
    return any(ERROR_RE.match(b[0]) for b in error_blocks(log))
