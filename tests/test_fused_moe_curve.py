"""The Hopper fp8 grouped-GEMM curves are what tools/fused_moe_curve.py derives from the kept probe
rows (docs/evidence/fused_moe_probe_h100.json), so an edit to either shows here."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

from tilesweep.config import compose_settings

ROWS = ROOT / "docs/evidence/fused_moe_probe_h100.json"


def _printed(*args: str) -> list[dict]:
    """Return the points the tool prints for `args`, parsed as the hardware file would."""
    cmd = [sys.executable, str(ROOT / "tools/fused_moe_curve.py"), str(ROWS), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return yaml.safe_load(out.replace("      - ", "- "))


@pytest.mark.parametrize(
    ("hardware", "args"),
    [("h100", ["--config", "H100"]), ("h200", ["--config", "H200", "--carry-to", "4800"])],
)
def test_the_hardware_files_fp8_curve_is_the_probe_rows(hardware, args):
    points = compose_settings([f"hardware={hardware}"]).hardware.grouped_gemm_efficiency["fp8"]
    printed = _printed(*args)
    assert len(printed) == len(points.points) == 7  # 1-64 tokens
    for want, got in zip(printed, points.points, strict=True):
        assert got.tokens_per_expert == pytest.approx(want["tokens_per_expert"])
        assert (got.low, got.high) == (pytest.approx(want["low"]), pytest.approx(want["high"]))
        assert (got.low_expert_mb, got.high_expert_mb) == (
            want["low_expert_mb"],
            want["high_expert_mb"],
        )
        assert ROWS.name in got.cite


def test_the_carried_band_spans_the_time_and_the_fraction_carried():
    """H200's ends: no slower than the H100 ran it (time carried) and the H100's fraction."""
    for pt in _printed("--config", "H200", "--carry-to", "4800"):
        assert pt["low"] < pt["high"]
        assert "time per call carried" in pt["low_kernel"]
        assert "fraction carried" in pt["high_kernel"]


def test_a_file_with_no_rows_for_the_config_is_one_line(tmp_path):
    empty = tmp_path / "rows.json"
    empty.write_text("[]")
    cmd = [sys.executable, str(ROOT / "tools/fused_moe_curve.py"), str(empty), "--config", "H100"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert (
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and "no ok up+down rows" in done.stderr
    )
