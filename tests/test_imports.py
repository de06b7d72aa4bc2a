"""The import graph among tilesweep's modules, imports inside functions included, has no cycle;
the core meets the fused-MoE package (src/tilesweep/fused_moe/) only through the backend roles:
it neither imports the package nor names the product's kernel, engines or tuner.

No hidden edges (issue 51): an import of the package's own modules sits at the top of its file,
unless a comment on its line or above its run of imports names the heavy or optional dependency it
defers (triton, matplotlib) or the cycle it breaks; fewer than MAX_DEFERRED such imports remain.

Floors (FLOORS), bottom to top; a module imports only modules on its own floor or below:
  base      errors, columns, io, settings/, provenance, device, cells, ... (no logic
            of the sweep: names, files, typed settings, what the machine is)
  registry  backends (the registry) and backends.roles: every floor asks it by role; its
            discovery imports the backends' modules on import, which is no import statement
  plan      plan/, references, kernels/, cutlass/ (models and kernels, no measurement)
  measure   measure/ (timing, the whole step, power loads)
  backends  backends/* (each backend's module: builds and runners over measure/)
  verdict   config (config_checks, deployment_files), grid, deployment_fit,
            deployment_verdict, deployment_refusals, engine_figures, answer_picks, answer_rests,
            answer_card
  report    report/ (documents, sections, figures)
  stages    stages/ (one module per rule file) and the fused-MoE product, fused_moe/
  top       report_paths, pipeline (rerun_keys, command_config), compare, cli,
            and measure.step.engine_check: a command (`python -m`) that composes a sweep and
            runs a stage, whose file sits in measure/"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tilesweep"
# The product inside the product (issue 39): its kernel, tuner and the engines' kernels.
PRODUCT = "tilesweep.fused_moe"
# The core modules that reach it only through the roles (tuner, step runner, decode runner,
# commands): these modules, and every module of these packages.
CORE_MODULES = ("tilesweep.pipeline", "tilesweep.report_paths", "tilesweep.cli")
CORE_PACKAGES = ("tilesweep.stages", "tilesweep.measure")
# The product's names: its backend, the engines whose kernels it tunes, its tuning rules and
# outputs. The verdict's engine model (conf/engine/, the `engine` config key) names no engine.
PRODUCT_NAMES = re.compile(
    r"fused[_-]moe|vllm|sglang|tune_engine|engine_tune|engine_kernels|project_kernel", re.I
)
# Imports of the package's own modules inside functions: fewer than this, each with its reason.
MAX_DEFERRED = 40
# The floors, bottom to top (the module docstring says what each holds): names relative to
# tilesweep, `x.*` for every module under x; a module's own name beats a `x.*`, a longer `x.*`
# a shorter one.
FLOORS = (
    ("base", "errors columns gpu_archs io sweep_lock progress progress_stage isolate failures "
             "cells settings settings.* provenance device package_data "
             "group_files"),
    ("registry", "backends backends.roles plugin_loader"),
    ("plan", "plan plan.* references kernels kernels.* cutlass cutlass.*"),
    ("measure", "measure measure.*"),
    ("backends", "backends.*"),
    ("verdict", "config config_checks deployment_files grid deployment_fit "
                "deployment_verdict deployment_refusals engine_figures answer_picks answer_rests "
                "answer_card"),
    ("report", "report report.*"),
    ("stages", "stages stages.* fused_moe fused_moe.*"),
    ("top", "report_paths pipeline rerun_keys command_config compare cli "
            "measure.step.engine_check"),
)  # fmt: skip


def _modules() -> dict[str, Path]:
    """Return {dotted module name: file} of every module under src/tilesweep."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Return the tilesweep modules one module imports, anywhere in its body: `from a import b`
    counts b where b is a module, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    """Return {module: the tilesweep modules it imports}."""
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """Return one cycle of the graph as a path that ends where it starts, or [] for none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = _graph()
    assert len(graph) > 100
    assert "tilesweep.io" in graph["tilesweep.deployment_fit"]


def test_no_import_cycle_among_tilesweep_modules():
    cycle = _cycle(_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def _core(names) -> list[str]:
    """Return the core modules among names (CORE_MODULES and the CORE_PACKAGES' modules)."""
    inside = tuple(f"{p}." for p in CORE_PACKAGES)
    return sorted(
        m for m in names if m in CORE_MODULES or m in CORE_PACKAGES or m.startswith(inside)
    )


def _product_names(path: Path) -> list[str]:
    """Return the lines of a module that name the product, as 'line: text'."""
    lines = path.read_text().splitlines()
    return [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if PRODUCT_NAMES.search(line)]


def test_the_core_is_what_the_issue_names_and_the_product_is_a_package():
    modules = _modules()
    core = _core(modules)
    assert set(CORE_MODULES) <= set(core) and len(core) > 20
    assert f"{PRODUCT}.backend" in modules and f"{PRODUCT}.kernel" in modules
    # the name check sees the product where it is
    assert _product_names(modules[f"{PRODUCT}.backend"])


def _in_product(module: str) -> bool:
    """Return whether a module is the fused-MoE package or one of its modules."""
    return module == PRODUCT or module.startswith(f"{PRODUCT}.")


def test_the_core_does_not_import_the_fused_moe_package():
    graph = _graph()
    found = {m: sorted(filter(_in_product, graph[m])) for m in _core(graph)}
    found = {m: i for m, i in found.items() if i}
    assert not found, f"core modules import the fused-MoE package: {found}"


def test_nothing_outside_the_package_imports_it():
    """The registry imports its backend module by discovery (no import statement), and the
    report takes its sections from the tuner role: no module outside imports the package."""
    graph = _graph()
    found = {m: sorted(filter(_in_product, graph[m])) for m in graph if not _in_product(m)}
    found = {m: i for m, i in found.items() if i}
    assert not found, f"modules outside the fused-MoE package import it: {found}"


def test_the_core_names_no_fused_moe_engine_or_tuner():
    modules = _modules()
    found = {m: _product_names(modules[m]) for m in _core(modules)}
    found = {m: lines for m, lines in found.items() if lines}
    assert not found, f"core modules name the fused-MoE product: {found}"


def test_the_package_registers_through_the_roles():
    """The registry finds the package's backend by itself (backends._discover), with the roles
    the core asks for."""
    from tilesweep import backends

    found = [b for b in backends.registered() if type(b).__module__ == f"{PRODUCT}.backend"]
    assert len(found) == 1
    mine = found[0]
    assert mine.tuner and mine.stepper and mine.decoder and mine.commands
    assert backends.rule_tuner("tune_configs") is mine.tuner


def _deferred(path: Path, text: str | None = None) -> list:
    """Return the imports of tilesweep modules inside functions of one module, as (line, the
    import's first line, whether a comment names its reason): a comment on its line, or on the
    line above it or above the run of imports it ends."""
    text = path.read_text() if text is None else text
    lines = text.splitlines()
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    found: dict[int, ast.stmt] = {}
    for fn in ast.walk(ast.parse(text, str(path))):
        for node in ast.walk(fn) if isinstance(fn, funcs) else ():
            if isinstance(node, ast.Import | ast.ImportFrom) and _own(node):
                found[node.lineno] = node
    ends = {
        n.end_lineno: n
        for n in ast.walk(ast.parse(text, str(path)))
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    out = []
    for line in sorted(found):
        above = line - 1
        while above in ends:  # the run of imports this one ends (a deferred torch, say)
            above = ends[above].lineno - 1
        said = "#" in lines[line - 1] or (above >= 1 and lines[above - 1].strip().startswith("#"))
        out.append((line, lines[line - 1].strip(), said))
    return out


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    """Return whether an import statement names one of the package's own modules."""
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] == "tilesweep"
    return any(a.name.split(".")[0] == "tilesweep" for a in node.names)


def _all_deferred() -> dict[str, list]:
    """Return {module: its deferred imports of tilesweep modules} for every module with one."""
    found = {m: _deferred(p) for m, p in _modules().items()}
    return {m: d for m, d in found.items() if d}


def _floor(module: str) -> int:
    """Return the index in FLOORS of a tilesweep module's floor; KeyError for one on none."""
    if module == "tilesweep":
        return 0  # the package's __init__: its version, nothing else
    name = module.removeprefix("tilesweep.")
    exact = [i for i, (_, names) in enumerate(FLOORS) if name in names.split()]
    if exact:
        return exact[0]
    under = [
        (len(p), i)
        for i, (_, names) in enumerate(FLOORS)
        for p in names.split()
        if p.endswith(".*") and name.startswith(p[:-1])
    ]
    if not under:
        raise KeyError(f"{module} is on no floor: add it to FLOORS")
    return max(under)[1]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Return every import of a module on a higher floor, as 'a (floor) -> b (floor)'."""
    out = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if _floor(b) > _floor(a):
                out.append(f"{a} ({FLOORS[_floor(a)][0]}) -> {b} ({FLOORS[_floor(b)][0]})")
    return out


def test_the_deferred_import_finder_sees_imports_and_their_reasons():
    text = (
        "from tilesweep import b\n\n\ndef f():\n    import json\n\n    from tilesweep import b\n"
        "\n\ndef g():\n    # triton: b compiles at import\n    import torch\n"
        "    from tilesweep import b\n    from . import b  # cycle: b imports a\n"
    )
    found = _deferred(Path("a.py"), text)
    assert [(line, said) for line, _, said in found] == [(7, False), (13, True), (14, True)]


def test_the_floors_place_every_module_and_find_an_upward_import():
    graph = _graph()
    assert {_floor(m) for m in graph} == set(range(len(FLOORS)))
    assert _floor("tilesweep.backends") < _floor("tilesweep.measure.timing")
    assert _floor("tilesweep.measure.timing") < _floor("tilesweep.backends.triton_backend")
    assert _floor("tilesweep.measure.step.engine_check") == len(FLOORS) - 1
    toy = {"tilesweep.io": {"tilesweep.cli"}, "tilesweep.cli": {"tilesweep.io"}}
    assert _upward(toy) == ["tilesweep.io (base) -> tilesweep.cli (top)"]


def test_few_imports_of_own_modules_hide_inside_functions():
    found = _all_deferred()
    count = sum(len(d) for d in found.values())
    assert count > 0  # the finder sees the ones that remain
    shown = {m: [line for line, *_ in d] for m, d in found.items()}
    assert count < MAX_DEFERRED, f"{count} imports of tilesweep modules in functions: {shown}"


def test_every_import_inside_a_function_says_why():
    found = {
        m: [f"{line}: {text}" for line, text, said in d if not said]
        for m, d in _all_deferred().items()
    }
    found = {m: d for m, d in found.items() if d}
    assert not found, (
        "imports inside functions without a comment naming the heavy dependency or the cycle: "
        f"{found}"
    )


def test_no_module_imports_one_on_a_higher_floor():
    found = _upward(_graph())
    assert not found, "imports up a floor:\n" + "\n".join(found)
