"""Each rule's code hash covers what that rule runs: an edit to one backend's module reruns the
jobs that run it, and no others."""

from __future__ import annotations

import shutil

import pytest
from conftest import ROOT

from tilesweep import rerun_keys
from tilesweep.pipeline import Sweep

# The CUTLASS shared-memory accounting: what build_batch runs for the CUTLASS cells.
ACCOUNTING = "cutlass/accounting.py"


def _codes(sweep: Sweep) -> dict[tuple[str, str], str]:
    """Return the code param of every job of the sweep, by (rule, key)."""
    codes = {("decode", job): sweep.rule_code("decode", job) for job in sweep.decode_jobs}
    for rule in ("device", "tune_configs", "collective", "layout", "power", "verdict", "report"):
        codes[(rule, "")] = sweep.rule_code(rule)
    for backend in sorted(set(sweep.builds["backend"])):
        codes[("build", backend)] = sweep.rule_code("build", backend)
        codes[("launch", backend)] = sweep.rule_code("launch", backend)
    return codes


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the package that code hashes read, so that a test can edit it."""
    copy = tmp_path / "tilesweep"
    shutil.copytree(rerun_keys.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(rerun_keys, "PACKAGE_DIR", copy)
    yield copy


def _edit(copy, module: str) -> None:
    path = copy / module
    path.write_text(path.read_text() + "\n# an edit\n")


def test_editing_the_cutlass_accounting_stales_no_measurement(package_copy):
    # Planned for eight H200s: tuning, the CUTLASS SM90 program and every layout are jobs.
    plan = ["device=h200x8", "backend.fused_moe.tune=true"]
    sweep = Sweep(plan, ROOT / "conf")
    assert sweep.tune_dtypes() and any(j.startswith("cutlass") for j in sweep.decode_jobs)
    before = _codes(sweep)
    _edit(package_copy, ACCOUNTING)
    after = _codes(Sweep(plan, ROOT / "conf"))  # a new Snakefile read
    stale = sorted(key for key in before if before[key] != after[key])
    assert ("build", "cutlass") in stale and ("launch", "cutlass") in stale
    measuring = [
        k for k in stale if k[0] in ("decode", "tune_configs", "collective", "layout", "power")
    ]
    assert measuring == [], f"the accounting edit stales {measuring}"
    assert ("build", "triton") not in stale


def test_editing_a_backend_reruns_the_jobs_that_run_it(package_copy):
    plan = ["experiment=tiny", "device=cpu"]
    sweep = Sweep(plan, ROOT / "conf")
    before = _codes(sweep)
    _edit(package_copy, "backends/triton_backend.py")
    after = _codes(Sweep(plan, ROOT / "conf"))
    stale = {key for key in before if before[key] != after[key]}
    triton_jobs = {("decode", j) for j in sweep.decode_jobs if not j.startswith("baselines")}
    assert triton_jobs and triton_jobs <= stale
    assert ("build", "triton") in stale and ("decode", "baselines") not in stale
    assert ("collective", "") not in stale


def test_reading_only_the_import_statements_finds_what_the_whole_module_imports(tmp_path):
    for path in sorted(rerun_keys.PACKAGE_DIR.rglob("*.py")):
        assert rerun_keys._parse_imports(path) == rerun_keys._parse_imports(path, whole=True), path
    # A statement split over lines, one inside a function and a module-level DATA_FILES.
    module = tmp_path / "mod.py"
    module.write_text(
        '"""A docstring."""\nimport os\n'
        "from tilesweep.plan import (\n    topology,\n    step_time,\n)\n\n"
        "def f():\n    from tilesweep import \\\n        grid\n\n"
        'DATA_FILES = (\n    "data/columns.yaml",\n)\n'
    )
    found = rerun_keys._parse_imports(module)
    assert found == rerun_keys._parse_imports(module, whole=True)
    names = {p.relative_to(rerun_keys.PACKAGE_DIR).as_posix() for p in found}
    assert names == {
        "__init__.py",
        "plan/__init__.py",
        "plan/topology.py",
        "plan/step_time.py",
        "grid.py",
        "data/columns.yaml",
    }
