"""Stand in for `cuobjdump -symbols FILE` where the toolkit has no cuobjdump (the device image's
CUDA holds nvcc and ptxas only): list a cubin's defined global functions as cuobjdump's lines
(`STT_FUNC STB_GLOBAL STO_ENTRY name`), which DeepGEMM's KernelRuntime reads to find the one
kernel of a JIT-compiled cubin. Reads the ELF64 symbol table itself (no pyelftools).

Usage: python tools/deepgemm_symbols.py -symbols FILE
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # a bare checkout too
from tilesweep.errors import tool_main  # noqa: E402 - after the checkout's src is on the path

SHT_SYMTAB = 2
STT_FUNC = 2
STB_GLOBAL = 1


def functions(data: bytes) -> list[str]:
    """Return the names of an ELF64 file's defined global function symbols."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_SYMTAB:
            continue
        strtab = sections[link]
        for at in range(offset, offset + size, entsize or 24):
            name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF == STT_FUNC and info >> 4 == STB_GLOBAL and shndx != 0:
                start = strtab[4] + name
                names.append(data[start : data.index(b"\0", start)].decode())
    return names


def main() -> int:
    """Print cuobjdump-style symbol lines for the cubin named; return the exit status."""
    if len(sys.argv) != 3 or sys.argv[1] != "-symbols":
        sys.exit(__doc__.splitlines()[-1])
    for name in functions(Path(sys.argv[2]).read_bytes()):
        print(f"STT_FUNC         STB_GLOBAL     STO_ENTRY      {name}")
    return 0


if __name__ == "__main__":
    sys.exit(tool_main("deepgemm_symbols", main))
