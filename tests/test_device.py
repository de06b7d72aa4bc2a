"""The `device` setting decides the job set, wherever the Snakefile is read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from conftest import ROOT, snakemake

from tilesweep import device, provenance
from tilesweep.config import compose_settings
from tilesweep.errors import ConfigError
from tilesweep.pipeline import Sweep
from tilesweep.provenance import query_gpus


def _fake_smi(folder, body: str) -> None:
    """Put an nvidia-smi that runs the given shell body first on PATH."""
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def smi_path(tmp_path, monkeypatch):
    """A folder first on PATH for a fake nvidia-smi; the query's cache is cleared around it."""
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    query_gpus.cache_clear()
    yield tmp_path
    query_gpus.cache_clear()


CATALOG = compose_settings([]).catalog


def test_a_named_machine_plans_its_gpus_without_asking():
    planned = device.resolve("h200x8", CATALOG)
    assert planned.gpus == ("NVIDIA H200",) * 8
    assert planned.identity() == "cuda:NVIDIA H200 x8"


def test_cpu_plans_no_gpu_even_where_nvidia_smi_answers(smi_path):
    _fake_smi(smi_path, 'echo "NVIDIA H200, 580.1"')
    assert device.resolve("cpu", CATALOG).gpus == ()
    assert device.resolve("auto", CATALOG).gpus == ("NVIDIA H200",)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("echo 'NVML: driver not loaded' >&2; exit 9", "exit 9"),
        ("sleep 20", "within 1 s"),  # a hang: the query's limit, cut to 1 s here, runs out
    ],
)
def test_a_failed_query_is_an_error_never_a_cpu_plan(smi_path, monkeypatch, body, said):
    monkeypatch.setattr(provenance, "SMI_TIMEOUT_S", 1)
    _fake_smi(smi_path, body)
    with pytest.raises(ConfigError, match=said) as err:
        device.resolve("auto", CATALOG)
    assert "\n" not in str(err.value) and "device=cpu" in str(err.value)


@pytest.mark.parametrize(
    ("value", "said"),
    [("h999x8", "no conf/hardware/h999.yaml"), ("h200x0", "at least 1"), ("gpu", "expected")],
)
def test_a_device_that_names_no_machine_is_refused(value, said):
    with pytest.raises(ConfigError, match=said):
        Sweep([f"device={value}"], ROOT / "conf")


def test_the_named_device_decides_the_job_set():
    tune = "backend.fused_moe.tune=true"
    cpu = Sweep(["experiment=tiny", "device=cpu", tune], ROOT / "conf")
    gpus = Sweep(["experiment=tiny", "device=h200x8", tune], ROOT / "conf")
    assert cpu.tune_dtypes() == [] and gpus.tune_dtypes() != []
    # tuning is opt-in: a first GPU run plans none
    assert Sweep(["experiment=tiny", "device=h200x8"], ROOT / "conf").tune_dtypes() == []
    # one engine-kernel tuning job per engine, on GPU machines only
    assert cpu.tuned_outputs() == []
    engine_outputs = {Path(p).name for p in gpus.tuned_outputs() if "engine_" in p}
    assert engine_outputs == {
        "engine_vllm.csv", "engine_vllm", "engine_sglang.csv", "engine_sglang"
    }  # fmt: skip
    assert len(gpus.layout_outputs()) >= len(cpu.layout_outputs())


@pytest.mark.slow
def test_a_cpu_machine_plans_the_gpu_sweep_it_is_told_to(tmp_path):
    """A login node without GPUs (this machine) plans the GPU jobs when the device names them:
    the SLURM profile's way, here given on the command line."""
    tune = 'overrides=["experiment=tiny","backend.fused_moe.tune=true"]'
    cpu = snakemake(tmp_path, "-n", "--config", "device=cpu", tune)
    h200 = snakemake(tmp_path, "-n", "--config", "device=h200x8", tune)
    assert "tune_configs" not in cpu.stdout and "tune_engine" not in cpu.stdout
    assert "tune_configs" in h200.stdout and "tune_engine" in h200.stdout
    # tuning is opt-in: without it the GPU plan has no tuning job
    plain = snakemake(tmp_path, "-n", "--config", "device=h200x8", 'overrides=["experiment=tiny"]')
    assert "tune_configs" not in plain.stdout and "bench_layout" in plain.stdout
