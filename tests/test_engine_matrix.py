"""Every GPU kind x engine x model in conf, at TP4 and TP8: the verdict composes it (a finite,
positive TPOT at every batch that fits in memory, a labelled shortfall at one that does not), or
refuses it in one line naming the missing piece; never a traceback, never a silent NaN."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from tilesweep import deployment_refusals, deployment_verdict, gpu_archs
from tilesweep.config import compose_groups, compose_settings, group_file
from tilesweep.plan import engine_profile, row_inputs
from tilesweep.settings import Layout, ModelSettings, RootSettings
from tilesweep.settings.engine_spec import EngineSettings

CONF = Path(__file__).resolve().parents[1] / "conf"
EMPTY = pd.DataFrame()
# One tile that divides every model (the sweep's tiles play no part in the verdict) and one
# batch each side of the MoE layers' turn from launch- to memory-bound.
BASE = (
    "references=none",
    "question=none",
    "grid.tiles=[{m:16,n:16,k:16}]",
    "grid.layouts=[{tp:1,pp:1,ep:1}]",
    "deployment.batches=[1,64]",
)


def _names(group: str) -> list[str]:
    """Return the options of a config group (its files' names)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _deployment(settings: RootSettings, hardware: str) -> str:
    """Return the deployment group the GPU's tensor cores run: nvfp4 weights (the default) where
    it has FP4 tensor cores, else fp8_all, else bf16 (what the refusal of another tells a user)."""
    spec = settings.catalog[hardware]
    runs = gpu_archs.tensor_dtypes(spec.arch, spec.cc)
    return "default" if "nvfp4" in runs else "fp8_all" if "fp8" in runs else "bf16"


@pytest.fixture(scope="module")
def matrix() -> dict[tuple[str, str, str, int], tuple[str, object]]:
    """Return walk()'s matrix, composed once for the module."""
    return walk()


def walk() -> dict[tuple[str, str, str, int], tuple[str, object]]:
    """Return {(hardware, engine, model, tp): ('refused', line) or ('table', verdict rows)}: one
    compose per deployment format, each group's validated spec put in as `figure_settings` puts a
    figure's (test_an_assembled_cell_equals_its_compose checks that this equals a compose)."""
    bases = {
        dep: compose_groups({"deployment": dep}, BASE) for dep in ("default", "fp8_all", "bf16")
    }
    any_base = bases["default"]
    models = {m: type(any_base.model).model_validate(_load("model", m)) for m in _names("model")}
    engines = {
        e: type(any_base.engine).model_validate(_load("engine", e)) for e in _names("engine")
    }
    out = {}
    for hardware in _names("hardware"):
        base = bases[_deployment(any_base, hardware)]
        for engine, engine_spec in engines.items():
            for model, model_spec in models.items():
                for tp in (4, 8):
                    settings = _assemble(
                        base, any_base.catalog[hardware], model_spec, engine_spec, tp
                    )
                    why = deployment_refusals.refusal(settings)
                    key = (hardware, engine, model, tp)
                    if why:
                        out[key] = ("refused", why)
                        continue
                    table = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
                    out[key] = ("table", table)
    return out


def _load(group: str, option: str) -> dict:
    """Return a group file's contents, over the files its defaults list names."""
    return group_file(CONF, group, option)


def _assemble(base: RootSettings, hardware, model, engine, tp: int) -> RootSettings:
    """Return `base` with the hardware, model and engine specs, one TP layout and BASE's batches
    (a deployment group chosen in compose_groups replaces BASE's deployment overrides)."""
    grid = base.grid.model_copy(update={"layouts": [Layout(tp=tp, pp=1, ep=1)]})
    dep = base.deployment.model_copy(update={"batches": [1, 64]})
    return base.model_copy(
        update={
            "hardware": hardware,
            "model": model,
            "engine": engine,
            "grid": grid,
            "deployment": dep,
        }
    )


def test_an_assembled_cell_equals_its_compose():
    base = compose_groups({"deployment": "fp8_all"}, BASE)
    model = type(base.model).model_validate(_load("model", "glm5"))
    engine = type(base.engine).model_validate(_load("engine", "tensorrtllm"))
    cell = _assemble(base, base.catalog["h200"], model, engine, 8)
    own = compose_settings(
        [*BASE, "deployment=fp8_all", "hardware=h200", "model=glm5", "engine=tensorrtllm",
         "grid.layouts=[{tp:8,pp:1,ep:1}]"]
    )  # fmt: skip
    for key in ("deployment", "model", "engine", "hardware"):
        assert cell.as_dict()[key] == own.as_dict()[key], key
    assert cell.grid.layouts == own.grid.layouts


@pytest.mark.slow  # the walk over every GPU, engine and model
def test_every_gpu_engine_and_model_composes_tp4_and_tp8_or_refuses_in_one_line(matrix):
    assert len(matrix) == 2 * len(_names("hardware")) * len(_names("engine")) * len(_names("model"))
    silent = []
    for key, (what, got) in matrix.items():
        if what == "refused":
            # one line, naming the group that lacks the piece and what to add or use
            assert "\n" not in got and got.split(":")[0].split("=")[0] in ("engine", "hardware")
            assert "conf/" in got or "use " in got, (key, got)
            continue
        fits = got["fits_memory"] == "yes"
        done = got["tpot_ms"].map(lambda v: math.isfinite(v) and v > 0)
        # an engine's kernel no figure times (engine.untimed) is a gap its row names
        done |= got["bound"].str.startswith("gap") & row_inputs.column_words(got).str.contains(
            "no kernel-level figure times it"
        )
        if not done[fits].all():
            silent.append((key, got.loc[fits & ~done, ["batch", "bound"]].to_dict("records")))
        # a batch that does not fit is a labelled gap with its shortfall, never a bare NaN
        short = got[~fits]
        assert (short["bound"] == "does-not-fit").all() and (short["mem_short_gb"] > 0).all()
    assert not silent, silent
    # Most of conf composes; the rest says why not. A release's own file (only_arch: the GPUs its
    # figures ran on, one model family) refuses most cells by design and is left out of the share.
    pinned = {e for e in _names("engine") if _load("engine", e).get("only_arch")}
    general = {k: v for k, v in matrix.items() if k[1] not in pinned}
    composed = [
        k for k, (what, got) in general.items() if what == "table" and got["tpot_ms"].notna().any()
    ]
    assert len(composed) > len(general) / 3


@pytest.mark.slow  # the walk over every GPU, engine and model
def test_tensorrtllm_composes_glm5_where_its_dsa_runs_and_refuses_it_elsewhere(matrix):
    for hardware in ("h200", "b200", "rtx_pro_6000"):
        what, table = matrix[(hardware, "tensorrtllm", "glm5", 8)]
        assert what == "table", (hardware, table)
        assert (
            "tensorrtllm" in table["kernel_list"].iloc[0]
            and "mla_dsa_moe" in table["kernel_list"].iloc[0]
        )
    what, line = matrix[("a100", "tensorrtllm", "glm5", 8)]
    assert what == "refused" and "no attention kernel on sm_80" in line
    assert "conf/engine/tensorrtllm.yaml" in line


def test_tensorrtllm_runs_one_dsa_attention_path_per_architecture():
    """sm_90 FlashMLA's sparse kernel, sm_100 the TRTLLM-gen kernel, sm_120 FlashInfer's split
    kernel and its merge (with the norms NCCL's all-reduce leaves unfused); the indexer's four
    kernels on every one of them."""
    engine = EngineSettings.model_validate(_load("engine", "tensorrtllm"))
    model = ModelSettings.model_validate(_load("model", "glm5"))
    extra = {}
    for arch, attention in {"sm_90": 1, "sm_100": 1, "sm_120": 2}.items():
        prof = engine_profile.profile(engine, model, "nvfp4", arch)
        assert prof.launches["attention"] == attention and prof.launches["indexer"] == 4, arch
        extra[arch] = prof.extra["per_layer"]
    assert extra["sm_120"] > extra["sm_100"] < extra["sm_90"]
    assert engine_profile.arch_gap(engine, model, "sm_120") == ""
    assert "sm_90, sm_100, sm_120" in engine_profile.arch_gap(engine, model, "sm_89")
