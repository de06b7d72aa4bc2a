"""A community build's PCIe one-shot all-reduce (deployment.pcie_allreduce): the topology's cited
one_shot figures up to its max_bytes, NCCL above, the norms it fuses left out of the kernel list
where it carries the message, and a cited figure's stated host passed through."""

from __future__ import annotations

import pandas as pd
import pytest

from tilesweep import deployment_verdict
from tilesweep.config import compose_settings
from tilesweep.engine_figures import figure_settings
from tilesweep.errors import ConfigError
from tilesweep.settings.cited_figures import Figure

EMPTY = pd.DataFrame()
# GLM-5 at TP8 on the switch-free host: 12 KB a token, so one token rides the one-shot (72 KB at
# most, conf/hardware/rtx_pro_6000.yaml) and 16 do not.
BASE = (
    "hardware=rtx_pro_6000",
    "engine=vllm",
    "deployment.batches=[1,16]",
    "deployment.context_len=1024",
    "deployment.topology=switch_free",
    "grid.layouts=[{tp:8,pp:1,ep:1}]",
    "references=none",
)


def _rows(mode: str) -> pd.DataFrame:
    settings = compose_settings([*BASE, f"deployment.pcie_allreduce={mode}"])
    table = deployment_verdict.deployment_table(settings, EMPTY, EMPTY, EMPTY, {})
    return table.set_index("batch")


@pytest.fixture(scope="module")
def modes() -> dict[str, pd.DataFrame]:
    return {mode: _rows(mode) for mode in ("off", "one_shot", "one_shot_norm")}


def test_the_one_shot_takes_the_small_messages_only_and_says_so(modes):
    off, shot = modes["off"], modes["one_shot"]
    assert shot.loc[1, "comm_ms"] < 0.6 * off.loc[1, "comm_ms"]
    assert shot.loc[16, "comm_ms"] == pytest.approx(off.loc[16, "comm_ms"])
    assert "one-shot" in shot.loc[1, "collectives"]
    assert "NCCL (the hardware file's figures)" in off.loc[1, "collectives"]


def test_the_fused_norms_leave_the_list_only_where_the_one_shot_carries_the_message(modes):
    shot, fused = modes["one_shot"], modes["one_shot_norm"]
    assert fused.loc[1, "other_ms"] < shot.loc[1, "other_ms"]
    assert fused.loc[16, "other_ms"] == pytest.approx(shot.loc[16, "other_ms"])
    assert fused.loc[1, "comm_ms"] == pytest.approx(shot.loc[1, "comm_ms"])


def test_a_pcie_allreduce_without_pcie_figures_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"pcie_allreduce='one_shot': hardware\[h200\]") as err:
        compose_settings(["hardware=h200", "deployment.pcie_allreduce=one_shot"])
    assert "\n" not in str(err.value)


def test_a_figures_stated_host_composes_it_and_an_unknown_one_is_refused():
    fig = dict(
        engine="vLLM",
        version="x",
        model="glm5",
        hardware="rtx_pro_6000",
        deployment="nvfp4_experts",
        layout={"tp": 8, "pp": 1, "ep": 1},
        batch=1,
        context_len=1024,
        speculative="none",
        tpot_ms=17.0,
        source="s",
        topology="switch_free",
        pcie_allreduce="one_shot_norm",
    )
    figure = Figure.model_validate(fig)
    assert "deployment.topology=switch_free" in figure.overrides()
    assert "deployment.pcie_allreduce=one_shot_norm" in figure.overrides()
    base = compose_settings(["hardware=rtx_pro_6000", "references=none"])
    dep = figure_settings(base, figure).deployment
    assert (dep.topology, dep.pcie_allreduce) == ("switch_free", "one_shot_norm")
    with pytest.raises(ConfigError, match="deployment.topology='attic': not a topology"):
        figure_settings(base, Figure.model_validate(fig | {"topology": "attic"}))
