"""The interconnect model per GPU count (figures never stretched to another count), the one-shot
all-reduce option, the fit on measured collectives, and the hardware files' figures as validated."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest

from tilesweep.config import CONF_DIR, load_catalog, validate
from tilesweep.errors import ConfigError
from tilesweep.plan.interconnect import (
    COLLECTIVES,
    collective_time,
    fit_measured,
    floored_ms,
    topology_numbers,
    wire_factor,
)
from tilesweep.settings import HardwareSpec, check
from tilesweep.settings.hardware_spec import Topology
from tilesweep.settings.root import gpu_counts_as_ints


def collective_ms(*args) -> float:
    """Return the time in ms of one collective (collective_time's time alone)."""
    return collective_time(*args)[0]


PLAIN = {
    "all_reduce": {
        "by_gpus": {
            2: {"latency_us": 6.0, "busbw_gbs": 350},
            8: {"latency_us": 20.0, "busbw_gbs": 370},
        },
        "one_shot": {"enabled": False, "by_gpus": {8: {"latency_us": 8.0, "max_bytes": 32768}}},
    },
    "all_to_all": {"by_gpus": {8: {"latency_us": 20.0, "busbw_gbs": 370}}},
    "send_recv": {"by_gpus": {2: {"latency_us": 4.0, "busbw_gbs": 370}}},
}
NUMBERS = Topology.model_validate(PLAIN)


def test_time_is_the_counts_latency_plus_its_wire_bytes_over_its_bus_bandwidth():
    t = collective_ms("all_reduce", 8, 1 << 20, NUMBERS)
    assert t == pytest.approx(20e-3 + 1.75 * (1 << 20) / 370e9 * 1e3)
    assert collective_ms("all_reduce", 2, 0, NUMBERS) == pytest.approx(6e-3)
    assert collective_ms("send_recv", 2, 0.0, NUMBERS) == pytest.approx(4e-3)
    assert collective_ms("all_reduce", 1, 1 << 20, NUMBERS) == 0.0
    assert wire_factor("all_to_all", 8) == pytest.approx(0.875)
    assert wire_factor("send_recv", 2) == 1.0


@pytest.mark.parametrize(
    ("collective", "n"), [("all_reduce", 4), ("all_to_all", 2), ("send_recv", 8)]
)
def test_a_count_without_figures_is_a_labelled_gap_never_another_counts(collective, n):
    t, reason = collective_time(collective, n, 4096, NUMBERS)
    assert math.isnan(t)
    assert f"for {n} GPUs" in reason and "another count's are not used" in reason
    floored, label = floored_ms(collective, n, 4096, NUMBERS, {collective: {n: 0.01}})
    assert math.isnan(floored) and f"for {n} GPUs" in label and "measured floor alone" in label


def test_no_model_or_no_collective_is_a_gap_with_its_reason():
    assert "no interconnect model" in collective_time("all_reduce", 2, 0, None)[1]
    only = Topology.model_validate({"all_reduce": PLAIN["all_reduce"]})
    t, reason = collective_time("all_to_all", 8, 0, only)
    assert math.isnan(t) and "no all_to_all figures" in reason
    with pytest.raises(ValueError, match="allowed"):
        collective_ms("all_gather", 2, 0, NUMBERS)


def test_keys_that_came_back_from_json_as_strings_still_name_their_count():
    as_json = {"send_recv": {"by_gpus": {"2": {"latency_us": 4.0, "busbw_gbs": 370}}}}
    numbers = Topology.model_validate(gpu_counts_as_ints(as_json))  # as RootSettings.from_json
    assert collective_ms("send_recv", 2, 0, numbers) == pytest.approx(4e-3)


def test_time_grows_with_bytes_at_every_count_with_figures():
    sizes = (0, 1, 1024, 1 << 16, 1 << 20, 1 << 30)
    for collective in COLLECTIVES:
        for n in (2, 4, 8):
            times = [collective_ms(collective, n, b, NUMBERS) for b in sizes]
            assert all(math.isnan(t) for t in times) or times == sorted(times)


def test_one_shot_only_when_enabled_only_up_to_max_bytes_and_only_when_faster():
    plain = copy.deepcopy(PLAIN)
    plain["all_reduce"]["one_shot"]["enabled"] = True
    on = Topology.model_validate(plain)
    t, label = collective_time("all_reduce", 8, 4096, on)
    assert t == pytest.approx(8e-3) and "custom all-reduce" in label
    assert collective_time("all_reduce", 8, 4096, NUMBERS)[1] == "model"  # disabled
    t, label = collective_time("all_reduce", 8, 65536, on)  # over max_bytes: NCCL's figure
    assert label == "model" and t == pytest.approx(collective_ms("all_reduce", 8, 65536, NUMBERS))
    # No one-shot figure for 2 GPUs: NCCL's, never the 8-GPU one-shot.
    assert collective_time("all_reduce", 2, 4096, on)[1] == "model"
    plain["all_reduce"]["one_shot"]["by_gpus"][8]["latency_us"] = 50.0
    slow = Topology.model_validate(plain)
    assert collective_time("all_reduce", 8, 4096, slow)[1] == "model"  # NCCL is faster
    sizes = (0, 1024, 32768, 32769, 1 << 20)
    times = [collective_ms("all_reduce", 8, b, on) for b in sizes]
    assert times == sorted(times)


def test_a_measured_floor_lifts_the_model_and_says_so():
    t, label = floored_ms("send_recv", 2, 0, NUMBERS, {"send_recv": {2: 0.05}})
    assert t == 0.05 and label == "measured floor"
    t, label = floored_ms("send_recv", 2, 0, NUMBERS, {"send_recv": {2: 0.001}})
    assert t == pytest.approx(4e-3) and label == "model"


def _rows(kind, group, backend, timing, sizes, latency_ms, gbs):
    """Return collective-table rows of time = latency + wire * bytes / busbw."""
    wire = wire_factor(kind, group)
    return [
        {
            "collective": kind,
            "group": group,
            "bytes": b,
            "time_ms": latency_ms + wire * b / (gbs * 1e9) * 1e3,
            "status": "ok",
            "backend": backend,
            "timing": timing,
        }
        for b in sizes
    ]


SIZES = [4096, 65536, 1 << 20, 16 << 20, 256 << 20]


def test_the_measured_fit_gives_only_the_group_sizes_measured():
    table = pd.DataFrame(
        _rows("all_reduce", 2, "nccl", "cuda-graph", SIZES, 0.008, 340)
        + _rows("all_to_all", 2, "nccl", "cuda-graph", SIZES, 0.012, 300)
    )
    numbers, floors = fit_measured(table, "nccl")
    assert numbers.model_fields_set == {"all_reduce", "all_to_all"}
    fit = numbers.all_reduce.by_gpus
    assert set(fit) == {2} and numbers.send_recv is None
    assert fit[2].latency_us == pytest.approx(8.0, rel=1e-6)
    assert fit[2].busbw_gbs == pytest.approx(340, rel=1e-6)
    assert floors["all_reduce"] == {2: pytest.approx(0.008 + 4096 / 340e9 * 1e3)}
    # The fit plugs into the model at the count measured and nowhere else.
    assert collective_ms("all_reduce", 2, 1 << 20, numbers) == pytest.approx(
        0.008 + (1 << 20) / 340e9 * 1e3, rel=1e-6
    )
    assert math.isnan(collective_ms("all_reduce", 8, 1 << 20, numbers))


def test_eager_nccl_rows_never_calibrate_and_gloo_rows_fit_as_eager():
    eager = pd.DataFrame(_rows("all_reduce", 2, "nccl", "eager", SIZES, 0.028, 300))
    assert fit_measured(eager, "nccl") == (None, {})
    old = eager.drop(columns="timing")  # tables from before graph timing were eager
    assert fit_measured(old, "nccl") == (None, {})
    mixed = pd.concat(
        [eager, pd.DataFrame(_rows("all_reduce", 2, "nccl", "cuda-graph", SIZES, 0.006, 350))]
    )
    numbers, _ = fit_measured(mixed, "nccl")
    assert numbers.all_reduce.by_gpus[2].latency_us == pytest.approx(6.0, rel=1e-6)
    gloo = pd.DataFrame(_rows("all_reduce", 4, "gloo", "eager", SIZES[:4], 0.2, 2))
    numbers, floors = fit_measured(gloo, "gloo")
    assert set(numbers.all_reduce.by_gpus) == {4}  # gloo's rows are eager: they fit
    assert fit_measured(gloo, "nccl") == (None, {})  # another backend's rows say nothing


def test_a_group_size_with_one_message_size_has_a_floor_but_no_figures():
    one = pd.DataFrame(_rows("send_recv", 2, "nccl", "cuda-graph", [4096], 0.004, 370))
    failed = pd.DataFrame(_rows("send_recv", 2, "nccl", "cuda-graph", [1 << 20], 0.1, 370)).assign(
        status="runtime", time_ms=float("nan")
    )
    numbers, floors = fit_measured(pd.concat([one, failed]), "nccl")
    assert numbers is None and floors == {
        "send_recv": {2: pytest.approx(0.004 + 4096 / 370e9 * 1e3)}
    }
    assert fit_measured(pd.DataFrame(), "nccl") == (None, {})


# ---- the hardware files' figures, as config validation sees them ---------------------------


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(CONF_DIR)


def test_every_hardware_files_interconnect_model_validates_and_names_its_default(catalog):
    for name, spec in catalog.items():
        numbers, label = topology_numbers(check(HardwareSpec, spec, f"hardware[{name}]"))
        if spec.get("interconnect_model") is None:
            assert numbers is None and "no interconnect_model" in label
            continue
        for kind in numbers.model_fields_set:
            by_gpus = getattr(numbers, kind).by_gpus
            assert all(isinstance(n, int) and n >= 2 for n in by_gpus), name


def test_figures_are_per_count_and_cited_in_every_hardware_file(catalog):
    for name in catalog:
        text = (CONF_DIR / "hardware" / f"{name}.yaml").read_text()
        assert "alpha_us" not in text, name
        if "interconnect_model" in text:
            assert "by_gpus" in text and "github.com/" in text, name


def _with_figure(settings, path, value):
    """Return settings whose h200 catalog entry has one interconnect figure replaced."""
    out = copy.deepcopy(settings)
    node = out["catalog"]["h200"]["interconnect_model"]["topologies"]["nvswitch"]
    *head, last = path
    for key in head:
        node = node[key]
    node[last] = value
    return out


@pytest.fixture(scope="module")
def settings():
    from tilesweep.config import compose

    return compose(["hardware=h200"])


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("all_reduce", "by_gpus", 2, "latency_us"),
            -1.0,
            "by_gpus.2.latency_us=-1.0: must be between 0 and",
        ),
        (
            ("all_reduce", "by_gpus", 2, "busbw_gbs"),
            float("nan"),
            "busbw_gbs=nan: must be a finite",
        ),
        (
            ("all_reduce", "by_gpus", 8, "busbw_gbs"),
            float("inf"),
            "busbw_gbs=inf: must be a finite",
        ),
        (("all_reduce", "by_gpus", 8, "busbw_gbs"), 0, "busbw_gbs=0: must be between 0.1 and"),
        (("all_to_all", "by_gpus", 8, "latency_us"), float("inf"), "latency_us=inf: must be"),
        (
            ("all_reduce", "in_graph", "one_shot", "by_gpus", 8, "points"),
            [[32768, float("nan")]],
            "in_graph.one_shot.by_gpus.8.points",
        ),
        (("all_reduce", "by_gpus", 1), {"latency_us": 1, "busbw_gbs": 1}, "a GPU count must be"),
        (("all_reduce", "by_gpus", "8"), {"latency_us": 1, "busbw_gbs": 1}, "'8': a GPU count"),
        (("send_recv", "by_gpus", 4), {"latency_us": 1, "busbw_gbs": 1}, "one hop between 2 GPUs"),
        (("all_gather",), {"by_gpus": {}}, "nvswitch.all_gather: unknown key"),
        (("all_reduce", "by_gpus", 2), {"latency_us": 1}, "missing key 'busbw_gbs'"),
        (("all_reduce", "by_gpus", 2, "alpha_us"), 1.0, "by_gpus.2.alpha_us: unknown key"),
    ],
)
def test_a_bad_figure_is_refused_in_one_line(settings, path, value, message):
    with pytest.raises(ConfigError) as err:
        validate(_with_figure(settings, path, value))
    text = str(err.value)
    assert message in text and "\n" not in text
    assert text.startswith("hardware[h200].interconnect_model.topologies.nvswitch")


def test_the_engines_custom_all_reduce_is_read_by_size_and_taken_where_faster_than_nccl():
    numbers = Topology.model_validate({
        "all_reduce": {
            "by_gpus": {8: {"latency_us": 20.0, "busbw_gbs": 370.0}},
            "one_shot": {
                "enabled": True,
                "by_gpus": {
                    8: {"latency_us": 7.8, "max_bytes": 1 << 20,
                        "points": [[32768, 7.8], [262144, 16.7], [1 << 20, 33.8]]}
                },
            },
        }
    })  # fmt: skip
    small, _ = collective_time("all_reduce", 8, 1024, numbers)
    mid, label = collective_time("all_reduce", 8, (32768 + 262144) / 2, numbers)
    assert small == pytest.approx(7.8e-3) and mid == pytest.approx((7.8 + 16.7) / 2 * 1e-3)
    assert "custom all-reduce" in label
    nccl_at_1mb = 20.0 + 2 * 7 / 8 * (1 << 20) / 370e9 * 1e6
    big, label = collective_time("all_reduce", 8, 1 << 20, numbers)
    assert big == pytest.approx(min(33.8, nccl_at_1mb) * 1e-3) and label == "model"
    past, _ = collective_time("all_reduce", 8, 4 << 20, numbers)  # past max_bytes: NCCL's
    assert past == pytest.approx((20.0 + 2 * 7 / 8 * (4 << 20) / 370e9 * 1e6) * 1e-3)


def _one_shot(spec: dict):
    """Return the one-shot all-reduce figures of a hardware file's default topology, or None."""
    numbers, _ = topology_numbers(HardwareSpec.model_validate(spec))
    return numbers.all_reduce.one_shot if numbers and numbers.all_reduce else None


def test_every_files_custom_all_reduce_is_off_until_the_engine_asks_and_ends_at_max_bytes(catalog):
    for name, spec in catalog.items():
        one_shot = _one_shot(spec)
        if not one_shot:
            continue
        assert one_shot.enabled is False, name  # conf/engine custom_allreduce switches it on
        for n, shot in one_shot.by_gpus.items():
            sizes = [size for size, _ in shot.points]
            assert sizes == sorted(sizes), (name, n)
            assert not sizes or sizes[-1] <= shot.max_bytes, (name, n)


def test_every_files_custom_all_reduce_points_respect_the_link(catalog):
    """A cited one-shot time is physical: it grows with the message, and no point moves the
    message faster than the GPU's link (busbw, 2(n-1)/n x bytes / time, below interconnect_gbs)."""
    for name, spec in catalog.items():
        one_shot = _one_shot(spec)
        if not one_shot or not spec.get("interconnect_gbs"):
            continue
        for n, shot in one_shot.by_gpus.items():
            times = [t for _, t in shot.points]
            assert times == sorted(times), (name, n, times)
            for size, t in shot.points:
                busbw_gbs = 2 * (n - 1) / n * size / (t * 1e-6) / 1e9
                assert busbw_gbs < spec["interconnect_gbs"], (name, n, size, busbw_gbs)


@pytest.mark.parametrize(
    ("hardware", "topology", "edit", "says"),
    [
        (
            "rtx_pro_6000",
            "switch",
            lambda ar: ar["one_shot"]["by_gpus"][8].update(latency_us=1e300),
            "one_shot.by_gpus.8.latency_us=1e+300: must be between",
        ),
        (
            "h200",
            "nvswitch",
            lambda ar: ar["in_graph"]["one_shot"]["by_gpus"][4]["points"][1].__setitem__(1, 1e9),
            "in_graph.one_shot.by_gpus.4.points=",
        ),
    ],
)
def test_an_absurd_one_shot_time_is_refused_like_ncclls(hardware, topology, edit, says):
    """O10 (issue 50, round five): a one-shot time of 1e300 us (or a point at 1e9 us) was
    accepted where an NCCL figure of the same is refused; now both stop at a second."""
    from tilesweep.config import compose

    settings = compose([f"hardware={hardware}", "references=none"])
    edit(settings["hardware"]["interconnect_model"]["topologies"][topology]["all_reduce"])
    with pytest.raises(ConfigError) as caught:
        validate(settings)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_cited_points_give_the_time_inside_their_range_and_busbw_carries_it_past_the_last():
    """A figure with cited [bytes, us] points follows them (linear between two, the first below
    them) and adds the extra bytes at busbw past the last, never the line's own latency."""
    block = copy.deepcopy(PLAIN)
    block["all_reduce"]["by_gpus"][8]["points"] = [[1024, 24.0], [65536, 24.0], [262144, 28.0]]
    numbers = Topology.model_validate(block)
    wire = wire_factor("all_reduce", 8)
    assert collective_ms("all_reduce", 8, 256, numbers) == pytest.approx(24.0e-3)
    assert collective_ms("all_reduce", 8, 163840, numbers) == pytest.approx(26.0e-3)
    past = 28.0e-3 + wire * (1 << 20) / 370e9 * 1e3
    assert collective_ms("all_reduce", 8, 262144 + (1 << 20), numbers) == pytest.approx(past)
    # the line alone (no points) is 20 us + wire bytes / busbw: another time at 160 KB
    assert collective_ms("all_reduce", 8, 163840, NUMBERS) != pytest.approx(26.0e-3)


@pytest.mark.parametrize(
    "points, says",
    [
        ([[2048, 24.0], [1024, 25.0]], "bytes must ascend strictly"),
        ([[1024, 2e6]], "above a second"),
        ([[1024]], "at least 2"),
    ],
)
def test_collective_points_out_of_order_or_absurd_are_refused(points, says):
    """Points whose sizes do not ascend, or a time above a second, are refused by the model."""
    block = copy.deepcopy(PLAIN)
    block["all_reduce"]["by_gpus"][8]["points"] = points
    with pytest.raises(Exception, match=says):
        check(Topology, block)
