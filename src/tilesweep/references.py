"""Engines' own measured decode figures, as data (conf/references): what a serving engine timed
for a model, layout, batch and context on a named GPU, with its source. The verdict composes the
same deployment on that GPU and sets the two side by side (deployment_verdict.engine_table), so
a reader can check the composition against what engines get. Nothing here is measured by
tilesweep."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PositiveFloat, PositiveInt

from tilesweep.errors import ConfigError
from tilesweep.settings.strict import Section, check


class Layout(Section):
    """The engine's parallel layout: tensor, pipeline and expert parallel degrees, and whether
    its experts were spread whole over the TP group (engines' EP for MoE)."""

    tp: PositiveInt
    pp: PositiveInt
    ep: PositiveInt
    experts: str = Field("tp", pattern=r"^(tp|ep)$")


class Figure(Section):
    """One engine measurement: who measured what, where, and the time per output token."""

    engine: str = Field(min_length=1)
    version: str = Field(min_length=1)
    model: str = Field(min_length=1)  # conf/model name
    hardware: str = Field(min_length=1)  # conf/hardware name
    deployment: str = Field(min_length=1)  # conf/deployment option: the checkpoint's formats
    layout: Layout
    batch: PositiveInt  # concurrent requests
    context_len: PositiveInt  # mean tokens in each request's KV cache over the generation
    speculative: str = Field(min_length=1)  # speculative decoding, as the source ran it
    tpot_ms: PositiveFloat  # mean time per output token, as the source measured it
    source: str = Field(min_length=1)  # where the figure is published, and what it is

    def overrides(self) -> list[str]:
        """Return the config overrides that compose this figure's deployment."""
        lay = self.layout
        return [
            f"model={self.model}",
            f"hardware={self.hardware}",
            f"deployment={self.deployment}",
            f"deployment.batches=[{self.batch}]",
            f"deployment.context_len={self.context_len}",
            f"grid.layouts=[{{tp:{lay.tp},pp:{lay.pp},ep:{lay.ep},experts:{lay.experts}}}]",
        ]

    def layout_name(self) -> str:
        """Return the layout as the verdict table names it (tp8-pp1-ep1, ...-xep)."""
        lay = self.layout
        return f"tp{lay.tp}-pp{lay.pp}-ep{lay.ep}" + ("-xep" if lay.experts == "ep" else "")


class References(Section):
    """The engines' figures a report sets beside its verdict (see conf/references)."""

    figures: list[Figure] = []


def parse(value: object) -> References:
    """Return the References a config's `references` section describes (none: no figures);
    raise ConfigError naming the first bad key in one line."""
    if value is None or value == {}:
        return References()
    check(References, value, "references")
    return References.model_validate(value)


def validate(value: object, conf_dir: Path) -> None:
    """Raise ConfigError for a bad `references` section or a figure naming a model, hardware or
    deployment option that conf/ does not have."""
    for i, fig in enumerate(parse(value).figures):
        for group, name in (
            ("model", fig.model),
            ("hardware", fig.hardware),
            ("deployment", fig.deployment),
        ):
            options = sorted(p.stem for p in (Path(conf_dir) / group).glob("*.yaml"))
            if name not in options:
                raise ConfigError(
                    f"references.figures[{i}].{group}={name!r}: unknown {group}; "
                    f"valid: {', '.join(options)}"
                )


def of(settings: dict) -> References:
    """Return the engines' figures a resolved config names."""
    return parse(settings.get("references"))
