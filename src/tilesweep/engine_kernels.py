"""The serving engines' own fused-MoE Triton kernels, taken from their released wheels.

`extract` reads one module of an engine's wheel (the file that holds its `fused_moe_kernel`)
and writes, into `<folder>/<engine>-<version>/`, every `@triton.jit` function of that module
verbatim (`kernel.py`, which imports only triton) and `manifest.json`: the wheel's name and
SHA-256, the module's path and SHA-256, the functions taken and the SHA-256 of `kernel.py`. The
folder is ignored by git: nothing of the engines' is kept in this repository, and it travels to
a GPU machine with the other wheels. `load` returns the kernel from such a folder (checked
against its manifest), or from the installed engine where it imports.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import sys
import zipfile
from pathlib import Path

from tilesweep.io import atomic_path

# Where each engine keeps its fused-MoE Triton kernel (the module inside its wheel, the kernel's
# name), as of the versions pinned in conf/backends/fused_moe.yaml.
MODULES = {
    "vllm": ("vllm/model_executor/layers/fused_moe/fused_moe.py", "fused_moe_kernel"),
    "sglang": ("sglang/kernels/ops/moe/fused_moe_triton_kernels.py", "fused_moe_kernel"),
}
FOLDER = ".engine_kernels"  # default, at the checkout's root (ignored by git)
HEADER = (
    "# Taken verbatim from {wheel} ({module}) by tilesweep's engine_kernels.extract: every\n"
    "# @triton.jit function of that module, nothing else. Not part of tilesweep.\n"
    "import triton\nimport triton.language as tl\n"
)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_jit(node: ast.AST) -> bool:
    """Return whether a top-level function is decorated with triton.jit (or a jit of it)."""
    return isinstance(node, ast.FunctionDef) and any(
        "jit" in ast.unparse(d) for d in node.decorator_list
    )


def jit_functions(source: str) -> dict[str, str]:
    """Return {name: source with its decorators} of every top-level @triton.jit function."""
    lines = source.splitlines(keepends=True)
    out = {}
    for node in ast.parse(source).body:
        if _is_jit(node):
            start = min(d.lineno for d in node.decorator_list) - 1
            out[node.name] = "".join(lines[start : node.end_lineno])
    return out


def wheel_version(wheel: Path) -> tuple[str, str]:
    """Return (distribution, version) from a wheel's file name."""
    dist, version = wheel.name.split("-")[:2]
    return dist.lower().replace("_", "-"), version


def extract(engine: str, wheel: str | Path, folder: str | Path = FOLDER) -> Path:
    """Extract an engine's Triton kernels from its wheel into folder/<engine>-<version>/;
    return that folder. Raise ValueError when the wheel lacks the module or the kernel."""
    wheel = Path(wheel)
    module, kernel = MODULES[engine]
    dist, version = wheel_version(wheel)
    if dist != engine:
        raise ValueError(f"{wheel.name}: a {dist} wheel, not {engine}")
    with zipfile.ZipFile(wheel) as archive:
        try:
            source_bytes = archive.read(module)
        except KeyError:
            raise ValueError(f"{wheel.name}: no {module} in the wheel") from None
    functions = jit_functions(source_bytes.decode())
    if kernel not in functions:
        raise ValueError(f"{wheel.name}: {module} has no @triton.jit {kernel}")
    text = HEADER.format(wheel=wheel.name, module=module) + "\n\n" + "\n\n".join(functions.values())
    out = Path(folder) / f"{engine}-{version}"
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "kernel.py") as tmp:
        tmp.write_text(text)
    manifest = {
        "engine": engine,
        "version": version,
        "wheel": wheel.name,
        "wheel_sha256": _sha256(wheel.read_bytes()),
        "module": module,
        "module_sha256": _sha256(source_bytes),
        "functions": sorted(functions),
        "kernel": kernel,
        "kernel_py_sha256": _sha256(text.encode()),
    }
    with atomic_path(out / "manifest.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return out


def load(engine: str, version: str, folder: str | Path = FOLDER):
    """Return (kernel, where): the engine's fused-MoE JIT function from folder/<engine>-<version>
    (its kernel.py checked against its manifest), else from the installed engine if it is that
    version. Raise LookupError saying why neither is at hand."""
    module, name = MODULES[engine]
    kept = Path(folder) / f"{engine}-{version}"
    if (kept / "manifest.json").is_file():
        manifest = json.loads((kept / "manifest.json").read_text())
        text = (kept / "kernel.py").read_bytes()
        if _sha256(text) != manifest["kernel_py_sha256"]:
            raise LookupError(f"{kept / 'kernel.py'}: differs from its manifest; extract it again")
        mod_name = f"tilesweep_engine_{engine}_{version.replace('.', '_')}"
        if mod_name not in sys.modules:  # Triton reads a JIT function's source from its file
            spec = importlib.util.spec_from_file_location(mod_name, kept / "kernel.py")
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = loaded
            spec.loader.exec_module(loaded)
        digest = manifest["module_sha256"][:12]
        where = f"{manifest['wheel']} ({manifest['module']}, sha256 {digest})"
        return getattr(sys.modules[mod_name], name), where
    if importlib.util.find_spec(engine) is not None:
        installed = importlib.import_module(engine)
        have = getattr(installed, "__version__", "unknown")
        if have == version:
            dotted = module.removesuffix(".py").replace("/", ".")
            return getattr(importlib.import_module(dotted), name), f"installed {engine} {have}"
        raise LookupError(f"{engine} {have} is installed, not {version}; and no {kept}")
    raise LookupError(
        f"no {kept} (tools/fetch_engine_kernels.py makes it) and {engine} is not installed"
    )
