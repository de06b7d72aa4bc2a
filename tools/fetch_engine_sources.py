"""Extract the CUDA sources of vLLM's Marlin MoE path (w4a16: the moe_wna16_marlin_gemm op, its
weight repack, moe_align_block_size, moe_sum and the swigluoai activation) from a vLLM source
distribution into .engine_kernels/vllm-src-<version>/ (ignored by git; carry it to the GPU
machine), with a manifest of sha256 per file, beside fetch_engine_kernels.py (which keeps the
wheels' Triton kernels). tools/marlin_moe_build.py compiles them; tools/marlin_moe_probe.py
times them. Without --sdist it fetches vllm==VERSION's sdist alone with pip (its metadata step
needs setuptools_scm importable: pip runs it without build isolation, so torch is not fetched).

Usage: python tools/fetch_engine_sources.py [--sdist PATH | --version V] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tilesweep.errors import tool_main
from tilesweep.io import check_out_folder

# What the Marlin MoE build reads, as prefixes of paths inside the sdist (csrc/ only): the
# kernel template and its host code, the Marlin headers (csrc/quantization/marlin/ since 0.15,
# gptq_marlin/ before), the scalar types and registration macros, align/sum and activations.
PREFIXES = (
    "csrc/moe/marlin_moe_wna16/",
    "csrc/quantization/marlin/",
    "csrc/quantization/gptq_marlin/",
    "csrc/core/",
    "csrc/cuda_compat.h",
    "csrc/dispatch_utils.h",
    "csrc/activation_kernels.cu",
    "csrc/moe/moe_align_sum_kernels.cu",
    "csrc/moe/moe_ops.h",
)
SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".py")


def main() -> int:
    """Extract the Marlin MoE sources of one vLLM version; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="a vllm-<version>.tar.gz already here")
    parser.add_argument("--version", default="0.16.0", help="fetched with pip without --sdist")
    parser.add_argument("--out", type=Path, default=Path(".engine_kernels"))
    args = parser.parse_args()
    if args.sdist is not None and not args.sdist.is_file():
        sys.exit(f"fetch_engine_sources: no file {args.sdist}")
    check_out_folder(str(args.out))
    sdist = args.sdist or _fetch(args.version)
    print(f"{sdist}: {extract(sdist, args.out)}")
    return 0


def _fetch(version: str) -> Path:
    """Return vllm==version's sdist, fetched alone into a temporary folder with pip."""
    folder = Path(tempfile.mkdtemp(prefix="vllm-sdist-"))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    subprocess.run(
        [*cmd, "--no-build-isolation", f"vllm=={version}", "-d", str(folder)], check=True
    )
    return next(folder.glob("vllm-*.tar.gz"))


def wanted(member: str) -> str | None:
    """Return a sdist member's path below its top folder if the build reads it, else None."""
    parts = member.split("/", 1)
    if len(parts) < 2 or not parts[1].endswith(SUFFIXES):
        return None
    return parts[1] if parts[1].startswith(PREFIXES) else None


def extract(sdist: Path, out: Path) -> Path:
    """Write the wanted files and manifest.json into out/vllm-src-<version>/; return it."""
    version = sdist.name.removeprefix("vllm-").removesuffix(".tar.gz")
    target = out / f"vllm-src-{version}"
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=out if out.is_dir() else None) as tmp:
        aside = Path(tmp) / target.name  # built aside, checked, then swapped in whole
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                path = wanted(member.name) if member.isfile() else None
                if path is None:
                    continue
                data = tar.extractfile(member).read()
                (aside / path).parent.mkdir(parents=True, exist_ok=True)
                (aside / path).write_bytes(data)
                files[path] = hashlib.sha256(data).hexdigest()
        if "csrc/moe/marlin_moe_wna16/ops.cu" not in files:
            sys.exit(f"fetch_engine_sources: {sdist} has no csrc/moe/marlin_moe_wna16/ops.cu")
        manifest = {
            "engine": "vllm",
            "version": version,
            "sdist": sdist.name,
            "sdist_sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(),
            "files": dict(sorted(files.items())),
        }
        (aside / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        swap_in(aside, target, "fetch_engine_sources")
    return target


def swap_in(aside: Path, target: Path, tool: str) -> None:
    """Put the folder built aside at target whole, replacing only an extraction of ours (one with
    a manifest.json); refuse in one line (exit) a target that is anything else."""
    if target.exists() and not (target / "manifest.json").is_file():
        sys.exit(f"{tool}: {target} exists and holds no manifest.json: not an extraction of ours")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(aside), target)


def check(folder: Path, writer: str = "tools/fetch_engine_sources.py") -> dict:
    """Return folder's manifest once every file it lists matches its sha256 (else exit);
    `writer` names the tool that writes the manifest, for the refusal."""
    path = folder / "manifest.json"
    if not path.is_file():
        sys.exit(f"{folder}: no manifest.json ({writer} writes it)")
    manifest = json.loads(path.read_text())
    for name, digest in manifest["files"].items():
        data = (folder / name).read_bytes() if (folder / name).is_file() else b""
        if hashlib.sha256(data).hexdigest() != digest:
            sys.exit(f"{folder / name}: missing or differs from its manifest; extract it again")
    return manifest


if __name__ == "__main__":
    sys.exit(tool_main("fetch_engine_sources", main))
