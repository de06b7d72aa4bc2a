"""The engine check: one row per engine figure the config cites (conf/references), beside the
verdict composed for it with the sweep's fit (columns.ENGINE_COLUMNS)."""

import pandas as pd

from tilesweep import config_checks, references
from tilesweep.columns import ENGINE_COLUMNS
from tilesweep.config import compose_groups
from tilesweep.deployment_fit import measured_here, verdict_fit
from tilesweep.deployment_verdict import deployment_table
from tilesweep.plan import row_inputs
from tilesweep.plan.sharding import layout_name
from tilesweep.settings import RootSettings


def engine_table(
    settings: RootSettings,
    decode: pd.DataFrame,
    collective: pd.DataFrame,
    steps: pd.DataFrame,
    ceilings: dict,
) -> pd.DataFrame:
    """Return one row per engine figure the config cites (conf/references): the engine's
    measured TPOT beside the verdict composed for the same model, layout, batch and context on
    the engine's GPU, with the same fit the sweep's verdict uses (columns.ENGINE_COLUMNS)."""
    figures = settings.references.figures
    if not figures:
        return pd.DataFrame(columns=ENGINE_COLUMNS)
    fitted = verdict_fit(settings, steps, ceilings, measured_here(collective, ceilings)[3])
    batches: dict[tuple, set[int]] = {}  # per figure setup, the batches its figures give
    for fig in figures:
        batches.setdefault(_setup(fig), set()).add(fig.batch)
    groups: dict[tuple, RootSettings] = {}  # one Hydra compose per model x GPU x formats x engine
    composed: dict[tuple, pd.DataFrame] = {}  # one composition per setup, all its batches
    for fig in figures:
        key, setup = tuple(fig.groups().values()), _setup(fig)
        if key not in groups:
            groups[key] = compose_groups(fig.groups(), FIGURE_BASE)
        if setup not in composed:
            settings = figure_settings(groups[key], fig, sorted(batches[setup]))
            composed[setup] = deployment_table(
                settings, decode, collective, steps, ceilings, fitted
            ).set_index("batch", drop=False)
    rows = [_figure_row(fig, composed[_setup(fig)].loc[fig.batch]) for fig in figures]
    table = pd.DataFrame(rows, columns=ENGINE_COLUMNS)
    table["source_check"] = references.source_checks(table)
    return table


def _setup(fig: references.Figure) -> tuple:
    """Return what one composition serves beside its key: layout, load, prompt chunk and what its
    launch states (KV format, PCIe host; the batches differ: each is composed alone inside it)."""
    load = (fig.input_len, fig.output_len, fig.context_len, fig.prefill_chunk)
    return (*fig.groups().values(), layout_name(fig.layout), *load, *fig.stated().items())


def _figure_row(fig: references.Figure, one: pd.Series) -> dict:
    """Return the row of one cited engine figure beside `one`, the verdict row composed for it."""
    composed = one["tpot_ms"]
    ratio = composed / fig.tpot_ms
    low, high = one["tpot_low_ms"], one["tpot_high_ms"]
    inside = None if low != low or high != high else bool(low <= fig.tpot_ms <= high)
    return {
        **{k: getattr(fig, k) for k in _FIGURE_KEYS},
        "layout": layout_name(fig.layout),
        **{k: one[k] for k in _VERDICT_KEYS},
        "engine_tpot_ms": fig.tpot_ms,
        "composed_tpot_ms": composed,
        "composed_over_engine": ratio,
        "error_pct": 100 * (ratio - 1),
        "in_band": bool(references.BAND[0] <= ratio <= references.BAND[1]),
        "inside_tpot_band": inside,
        "engine_over_floor": fig.tpot_ms / one["floor_ms"],
        "composed_source": one["source"],
        "gap": _gap(one),
        "cited": fig.source,
    }


# The columns of an engines row that are the figure's own, and the composed verdict row's.
_FIGURE_KEYS = ("engine", "version", "model", "hardware", "batch", "input_len", "output_len")
_FIGURE_KEYS += ("topology", "pcie_allreduce", "speculative", "statistic", "role")
_VERDICT_KEYS = ("context_len", "weight_dtype", "kv_dtype", "tpot_low_ms", "tpot_high_ms")
_VERDICT_KEYS += ("floor_ms", "host_ms", "prefill_ms", "bound", "fits_memory", "kernel_list")


# The verdict times no kernel tile: one that divides any model stands in for the sweep's tiles,
# whose check (k divides the model's reductions) the verdict does not need.
ANY_TILE = "grid.tiles=[{m:16,n:16,k:16}]"
# What every cited figure's settings start from (the defaults, no figures of their own, one tile
# and one layout that divide any model); figure_settings sets the figure's layout and load.
FIGURE_BASE = ("references=none", ANY_TILE, "grid.layouts=[{tp:1,pp:1,ep:1}]")


def figure_settings(
    base: RootSettings, fig: references.Figure, batches: list[int] | None = None
) -> RootSettings:
    """Return the settings composing one cited figure: `base` with its batch (or `batches`, the
    figures of the same setup), load (and the prompt chunk and KV format its launch states) and
    layout; raise ConfigError for a chunk its engine cannot take or a host its hardware lacks."""
    load = (
        {"input_len": fig.input_len, "output_len": fig.output_len}
        if fig.input_len and fig.output_len
        else {"input_len": 0, "output_len": 0, "context_len": fig.context_len}
    )
    update = {"batches": batches or [fig.batch], "prefill_chunk": fig.prefill_chunk, **load}
    dep = base.deployment.model_copy(update=update | fig.stated())
    grid = base.grid.model_copy(update={"layouts": [fig.layout]})
    settings = base.model_copy(update={"deployment": dep, "grid": grid})
    config_checks.check_prefill_chunk(settings)
    config_checks.check_topology(settings)
    return settings


def _gap(row: pd.Series) -> str:
    """Return why a composed engine row has no time ('' where it has one)."""
    if row["fits_memory"] != "yes":
        return f"does not fit in memory ({row['mem_short_gb']:.3g} GB short per GPU)"
    if row["tpot_ms"] == row["tpot_ms"]:
        return ""
    return row_inputs.of(row).get("gaps") or str(row["bound"])
