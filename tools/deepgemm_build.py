"""Extract DeepGEMM's sources at the commit vLLM 0.12.0 pins (csrc/ and the deep_gemm package with
its kernel headers) from a git mirror into .engine_kernels/deepgemm-src/ (ignored; carry it to
the GPU machine) with a sha256 manifest, and on the GPU machine build them: the deep_gemm_cpp
extension (csrc/python_api.cpp, as DeepGEMM's setup.py builds it: one C++ unit, linked to
libcuda, cudart, nvrtc and cuBLASLt) with torch's cpp_extension, the package staged beside it
with CUTLASS's cute/ and cutlass/ headers (from the carried nvidia_cutlass wheel: the mirror has
no submodules) under deep_gemm/include, as setup.py copies them. {fmt} comes from torch's own
include folder (torch/include/fmt). DeepGEMM then JIT-compiles each kernel with nvcc at its
first call, into DG_JIT_CACHE_DIR.

Usage (here): python tools/deepgemm_build.py --git-dir DIR [--commit SHA] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fetch_engine_sources  # noqa: E402 - a sibling tool: its manifest check

from tilesweep.errors import tool_main  # noqa: E402

# tools/install_deepgemm.sh DEEPGEMM_GIT_REF in vLLM 0.12.0 (DeepGEMM 2.1.0, 2025-09-29).
COMMIT = "594953acce41793ae00a1233eb516044d604bcb6"
KEEP = ("csrc/", "deep_gemm/", "LICENSE", "setup.py")
SRC = Path(".engine_kernels/deepgemm-src")
WHEEL_GLOB = "nvidia_cutlass-*.whl"
WHEEL_INCLUDE = "cutlass_library/source/include/"
NAME = "deep_gemm_cpp"  # the module name deep_gemm/__init__.py imports


def wanted(path: str) -> bool:
    """Return whether a path of the DeepGEMM tree is one the build or the JIT reads."""
    return path.startswith(KEEP)


def extract(git_dir: Path, commit: str, out: Path) -> dict:
    """Write commit's wanted files and manifest.json into out (replaced whole); return it."""
    blob = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit],
        check=True,
        capture_output=True,
    ).stdout
    files: dict[str, str] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        aside = Path(tmp) / out.name  # built aside, checked, then swapped in whole
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            for member in tar.getmembers():
                if not member.isfile() or not wanted(member.name):
                    continue
                data = tar.extractfile(member).read()
                (aside / member.name).parent.mkdir(parents=True, exist_ok=True)
                (aside / member.name).write_bytes(data)
                files[member.name] = hashlib.sha256(data).hexdigest()
        if "csrc/python_api.cpp" not in files:
            sys.exit(f"deepgemm_build: {commit} has no csrc/python_api.cpp")
        manifest = {
            "library": "deepseek-ai/DeepGEMM",
            "commit": commit,
            "pinned_by": "vllm 0.12.0 tools/install_deepgemm.sh DEEPGEMM_GIT_REF",
            "files": dict(sorted(files.items())),
        }
        (aside / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        fetch_engine_sources.swap_in(aside, out, "deepgemm_build")
    return manifest


def check(folder: Path) -> dict:
    """Return folder's manifest once every file it lists matches its sha256 (else exit)."""
    return fetch_engine_sources.check(folder, writer="tools/deepgemm_build.py")


def stage(src: Path, wheel: Path, root: Path) -> Path:
    """Copy the deep_gemm package to root/deep_gemm, cute/ and cutlass/ headers under include/."""
    package = root / "deep_gemm"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(src / "deep_gemm", package)
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            rel = name.removeprefix(WHEEL_INCLUDE)
            if rel == name or not rel.startswith(("cute/", "cutlass/")) or name.endswith("/"):
                continue
            (package / "include" / rel).parent.mkdir(parents=True, exist_ok=True)
            (package / "include" / rel).write_bytes(whl.read(name))
    return root


def search_dirs(cuda: Path, site: Path) -> tuple[list[Path], list[Path]]:
    """Return the include and library folders to search: the toolkit's, the pip CUDA packages'."""
    nvidia = sorted((site / "nvidia").glob("**/include")) if (site / "nvidia").is_dir() else []
    libs = sorted((site / "nvidia").glob("**/lib")) if (site / "nvidia").is_dir() else []
    target = cuda / "targets" / "x86_64-linux"
    includes = [cuda / "include", *nvidia, target / "include"]
    system = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/lib64"]
    roots = [cuda / "lib64", target / "lib", *libs, *map(Path, system)]
    return includes, [*roots, cuda / "lib64" / "stubs", target / "lib" / "stubs"]


def find(name: str, folders: list[Path]) -> Path | None:
    """Return the first folder's file called name, else the first name.* (a versioned .so)."""
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    for folder in folders:
        found = sorted(folder.glob(name + ".*")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def link_flags(cuda: Path, site: Path) -> tuple[list[str], list[str]]:
    """Return the include folders and linker flags (each library by path, its folder as rpath)."""
    includes, folders = search_dirs(cuda, site)
    heads = {h: find(h, includes) for h in ("cuda.h", "nvrtc.h", "cublasLt.h")}
    missing = [h for h, p in heads.items() if p is None]
    libs = {lib: find(f"lib{lib}.so", folders) for lib in ("cuda", "cudart", "nvrtc", "cublasLt")}
    missing += [f"lib{lib}.so" for lib, p in libs.items() if p is None]
    if missing:
        sys.exit(f"deepgemm_build: not found: {', '.join(missing)} (searched {cuda}, {site})")
    include = sorted({str(p.parent) for p in heads.values()} | {str(cuda / "include" / "cccl")})
    flags = [str(p) for p in libs.values()]
    flags += [f"-Wl,-rpath,{d}" for d in sorted({str(p.parent) for p in libs.values()})]
    return include, flags


# Link variants, tried in turn by the probe (each its own build folder) until one imports: a
# host compiler whose std::filesystem differs from the loaded libstdc++'s (a segfault in
# deep_gemm_cpp.init, where DeepGEMM first walks its include folder) is kept off by linking the
# compiler's own libstdc++fs / libstdc++ into the module, hidden (--exclude-libs), or by building
# with the system's g++ (whose libstdc++ is the one loaded).
VARIANTS = ("plain", "system", "fs", "static")
SYSTEM_CXX = ("/usr/bin/g++", "/usr/bin/gcc")  # the "system" variant's compilers


def variant_flags(variant: str, cxx: str) -> list[str]:
    """Return the extra linker flags of a link variant (fs: the compiler's libstdc++fs.a)."""
    if variant in ("plain", "system"):
        return []
    if variant == "static":
        return ["-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL"]
    found = find("libstdc++fs.a", [Path(cxx).resolve().parents[1] / d for d in ("lib64", "lib")])
    return [str(found) if found else "-lstdc++fs", "-Wl,--exclude-libs,ALL"]


def cuda_shim(cuda: Path, root: Path) -> Path:
    """Return the CUDA home DeepGEMM should see: cuda itself if it has cuobjdump, else a folder
    whose bin/cuobjdump is tools/deepgemm_symbols.py (nvcc then set by DG_JIT_NVCC_COMPILER)."""
    if (cuda / "bin" / "cuobjdump").is_file():
        return cuda
    shim = root / "cuda_shim"
    (shim / "bin").mkdir(parents=True, exist_ok=True)
    tool = Path(__file__).resolve().parent / "deepgemm_symbols.py"
    script = shim / "bin" / "cuobjdump"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tool}" "$@"\n')
    script.chmod(0o755)
    os.environ.setdefault("DG_JIT_NVCC_COMPILER", str(cuda / "bin" / "nvcc"))
    return shim


def build(src: Path, wheel: Path, root: Path, verbose: bool = False, variant: str = "plain"):
    """Build deep_gemm_cpp from src into root (staged once per manifest); return deep_gemm."""
    import torch
    import torch.utils.cpp_extension as ext

    if variant == "system":
        if not Path(SYSTEM_CXX[0]).is_file():
            sys.exit(f"deepgemm_build: no {SYSTEM_CXX[0]}")
        os.environ["CXX"], os.environ["CC"] = SYSTEM_CXX
    manifest = json.dumps(check(src), sort_keys=True)
    staged = root / "deep_gemm" / "manifest.json"
    if not staged.is_file() or staged.read_text() != manifest:  # kept: ninja's header deps
        stage(src, wheel, root)
        staged.write_text(manifest)
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    include, ldflags = link_flags(cuda, Path(torch.__file__).parents[1])
    ldflags += variant_flags(variant, os.environ.get("CXX", "g++"))
    if verbose:
        print(f"deepgemm_build: includes {include}; libraries {ldflags}", flush=True)
    module = ext.load(
        name=NAME,
        sources=[str(src / "csrc" / "python_api.cpp")],
        extra_include_paths=[*include, str(root / "deep_gemm" / "include")],
        extra_cflags=["-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations"],
        extra_ldflags=ldflags,
        build_directory=str(root),
        with_cuda=True,  # .cpp only, but it calls ATen's CUDA API (torch_cuda, c10_cuda, cudart)
        verbose=verbose,
    )
    sys.modules[NAME] = module
    prepend = os.environ.get("NVCC_PREPEND_FLAGS", "")
    if os.environ.get("CC") and "-ccbin" not in prepend:  # the JIT's nvcc: torch's host compiler
        os.environ["NVCC_PREPEND_FLAGS"] = f"-ccbin {os.environ['CC']} {prepend}".strip()
    os.environ["CUDA_HOME"] = str(cuda_shim(cuda, root))  # read by deep_gemm's init only
    sys.path.insert(0, str(root))
    import deep_gemm

    return deep_gemm


def import_check(src: Path, wheel: Path, root: Path, variant: str) -> int:
    """Build one variant and import it (a child process: a segfault ends only it); return 0."""
    deep_gemm = build(src, wheel, root, verbose=True, variant=variant)
    print(f"deepgemm_build: {variant} imports, {deep_gemm.get_num_sms()} SMs", flush=True)
    return 0


def main() -> int:
    """Extract DeepGEMM's sources, or (--import-check) build and import one variant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, help="a DeepGEMM git mirror (extract)")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=SRC)
    parser.add_argument("--import-check", choices=VARIANTS, help="build and import this variant")
    parser.add_argument("--wheel", type=Path, help="nvidia_cutlass wheel (--import-check)")
    parser.add_argument("--build", type=Path, help="build folder (--import-check)")
    args = parser.parse_args()
    if args.import_check:
        return import_check(args.out, args.wheel, args.build, args.import_check)
    if args.git_dir is None:
        sys.exit("deepgemm_build: give --git-dir to extract, or --import-check")
    manifest = extract(args.git_dir, args.commit, args.out)
    print(f"{args.out}: {len(manifest['files'])} files at {manifest['commit']}")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("deepgemm_build", main))
