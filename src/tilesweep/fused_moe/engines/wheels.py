"""The serving engines' fused-MoE Triton kernels taken from their released wheels (paths in
`<engine>.yaml`). `extract` writes <folder>/<engine>-<version>/ (git-ignored): the kernel module's
`@triton.jit` functions verbatim, the shipped config tables, the engine's get_config_file_name
(`names.py`) and a manifest of SHA-256s; `load` returns the kernel from there or from the installed
engine."""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import types
import typing
import zipfile
import zlib
from pathlib import Path

import yaml

from tilesweep.fused_moe.engines.base import data as engine_data
from tilesweep.io import write_text
from tilesweep.package_data import data_typed

FOLDER = ".engine_kernels"  # default, at the checkout's root (ignored by git)
# The headers above the code taken verbatim (kernel, names).
DATA_FILES = ("fused_moe/data/wheel_headers.yaml",)
HEADERS = data_typed("tilesweep", DATA_FILES[0], None, dict[str, str])
HEADER, NAMES_HEADER = HEADERS["kernel"], HEADERS["names"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _functions(source: str, name: str | None = None) -> dict[str, str]:
    """Return {name: source with its decorators} of the top-level function `name`, or (None) of
    every top-level @triton.jit function."""
    lines, out = source.splitlines(keepends=True), {}
    for node in ast.parse(source).body:
        jit = any("jit" in ast.unparse(d) for d in getattr(node, "decorator_list", []))
        if isinstance(node, ast.FunctionDef) and (node.name == name if name else jit):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            out[node.name] = "".join(lines[start : node.end_lineno])
    return out


def _extract_names(engine: str, archive: zipfile.ZipFile, out: Path) -> dict:
    """Write names.py (the engine's file-naming functions, verbatim); return its manifest part."""
    parts, sources = [], {}
    for namer in engine_data(engine).namers:
        module, name = namer.module, namer.function
        text = archive.read(module).decode()
        found = _functions(text, name)
        if not found:
            raise ValueError(f"no function {name}")
        parts.append(f"# {module}\n{found[name]}")
        sources[name] = {"module": module, "module_sha256": _sha256(text.encode())}
    text = NAMES_HEADER + "\n\n".join(parts)
    write_text(out / "names.py", text)
    return {"names": sources, "names_py_sha256": _sha256(text.encode())}


def _copy_tables(archive: zipfile.ZipFile, prefix: str, target: Path, pattern: str) -> dict:
    """Copy the members below prefix whose relative path matches to target; {rel: SHA-256}."""
    tables = {}
    for member in sorted(archive.namelist()):
        rel = member.removeprefix(prefix)
        if rel != member and re.fullmatch(pattern, rel):
            data = archive.read(member)
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(data)
            tables[rel] = _sha256(data)
    return tables


def wheel_version(wheel: Path) -> tuple[str, str]:
    """Return (distribution, version) from a wheel's file name."""
    dist, version = wheel.name.split("-")[:2]
    return dist.lower().replace("_", "-"), version


@contextlib.contextmanager
def _archive(wheel: Path):
    """Open a wheel; one that is not a zip or has an unreadable member is a ValueError naming it."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, EOFError):
        raise ValueError(
            f"{wheel}: not a zip file, so a damaged or cut-short wheel; delete it and fetch again"
        ) from None
    try:
        with archive:
            yield archive
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{wheel}: damaged (a member unreadable: {exc})") from None


def _kernel_text(archive, wheel: Path, module: str, function: str) -> tuple[bytes, list, str]:
    """Return (the module's bytes, its @triton.jit functions, the kernel file's text)."""
    try:
        source = archive.read(module)
    except KeyError:
        raise ValueError(f"{wheel.name}: no {module} in the wheel") from None
    functions = _functions(source.decode())
    if function not in functions:
        raise ValueError(f"{wheel.name}: {module} has no @triton.jit {function}")
    text = HEADER.format(wheel=wheel.name, module=module) + "\n\n" + "\n\n".join(functions.values())
    return source, sorted(functions), text


def _write_manifest(out: Path, wheel: Path, manifest: dict) -> Path:
    """Write out/manifest.json with the wheel's name and SHA-256 first; return out."""
    manifest = {"wheel": wheel.name, "wheel_sha256": _sha256(wheel.read_bytes()), **manifest}
    write_text(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return out


def extract(engine: str, wheel: str | Path, folder: str | Path = FOLDER) -> Path:
    """Extract an engine's kernels from its wheel into folder/<engine>-<version>/; return it."""
    wheel = Path(wheel)
    spec = engine_data(engine)
    module, kernel = spec.kernel.module, spec.kernel.function
    dist, version = wheel_version(wheel)
    if dist != spec.distribution.lower().replace("_", "-"):
        raise ValueError(f"{wheel.name}: a {dist} wheel, not {engine}")
    out = Path(folder) / f"{engine}-{version}"
    with _archive(wheel) as archive:
        source, functions, text = _kernel_text(archive, wheel, module, kernel)
        out.mkdir(parents=True, exist_ok=True)
        try:
            names = _extract_names(engine, archive, out)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{wheel.name}: its config file naming is not found ({exc})") from None
        tables = _copy_tables(archive, spec.tables.folder, out / "configs", r".*E=.*\.json")
    write_text(out / "kernel.py", text)
    manifest = {"engine": engine, "version": version, "module": module, "kernel": kernel}
    manifest |= {"module_sha256": _sha256(source), "functions": functions}
    manifest |= {"kernel_py_sha256": _sha256(text.encode()), **names}
    manifest |= {"tables_prefix": spec.tables.folder, "tables": tables}
    return _write_manifest(out, wheel, manifest)


def load(engine: str, version: str, folder: str | Path = FOLDER):
    """Return (kernel, where) from the extracted folder, else the installed engine; LookupError."""
    spec = engine_data(engine)
    module, name = spec.kernel.module, spec.kernel.function
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
    if importlib.util.find_spec(spec.package) is not None:
        installed = importlib.import_module(spec.package)
        have = getattr(installed, "__version__", "unknown")
        if have == version:
            dotted = module.removesuffix(".py").replace("/", ".")
            return getattr(importlib.import_module(dotted), name), f"installed {engine} {have}"
        raise LookupError(f"{engine} {have} is installed, not {version}; and no {kept}")
    raise LookupError(
        f"no {kept} (tools/fetch_engine_kernels.py makes it) and {engine} is not installed"
    )


def _manifest(engine: str, version: str, folder: str | Path) -> tuple[Path, dict]:
    """Return (folder/<engine>-<version>, its manifest), or raise LookupError."""
    kept = Path(folder) / f"{engine}-{version}"
    if not (kept / "manifest.json").is_file():
        raise LookupError(f"no {kept} (tools/fetch_engine_kernels.py makes it)")
    return kept, json.loads((kept / "manifest.json").read_text())


def config_file_name(
    engine: str,
    version: str,
    experts: int,
    n: int,
    fmt: str,
    device_name: str,
    folder: str | Path = FOLDER,
) -> str:
    """Return the engine's own config file name for (E, N, format) on a device (names.py)."""
    kept, manifest = _manifest(engine, version, folder)
    text = (kept / "names.py").read_bytes()
    if "names_py_sha256" not in manifest or _sha256(text) != manifest["names_py_sha256"]:
        raise LookupError(f"{kept / 'names.py'}: missing or differs from its manifest")
    # the one thing the engines' naming functions ask of the platform: the device's name
    platform = types.SimpleNamespace(get_device_name=lambda device_id=0: device_name)
    space = {**vars(typing), "re": re, "os": os, "functools": functools}
    space.update(cache=functools.cache, lru_cache=functools.lru_cache)
    space.update(current_platform=platform, get_device_name=platform.get_device_name)
    exec(compile(text, str(kept / "names.py"), "exec"), space)  # the engine's own code
    spec = engine_data(engine)
    dtype, block = spec.name_args[fmt]
    block = None if block is None else list(block)
    with _platform_module(platform, spec.platform_module):  # imported by its helper when called
        return space["get_config_file_name"](experts, n, dtype, block)


@contextlib.contextmanager
def _platform_module(platform, dotted: str | None):
    """Let `from <dotted> import current_platform` resolve to `platform` for the duration."""
    if dotted is None:
        yield
        return
    parts = dotted.split(".")
    keys = [".".join(parts[: i + 1]) for i in range(len(parts))]
    saved = {key: sys.modules.get(key) for key in keys}
    for key in keys[:-1]:
        sys.modules[key] = saved[key] or types.ModuleType(key)
    module = types.ModuleType(dotted)
    module.current_platform = platform
    sys.modules[dotted] = module
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value


def shipped_table(
    engine: str, version: str, name: str, triton_version: str, folder: str | Path = FOLDER
) -> tuple[dict | None, str]:
    """Return ({M: config} or None, where) of the table the engine loads today (get_moe_configs)."""
    kept, manifest = _manifest(engine, version, folder)
    tables = manifest.get("tables")
    if tables is None:
        raise LookupError(f"{kept}: no shipped tables extracted; run fetch_engine_kernels again")
    if not engine_data(engine).tables.per_triton:
        candidates = [name]
    else:
        own = f"triton_{triton_version.replace('.', '_')}"
        found = {rel.split("/")[0] for rel in tables if rel.startswith("triton_")}
        newest = sorted(found, key=lambda d: tuple(int(x) for x in d[7:].split("_")), reverse=True)
        others = [d for d in newest if d != own]
        candidates = [f"{d}/{name}" for d in (own, *others)]
    for rel in candidates:
        if rel in tables:
            data = (kept / "configs" / rel).read_bytes()
            if _sha256(data) != tables[rel]:
                raise LookupError(f"{kept / 'configs' / rel}: differs from its manifest")
            configs = json.loads(data)
            configs.pop("triton_version", None)
            where = f"{manifest['tables_prefix']}{rel} (sha256 {tables[rel][:12]})"
            return {int(k): v for k, v in configs.items()}, where
    return None, f"no shipped table {name}: the default rule"


def nearest(table: dict, m: int) -> dict:
    """Return the config at the key nearest M (both engines; the first on a tie)."""
    return table[min(table, key=lambda k: abs(k - m))]


# The devices and (E, N) the vendored name table covers (tests/data/engine_names.json).
NAME_DEVICES = ("NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H100 80GB HBM3")
NAME_SHAPES = ((256, 256), (256, 2048), (128, 768))


def name_table(engine: str, version: str, folder: str | Path = FOLDER) -> dict:
    """Return the engine's config file names of NAME_DEVICES x NAME_SHAPES, with SHA-256s."""
    _, manifest = _manifest(engine, version, folder)
    names = [
        {"experts": e, "n": n, "format": fmt, "device": device}
        | {"name": config_file_name(engine, version, e, n, fmt, device, folder)}
        for device in NAME_DEVICES
        for e, n in NAME_SHAPES
        for fmt in engine_data(engine).name_args
    ]
    head = {"engine": engine, "version": version, "wheel": manifest["wheel"]}
    head |= {"names_py_sha256": manifest["names_py_sha256"], "functions": manifest["names"]}
    return head | {"names": names}


# Older releases' kernels (fused_moe/data/releases.yaml): each part's module's @triton.jit
# functions, verbatim, and the config tables it picks from, hashed in a manifest, as `extract` does
# for the pinned engines' fused-MoE kernels.
RELEASES = Path(__file__).parents[1] / "data" / "releases.yaml"


def releases() -> dict:
    """Return {release name: spec} of releases.yaml (distribution, version, kernels)."""
    return yaml.safe_load(RELEASES.read_text())


def extract_release(name: str, wheel: str | Path, folder: str | Path = FOLDER) -> Path:
    """Extract a release's kernels (releases.yaml) from its wheel into folder/<name>/; return it."""
    wheel, spec = Path(wheel), releases()[name]
    dist, version = wheel_version(wheel)
    if (dist, version) != (spec["distribution"], str(spec["version"])):
        raise ValueError(f"{wheel.name}: not {spec['distribution']} {spec['version']} ({name})")
    out = Path(folder) / name
    kernels = {}
    with _archive(wheel) as archive:
        for part, kernel in spec["kernels"].items():
            where = (kernel["module"], kernel["function"])
            source, functions, text = _kernel_text(archive, wheel, *where)
            (out / "configs" / part).mkdir(parents=True, exist_ok=True)
            write_text(out / f"{part}.py", text)
            tables = {}
            if kernel.get("tables"):  # its own folder's files named as `match` begins
                listed = re.escape(kernel["match"]) + "[^/]*"
                tables = _copy_tables(archive, kernel["tables"], out / "configs" / part, listed)
            kernels[part] = {**kernel, "module_sha256": _sha256(source), "functions": functions}
            kernels[part] |= {"file": f"{part}.py", "file_sha256": _sha256(text.encode())}
            kernels[part]["tables_sha256"] = tables
    return _write_manifest(out, wheel, {"release": name, "kernels": kernels})
