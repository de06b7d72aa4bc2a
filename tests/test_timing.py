"""The one percentile rule (measure.timing.percentile) and the summaries built on it."""

from __future__ import annotations

import math

from tilesweep.measure import power_load, timing, whole_step


def test_percentile_is_the_nearest_rank_of_the_sorted_values():
    values = [float(v) for v in (7, 1, 9, 3, 5, 2, 8, 4, 6, 10, 11)]  # 1..11, unsorted
    assert timing.percentile(values, 0.1) == 2.0  # index round(0.1 x 10) = 1
    assert timing.percentile(values, 0.5) == 6.0
    assert timing.percentile(values, 0.9) == 10.0
    assert timing.percentile(values, 0.0) == 1.0 and timing.percentile(values, 1.0) == 11.0
    # Python's rounding: index 0.5 x 3 = 1.5 rounds to 2, so p50 of four values is the third.
    assert timing.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 3.0
    assert timing.percentile([5.0], 0.9) == 5.0
    assert math.isnan(timing.percentile([], 0.5))


def test_every_summary_takes_its_band_from_the_one_percentile():
    samples = [0.9, 0.3, 0.5, 0.1, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0, 0.05, 0.95]
    p10, p90 = timing.percentile(samples, 0.1), timing.percentile(samples, 0.9)
    summary = timing.summarize(samples)
    assert (summary["time_p10_ms"], summary["time_p90_ms"]) == (p10, p90) == (0.1, 0.95)
    assert summary["time_ms"] == 0.55 and summary["repeats"] == 12  # the median, not a rank
    power = power_load.quantiles(samples)
    assert (power["p10"], power["p90"]) == (p10, p90)
    assert whole_step.percentile is timing.percentile
