"""The import graph among tilesweep's modules, imports inside functions included, has no cycle;
the core meets the fused-MoE package (src/tilesweep/fused_moe/) only through the backend roles:
it neither imports the package nor names the product's kernel, engines or tuner."""

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
    # deployment_verdict imports tilesweep.io inside verdict_fit only.
    assert "tilesweep.io" in graph["tilesweep.deployment_verdict"]


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
    assert set(CORE_MODULES) <= set(core) and len(core) > 30
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
