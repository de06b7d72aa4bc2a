"""The C++ unit instantiating CUTLASS's builders for a group of cells, printing one JSON line per
cell; with the device check an uncalled __device__ function instantiates each kernel body."""

from pathlib import Path
from string import Template

from tilesweep.cutlass.cell_spec import ARCHS, DTYPES, EPILOGUES
from tilesweep.cutlass.toolchain import BASE_FLAGS

# The C++ this module reads, relative to the package: rerun_keys.code_hash hashes them with it.
DATA_FILES = (
    "templates/cutlass/prelude.cuh",
    "templates/cutlass/reporter.cuh",
    "templates/cutlass/cell.cuh",
)
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _template(name: str) -> str:
    """Return the text of one of the DATA_FILES, by its file name."""
    (rel,) = [f for f in DATA_FILES if Path(f).name == name]
    return (_PACKAGE_DIR / rel).read_text()


# Each part is set off by a blank line in the TU; the files themselves start at their first line.
PRELUDE = f"\n{_template('prelude.cuh')}\n"
REPORTER = f"\n{_template('reporter.cuh')}"  # host-only: the device pass never sees it
CELL_TEMPLATE = Template(f"\n{_template('cell.cuh')}")


def cell_body(cell: dict, ns: str) -> str:
    """Return the C++ namespace that instantiates one cell's kernel types."""
    spec = ARCHS[cell["arch"]]
    values = {k: cell[k] for k in ("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n")}
    values |= dict(zip(("main_sched", "epi_sched"), spec.schedules[cell["schedule"]], strict=True))
    values |= dict(zip(("elem_ab", "align_ab"), DTYPES[cell["dtype"]], strict=True))
    values |= dict(zip(("elem_c", "elem_d", "align_cd"), EPILOGUES[cell["epilogue"]], strict=True))
    values |= {"arch_tag": spec.tag, "opclass": spec.opclass, "capacity": spec.capacity}
    auto = "StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>"
    count = auto if cell["stages"] == "auto" else f"StageCount<{int(cell['stages'])}>"
    stages = f"cutlass::gemm::collective::{count}"
    return CELL_TEMPLATE.substitute(values, ns=ns, stage_count=stages)


def tu_source(
    arch: str, bodies: list[str], version: str, device_check: bool = True
) -> tuple[str, list[tuple[int, int]]]:
    """Return a TU for the bodies and each body's (first, last) line number in it."""
    # The first line names the module this came from before the split: every cache key hashes
    # it, so it stays as it was.
    head = (
        f"// tilesweep cutlass_smem TU; cutlass {version}; flags: {' '.join(BASE_FLAGS)} "
        f"-gencode={ARCHS[arch].gencode}\n#define TS_DEVICE_CHECK {int(device_check)}\n"
        f"{'' if device_check else '#ifndef __CUDA_ARCH__'}\n{PRELUDE}"
        f"#ifndef __CUDA_ARCH__\n{REPORTER}#endif\n"
    )
    parts, spans = [head], []
    line = head.count("\n") + 1
    for body in bodies:
        n = body.count("\n")
        spans.append((line, line + n))
        parts.append(body)
        line += n
    calls = "".join(f"  c{i}::report({i});\n" for i in range(len(bodies)))
    parts.append(f"\n#ifndef __CUDA_ARCH__\nint main() {{\n{calls}  return 0;\n}}\n#endif\n")
    parts.append("" if device_check else "#endif  // __CUDA_ARCH__\n")
    return "".join(parts), spans
