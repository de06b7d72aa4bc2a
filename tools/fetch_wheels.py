"""Download the pipeline's own wheels for a Python 3.12 x86_64 GPU machine with no registry.

The GPU machine already has torch, triton, numpy, pandas and friends (its own builds must win), so
only what snakemake, hydra-core and nvidia-cutlass need beyond that is fetched, at the versions
installed here. Pure-Python packages are built into wheels here; compiled ones are downloaded
for cp312 manylinux. Usage: python tools/fetch_wheels.py [--list] [DEST]   (default .whl)

The versions are those of the project's environment: run with any python, it re-runs itself in
the project's .venv (`make bootstrap` makes it) when the running one lacks the pipeline's
packages. --list prints the packages it would fetch and fetches nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

ROOTS = ("snakemake", "hydra-core")
# Only the headers of nvidia-cutlass are used: its Python dependencies stay behind.
ALONE = ("nvidia-cutlass",)
# On the GPU machine's image already (see the device notes): never carried.
PRESENT = set(
    [
        "torch",
        "triton",
        "numpy",
        "pandas",
        "pyarrow",
        "matplotlib",
        "pyyaml",
        "jinja2",
        "markupsafe",
        "pygments",
        "psutil",
        "requests",
        "urllib3",
        "idna",
        "certifi",
        "charset-normalizer",
        "packaging",
        "typing-extensions",
        "attrs",
        "wrapt",
        "tabulate",
        "python-dateutil",
        "six",
        "filelock",
        "fsspec",
        "sympy",
        "mpmath",
        "networkx",
        "setuptools",
        "nvidia-ml-py",
        "pip",
        "wheel",
        "contourpy",
        "cycler",
        "fonttools",
        "kiwisolver",
        "pillow",
        "pyparsing",
        "rich",
        "markdown-it-py",
        "mdurl",
    ]
)
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_34_x86_64",
]


def norm(name: str) -> str:
    """Return a package name normalised for comparison."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """Return {name: version} of the roots and everything they require (no extras)."""
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = norm(todo.pop())
        if name in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        seen[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
    return seen


def is_pure(name: str) -> bool:
    """Return whether the installed distribution is pure Python."""
    wheel = distribution(name).read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in wheel


def installed(names: tuple[str, ...]) -> bool:
    """Return whether every named distribution is installed in the running interpreter."""
    try:
        for name in names:
            distribution(name)
    except PackageNotFoundError:
        return False
    return True


def project_python() -> Path:
    """Return the project's environment's interpreter (.venv beside tools/, as make makes it)."""
    return Path(__file__).resolve().parents[1] / os.environ.get("VENV", ".venv") / "bin" / "python"


def main() -> int:
    """Fetch the wheels; return the process exit code."""
    if not installed((*ROOTS, *ALONE)):
        venv = project_python()
        if venv.is_file() and Path(sys.prefix).resolve() != venv.parents[1].resolve():
            return subprocess.run([str(venv), __file__, *sys.argv[1:]]).returncode
        missing = [n for n in (*ROOTS, *ALONE) if not installed((n,))]
        print(
            f"fetch_wheels: {', '.join(missing)} not installed for {sys.executable}, and no "
            f"project environment at {venv}: run `make bootstrap` first (the wheels are fetched "
            "at the versions installed there)",
            file=sys.stderr,
        )
        return 1
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the packages; fetch nothing")
    parser.add_argument("dest", nargs="?", default=".whl", help="folder for the wheels")
    args = parser.parse_args()  # an unknown option is refused here, never taken as DEST
    listing, dest = args.list, Path(args.dest)
    if dest.exists() and not dest.is_dir():
        parser.error(f"DEST {args.dest!r}: not a folder")
    wanted = {n: v for n, v in closure(ROOTS).items() if n not in PRESENT}
    wanted.update({norm(n): distribution(n).version for n in ALONE})
    if listing:
        print("\n".join(f"{n}=={v}" for n, v in sorted(wanted.items())))
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    for name, ver in sorted(wanted.items()):
        spec = f"{name}=={ver}"
        if is_pure(name):
            cmd = [*pip, "wheel", "-q", "--no-deps", "-w", str(dest), spec]
        else:
            plat = [arg for p in PLATFORMS for arg in ("--platform", p)]
            cmd = [
                *pip,
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *plat,
                "-d",
                str(dest),
                spec,
            ]
        subprocess.run(cmd, check=True)
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    print(f"{len(wanted)} packages, {size / 2**20:.1f} MiB in {dest}")
    return 0


if __name__ == "__main__":
    try:  # the project's package: a foreign python lacks it until main re-runs this in .venv
        from tilesweep.errors import tool_main
    except ImportError:
        sys.exit(main())
    sys.exit(tool_main("fetch_wheels", main))
