"""GPU architectures are declared once, as data (conf/architectures.yaml, read by gpu_archs): the
hardware files name them and the backends derive what they build on each from them."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import gpu_archs, grid
from tilesweep.backends import cutlass_backend
from tilesweep.config import compose
from tilesweep.cutlass import cell_spec
from tilesweep.errors import ConfigError
from tilesweep.settings import RootSettings


def _triton_why(settings: dict, arch: str) -> dict[str, str | None]:
    """Return {dtype: why the Triton cells of `arch` are not built, None where they are}."""
    builds = grid.build_cells(RootSettings.model_validate(settings))
    rows = builds[(builds["backend"] == "triton") & (builds["arch"] == arch)]
    why = rows.get("unsupported", pd.Series(index=rows.index, dtype=object))
    return {d: (None if pd.isna(w) else w) for d, w in zip(rows["dtype"], why, strict=True)}


def test_every_hardware_file_names_a_listed_architecture_with_its_cc():
    for name, spec in compose()["catalog"].items():
        assert spec["arch"] in gpu_archs.architectures(), name
        assert gpu_archs.architectures()[spec["arch"]].cc == spec["cc"], name


def test_cutlass_covers_listed_architectures_in_dtypes_their_tensor_cores_run():
    assert tuple(cell_spec.ARCHS) == cutlass_backend.ARCHS
    for arch, spec in cell_spec.ARCHS.items():
        assert set(spec.dtypes) <= set(gpu_archs.architectures()[arch].tensor_dtypes), arch


def test_the_table_decides_what_triton_builds_and_what_it_says():
    settings = compose(["grid.dtypes=[bf16,fp8]"])
    l40s, a100 = settings["catalog"]["l40s"], settings["catalog"]["a100"]
    settings["grid"]["targets"] = ["l40s", "a100"]
    assert _triton_why(settings, "sm_89") == {"bf16": None, "fp8": None}
    why = _triton_why(settings, "sm_80")
    assert why["bf16"] is None
    assert why["fp8"] == "fp8 tensor cores need sm_89 or newer; sm_80 has none"
    assert gpu_archs.first("fp8") == ("sm_89", 89) and (l40s["cc"], a100["cc"]) == (89, 80)


def test_a_new_architecture_in_the_table_reaches_the_backends(monkeypatch):
    """A row added to the table (here one whose tensor cores run bf16 only) is what Triton builds
    from and names; CUTLASS, without the C++ spellings of its builders, says it covers it not."""
    settings = compose(["grid.dtypes=[bf16,fp8]"])
    h200 = settings["catalog"]["h200"]
    settings["catalog"]["next"] = {**h200, "name": "next", "arch": "sm_95", "cc": 95}
    settings["grid"]["targets"] = ["next"]
    # Unlisted, sm_95 runs what the newest listed architecture below it (sm_90) runs.
    assert _triton_why(settings, "sm_95") == {"bf16": None, "fp8": None}
    monkeypatch.setitem(gpu_archs.architectures(), "sm_95", gpu_archs.Architecture(95, ("bf16",)))
    why = _triton_why(settings, "sm_95")
    assert why["bf16"] is None
    assert why["fp8"] == "fp8 tensor cores need sm_89 or newer; sm_95 has none"
    builds = grid.build_cells(RootSettings.model_validate(settings))
    cutlass = builds[builds["backend"] == "cutlass"]
    assert cutlass["unsupported"].str.contains("covers sm_90, sm_100, sm_120; not sm_95").all()


def test_the_first_architecture_of_a_dtype_moves_with_the_table(monkeypatch):
    monkeypatch.setitem(gpu_archs.architectures(), "sm_70", gpu_archs.Architecture(70, ("bf16",)))
    assert gpu_archs.first("bf16") == ("sm_70", 70)
    assert gpu_archs.tensor_dtypes("sm_75", 75) == ("bf16",)  # unlisted: as sm_70


@pytest.mark.parametrize(
    "row",
    [
        "sm_99: {cc: 99}",
        "sm_99: {cc: '9.9', tensor_dtypes: [bf16]}",
        "sm_99: 99",
        "sm_99: {cc: 99, tensor_dtypes: [bf16, fp3]}",
    ],
)
def test_a_bad_row_is_refused_naming_it(tmp_path, row):
    path = tmp_path / "architectures.yaml"
    path.write_text(row + "\n")
    with pytest.raises(ConfigError, match=r"^conf/architectures\.yaml: sm_99: "):
        gpu_archs.load(path)


@pytest.mark.parametrize(
    "text", ["sm_90: [unclosed", "", "- sm_90", "sm_90: {cc: 90, tensor_dtypes: bf16}"]
)
def test_a_broken_table_is_one_line_before_any_job(tmp_path, text):
    path = tmp_path / "architectures.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=r"^conf/architectures\.yaml: ") as err:
        gpu_archs.load(path)
    assert "\n" not in str(err.value)
