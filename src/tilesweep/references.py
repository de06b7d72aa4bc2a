"""Engines' own measured decode figures, as data (conf/references), set beside the verdict
composed for the same deployment (engine_figures.engine_table). Nothing here is measured."""

import stat
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from tilesweep import package_data
from tilesweep.errors import ConfigError
from tilesweep.group_files import parsed_once, yaml_loader
from tilesweep.settings.cited_figures import Figure, References

__all__ = ["BAND", "Figure", "References", "read_figures_from", "validate"]

# The band a composed TPOT must fall in, as a ratio to the engine's measured one (issue: the
# verdict as an engine runs it).
BAND = (0.75, 1.33)


def validate(value: References | None, conf_dir: Path) -> None:
    """Raise ConfigError for a `references` section without figures, or naming what conf/ lacks."""
    if value is not None and "figures" not in value.model_fields_set:
        raise ConfigError(
            "references: the file holds no `figures:` list; references=none sets none beside "
            "the verdict"
        )
    for i, fig in enumerate(value.figures if value is not None else ()):
        if not (fig.input_len and fig.output_len) and not fig.context_len:
            raise ConfigError(
                f"references.figures[{i}]: give input_len and output_len (a serving load) or "
                "context_len (a decode-only figure)"
            )
        for group, name in fig.groups().items():
            options = sorted(p.stem for p in (Path(conf_dir) / group).glob("*.yaml"))
            if name not in options:
                raise ConfigError(
                    f"references.figures[{i}].{group}={name!r}: unknown {group}; "
                    f"valid: {', '.join(options)}"
                )


def read_figures_from(raw: dict, conf_dir: Path) -> None:
    """Put the figures of `references.figures_from` into `raw` before validation (libyaml, once
    per process: Hydra's pure-Python parse of the corpus was two thirds of every compose)."""
    refs = raw.get("references")
    name = refs.get("figures_from") if isinstance(refs, dict) else None
    if not name:
        return
    where = f"references.figures_from={name!r}"
    if refs.get("figures"):
        raise ConfigError(
            f"{where}: the figures are given inline too; give one (references=none with "
            "references.figures=[...] gives inline figures alone)"
        )
    base = (Path(conf_dir) / "references").resolve()
    path = (base / str(name)).resolve()
    if not path.is_relative_to(base) or path.suffix != ".yaml":
        raise ConfigError(f"{where}: not a .yaml file under conf/references")
    try:
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):  # a FIFO blocks a read
            raise ConfigError(f"{where}: not a plain file (a folder, a pipe or a device)")
        data = parsed_once(path, _yaml_file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        text = str(exc).strip().splitlines()
        raise ConfigError(
            f"{where}: cannot read it ({text[0] if text else type(exc).__name__})"
        ) from None
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, list) or not figures:
        raise ConfigError(f"{where}: the file holds no `figures:` list of figures")
    refs["figures"] = figures


def _yaml_file(path: Path) -> object:
    """Return a YAML file's contents as libyaml reads them under OmegaConf's rules."""
    return yaml.load(path.read_bytes().decode(), Loader=yaml_loader())


_LISTS = package_data.column_lists("tilesweep.references")  # data/columns.yaml
# The keys that make two figures the same deployment under the same load: only their
# concurrency differs.
SAME_DEPLOYMENT = _LISTS["SAME_DEPLOYMENT"]
# How much faster a figure at a higher concurrency may be before it contradicts a figure at a
# lower one: a decode step over more sequences does at least the same work, so an engine's TPOT
# does not fall as concurrency rises beyond run-to-run noise.
FASTER_AT_MORE = 0.10


def source_checks(engines) -> list[str]:
    """Return, per row of an engines table, why the corpus contradicts that figure, or ''."""
    keys = list(engines[SAME_DEPLOYMENT].itertuples(index=False, name=None))
    batches, tpots = engines["batch"].tolist(), engines["engine_tpot_ms"].tolist()
    groups: dict[tuple, list[int]] = {}  # a key with a missing value is no deployment's
    for j, key in enumerate(keys):
        if not any(pd.isna(v) for v in key):
            groups.setdefault(key, []).append(j)
    out = []
    for i, key in enumerate(keys):
        limit = (1 - FASTER_AT_MORE) * tpots[i]
        faster = [j for j in groups.get(key, []) if batches[j] > batches[i] and tpots[j] < limit]
        best = min(faster, key=lambda j: batches[j], default=None)  # the nearest concurrency above
        out.append(
            ""
            if best is None
            else f"contradicted: the same deployment and load measured {tpots[best]:g} ms "
            f"at concurrency {batches[best]} against {tpots[i]:g} ms at "
            f"{batches[i]} (TPOT does not fall as concurrency rises)"
        )
    return out


def _error(done) -> dict:
    """Return rows in BAND, median and largest |error| in % and the ratio's range."""
    ratio = done["composed_over_engine"]
    err = (ratio - 1).abs() * 100
    return {
        "in_band": int(ratio.between(*BAND).sum()),
        "median_abs_error_pct": float(err.median()),
        "max_abs_error_pct": float(err.max()),
        "ratio_min": float(ratio.min()),
        "ratio_max": float(ratio.max()),
    }


def corpus_summary(engines) -> dict:
    """Return the composition's error over the test engine figures (role test), from an engines
    table; `uncontradicted` leaves out the figures their own corpus contradicts."""
    if engines is None or engines.empty or "role" not in engines:
        return {"rows": 0}
    test = engines[engines["role"] == "test"]
    done = test[test["composed_over_engine"].notna()]
    checked = done["source_check"].fillna("") if "source_check" in done else ""
    kept = done[checked == ""] if len(done) else done
    return {
        "rows": int(len(engines)),
        "test_rows": int(len(test)),
        "train_rows": int((engines["role"] == "train").sum()),
        "composed": int(len(done)),
        **_error(done),
        "contradicted": int(len(done) - len(kept)),
        "uncontradicted": {"composed": int(len(kept)), **_error(kept)},
        "gaps": int(len(test) - len(done)),
        "engines": sorted(set(done["engine"])),
        "hardware": sorted(set(done["hardware"])),
        "models": sorted(set(done["model"])),
    }


FAMILY = ("model", "hardware", "engine")  # one family of engine figures: model x GPU x engine


def family_errors(engines) -> pd.DataFrame:
    """Return the composition's error per family over the test figures it composed."""
    cols = [*FAMILY, "figures", "in_band", "inside_tpot_band", "with_tpot_band"]
    cols += ["median_ratio", "low_ratio", "high_ratio", "median_abs_error_pct"]
    if engines is None or engines.empty or "role" not in engines:
        return pd.DataFrame(columns=cols)
    done = engines[(engines["role"] == "test") & engines["composed_over_engine"].notna()]
    rows = []
    for key, part in done.groupby(list(FAMILY), sort=True):
        ratio = part["composed_over_engine"].astype(float)
        said = part["inside_tpot_band"] if "inside_tpot_band" in part else pd.Series(dtype=object)
        said = said.dropna().map(lambda v: str(v).lower() in ("true", "1", "1.0"))
        rows.append(
            {
                **dict(zip(FAMILY, key, strict=True)),
                "figures": len(part),
                "in_band": int(part["in_band"].astype(bool).sum()),
                "inside_tpot_band": int(said.sum()),
                "with_tpot_band": int(len(said)),
                "median_ratio": float(ratio.median()),
                "low_ratio": float(ratio.min()),
                "high_ratio": float(ratio.max()),
                "median_abs_error_pct": float((100 * (ratio - 1)).abs().median()),
            }
        )
    return pd.DataFrame(rows, columns=cols)


def trust_words(engines, model: str, hardware: str, engine: str) -> str:
    """Return how far to trust a verdict of one family, in one sentence."""
    table = family_errors(engines)
    if table.empty:
        return "How far to trust it: no engine figure composed to check it against."
    same = table[
        (table["model"] == model)
        & (table["hardware"] == hardware)
        & (table["engine"].str.lower().str.replace("-", "") == engine)
    ]
    if not same.empty:
        r = same.iloc[0]
        inside = f", {r['inside_tpot_band']} of the {r['with_tpot_band']} with a band inside it "
        return (
            f"How far to trust it: on the {r['figures']} cited {r['engine']} figures of {model} on "
            f"{hardware}, composed/engine {r['low_ratio']:.2f}-{r['high_ratio']:.2f} (median "
            f"{r['median_ratio']:.2f}), {r['in_band']} within {BAND[0]}-{BAND[1]}x"
            + (f"{inside}(tpot_low_ms-tpot_high_ms)." if r["with_tpot_band"] else ".")
        )
    figures, inside = int(table["figures"].sum()), int(table["in_band"].sum())
    return (
        f"How far to trust it: no cited figure of {model} on {hardware} with {engine}; over the "
        f"{len(table)} families the corpus has, composed/engine ranges "
        f"{table['low_ratio'].min():.2f}-{table['high_ratio'].max():.2f} ({inside} of {figures} "
        f"within {BAND[0]}-{BAND[1]}x), a family never seen may stray as far."
    )


def fit_host_ms(engines, engine: str) -> float:
    """Return the host ms per step best explaining an engine's train rows (5 us grid, 0-5 ms)."""
    rows = engines[
        (engines["role"] == "train")
        & (engines["engine"] == engine)
        & engines["composed_tpot_ms"].notna()
    ]
    if rows.empty:
        raise ValueError(f"no train rows of {engine} in the corpus")
    bare = (rows["composed_tpot_ms"] - rows["host_ms"].fillna(0.0)).to_numpy()[:, None]
    measured = rows["engine_tpot_ms"].to_numpy()[:, None]
    grid = np.arange(0.0, 5.0, 0.005)[None, :]
    err = ((np.log(bare + grid) - np.log(measured)) ** 2).sum(axis=0)
    return float(grid[0, int(np.argmin(err))])
