"""Random overrides: the validator accepts them or names the problem, never a traceback, and
whatever it accepts expands into a pipeline without error.

CI runs a fixed (derandomized) set of examples so a red build is reproducible; set
TILESWEEP_FUZZ_EXAMPLES=5000 to hunt with fresh random examples.
"""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilesweep.config import CONF_DIR
from tilesweep.errors import ConfigError
from tilesweep.pipeline import Sweep
from tilesweep.settings import leaf_keys

HUNT = int(os.environ.get("TILESWEEP_FUZZ_EXAMPLES", "0"))
KEYS = sorted(k for k in leaf_keys() if k not in ("hardware", "catalog", "question")) + [
    "grid.targets",
    "grid.dtypes",
    "grid.tiles",
    "grid.stages",
    "grid.warps",
    "grid.epilogues",
    "grid.tokens_per_expert",
    "grid.layouts",
    "model.hidden",
    "model.top_k",
    "model.routed_experts",
    "bench.repeats",
    "bench.zipf_alpha",
    "bench.routing",
    "hardware",
    "model",
    "grid",
    "backend.cutlass.stages",
    "backend.cutlass.extra_stages",
    "backend.triton.enabled",
    "results_dir",
    "grid.nonsense",
    "+grid.extra",
    "nosuchgroup",
    "experiment",
    "backend",
    "bench",
]
atoms = st.one_of(
    st.integers(-5, 5000),
    st.sampled_from(
        ["h200", "glm5", "bf16", "fp4", "auto", "true", "false", "null", "tiny", "triton", ""]
    ),
    st.text(alphabet=string.ascii_letters + string.digits + "_-", max_size=6),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)
tile = st.builds(lambda m, n, k: f"{{m:{m},n:{n},k:{k}}}", *[st.integers(-16, 600)] * 3)
layout = st.builds(lambda t, p, e: f"{{tp:{t},pp:{p},ep:{e}}}", *[st.integers(-1, 9)] * 3)
values = st.one_of(
    atoms.map(str),
    st.lists(atoms.map(str), max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.lists(tile, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.lists(layout, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.sampled_from(["[", "]", "{", "=", "[[1]]", "{a:1}", "'quoted'"]),
)
overrides = st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), values), max_size=3)


@pytest.mark.slow  # plans a sweep per random example
@settings(
    max_examples=HUNT or 80,
    derandomize=not HUNT,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(overrides)
def test_random_overrides_are_accepted_or_named(items):
    try:
        sweep = Sweep(items, CONF_DIR)
    except ConfigError as err:
        text = str(err)
        assert text and "\n" not in text
        assert "Traceback" not in text
        return
    grid = sweep.settings.grid
    assert grid.tiles and grid.tokens_per_expert and grid.layouts
    outputs = (
        sweep.final_outputs()
        + sweep.launch_outputs()
        + sweep.decode_outputs()
        + sweep.collective_outputs()
        + sweep.layout_outputs()
    )
    assert outputs and len(outputs) == len(set(outputs))
    for row in sweep.launches.to_dict("records"):
        sweep.launch_cell(row["backend"], row["target"], row["kernel"])
        sweep.build_record(row["backend"], row["target"], row["kernel"])
    for name in sweep.layouts["layout"]:
        sweep.collective_cell(name)
        sweep.layout_step_cell(name)
    for backend, arch in set(zip(sweep.builds["backend"], sweep.builds["arch"], strict=True)):
        sweep.batch_cells(backend, arch)
