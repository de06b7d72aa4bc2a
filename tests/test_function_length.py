"""No function in src/ over MAX_LINES lines (issue 51): a long one is split into named helpers that
each do one thing. A function's length runs from its `def` line to its last line (decorators
excluded, its docstring and nested functions included); nested functions are held to it too."""

from __future__ import annotations

import ast

from conftest import ROOT

MAX_LINES = 60


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """Return (name, first line, lines) of every function in source longer than limit lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                out.append((node.name, node.lineno, lines))
    return out


def _function(header: str, lines: int, indent: str = "") -> str:
    """Return the source of a function of `lines` lines (its def line included) at indent."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}{header}\n{body}"


def test_the_finder_counts_from_def_to_last_line_and_nested_functions_too():
    inner = _function("def inner():", 61, "    ")
    source = (
        "@decorator\n"  # a decorator's line does not count
        + _function("def fits():", MAX_LINES)
        + _function("def too_long():", MAX_LINES + 1)
        + "class A:\n"
        + _function("async def method(self):", 62, "    ")
        + f"def outer():\n{inner}    return inner\n"
    )
    found = {name: lines for name, _, lines in long_functions(source)}
    assert found == {"too_long": 61, "method": 62, "outer": 63, "inner": 61}


def test_no_function_in_src_is_over_the_limit():
    src = ROOT / "src"
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({lines} lines)"
        for path in sorted(src.rglob("*.py"))
        for name, line, lines in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not long, f"functions over {MAX_LINES} lines (split them into named helpers): {long}"
