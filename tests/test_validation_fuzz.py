"""Random overrides: the validator accepts them or names the problem, never a traceback."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilesweep.config import compose
from tilesweep.errors import ConfigError

KEYS = [
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
    "backend.triton.enabled",
    "results_dir",
    "grid.nonsense",
    "+grid.extra",
    "nosuchgroup",
]
atoms = st.one_of(
    st.integers(-5, 5000),
    st.sampled_from(["h200", "glm5", "bf16", "fp4", "auto", "true", "null", "tiny", ""]),
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides)
def test_random_overrides_are_accepted_or_named(items):
    try:
        result = compose(items)
    except ConfigError as err:
        text = str(err)
        assert text and "\n" not in text
        assert "Traceback" not in text
    else:
        assert result["grid"]["tiles"]
