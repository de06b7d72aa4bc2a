"""A rule's rerun key: a content hash of the modules it runs and every tilesweep module (and
DATA_FILES) they import, so an edit reruns it and a touch does not."""

import ast
import hashlib
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _module_file(name: str) -> Path | None:
    """Return the file of a tilesweep module or package named like 'tilesweep.measure.gemm_case'."""
    parts = name.split(".")[1:]
    module = [PACKAGE_DIR.joinpath(*parts[:-1], f"{parts[-1]}.py")] if parts else []
    found = [p for p in (*module, PACKAGE_DIR.joinpath(*parts, "__init__.py")) if p.is_file()]
    return found[0] if found else None


def _data_files(tree: ast.Module) -> set[Path]:
    """Return the package files a module lists in a module-level `DATA_FILES = (...)` tuple."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "DATA_FILES" for t in targets):
            return {PACKAGE_DIR / rel for rel in ast.literal_eval(node.value)}
    return set()


# _imports by (file, mtime, size): a Snakefile read hashes a dozen rules' module sets that share
# most of their modules; each file is parsed once per process (an edited file again).
_IMPORTS: dict[tuple, frozenset] = {}


def _imports(path: Path) -> set[Path]:
    """Return the tilesweep module files and data files a module imports, at any depth."""
    if path.suffix != ".py":
        return set()
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = frozenset(_parse_imports(path))
    return set(_IMPORTS[key])


# The statements _parse_imports reads (tilesweep imports, DATA_FILES): as good as parsing the
# whole module (tests/test_rerun_scope.py) and several times faster, for every Snakefile read.
_STATEMENT = re.compile(
    r"^[ \t]*(?:from[ \t]+tilesweep\b|import[ \t]+tilesweep\b|DATA_FILES\b)", re.M
)


def _statements(text: str) -> str:
    """Return the source of each statement _STATEMENT finds, whole and unindented."""
    out = []
    for match in _STATEMENT.finditer(text):
        start = match.start() + len(match.group()) - len(match.group().lstrip())
        end = start
        depth = 0
        while end < len(text):
            char = text[end]
            depth += char in "([{"
            depth -= char in ")]}"
            if char == "\n" and depth <= 0 and text[end - 1] != "\\":
                break
            end += 1
        out.append(text[start:end])
    return "\n".join(out)


def _parse_imports(path: Path, whole: bool = False) -> set[Path]:
    """Return _imports' answer from the module's import and DATA_FILES statements."""
    text = path.read_text()
    try:
        tree = ast.parse(text if whole else _statements(text), str(path))
    except SyntaxError:
        tree = ast.parse(text, str(path))
    found = _data_files(tree)
    # A plugin package finds its modules at run time; a rule names the plugins it runs
    # (Sweep.rule_code), so that no rule depends on every module the package can reach.
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name == "tilesweep" or name.startswith("tilesweep."):
                module = _module_file(name)
                if module is not None:
                    found.add(module)
    return found


def code_hash(*modules: str) -> str:
    """Return a short content hash of modules and every tilesweep module they import."""
    todo = [PACKAGE_DIR / rel for rel in modules]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(_imports(path) - seen)
    digest = hashlib.sha256()
    for path in sorted(seen):
        inside = path.is_relative_to(PACKAGE_DIR)
        digest.update(str(path.relative_to(PACKAGE_DIR) if inside else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
