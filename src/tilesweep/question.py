"""The question a sweep's report answers, as data (conf/question): the deployment it is about,
its layouts, the tiles it asks about, a power reading it took as evidence, and its wording. The
library names no model or GPU; it asks `asks_about` whether a deployment is the question's."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from tilesweep.errors import ConfigError
from tilesweep.settings import RootSettings
from tilesweep.settings import group as settings_group


class _Strict(BaseModel):
    """A config model: unknown keys, wrong types, NaN and inf refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Layout(_Strict):
    """One parallel layout: tensor, pipeline and expert parallel degrees."""

    tp: PositiveInt
    pp: PositiveInt
    ep: PositiveInt


class Tile(_Strict):
    """One output tile and its K step, and whether the question saw it run (unset: not said)."""

    m: PositiveInt
    n: PositiveInt
    k: PositiveInt
    ran: bool | None = None


class Tiles(_Strict):
    """The tiles the question asks about: the backend whose launch rows hold them, and the
    title and note of their table."""

    backend: str = Field(min_length=1)
    shapes: list[Tile] = Field(min_length=1)
    title: str = Field(min_length=1)
    note: str = ""


class Power(_Strict):
    """A power reading the question took as evidence: watts drawn of a limit, and what it read
    into them."""

    watts: PositiveFloat
    limit_watts: PositiveFloat
    claim: str = ""

    @model_validator(mode="after")
    def _within_limit(self) -> Power:
        """Refuse a reading above its own limit."""
        if self.watts > self.limit_watts:
            raise ValueError(f"watts {self.watts:g} above limit_watts {self.limit_watts:g}")
        return self

    @property
    def fraction(self) -> float:
        """Return the reading as a fraction of its limit."""
        return self.watts / self.limit_watts


class Question(_Strict):
    """The case study a report answers (see conf/question/brief.yaml)."""

    name: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    title: str = Field(min_length=1)
    model: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    gpus: PositiveInt
    layouts: list[Layout] = Field(min_length=1)
    setting: str = Field(min_length=1)
    tiles: Tiles | None = None
    power: Power | None = None

    @model_validator(mode="after")
    def _layouts_fill_the_gpus(self) -> Question:
        """Refuse a layout that does not use exactly `gpus` GPUs."""
        for i, lay in enumerate(self.layouts):
            if lay.tp * lay.pp * lay.ep != self.gpus:
                raise ValueError(
                    f"layouts[{i}] uses {lay.tp * lay.pp * lay.ep} GPUs, not {self.gpus}"
                )
        return self

    def asks_about(self, model: str, hardware: str) -> bool:
        """Return whether a deployment of `model` on `hardware` is the one the question is about."""
        return (model, hardware) == (self.model, self.hardware)

    def layout_dicts(self) -> list[dict]:
        """Return the question's layouts as {tp, pp, ep} mappings."""
        return [lay.model_dump() for lay in self.layouts]


class Target(_Strict):
    """What the answer card is asked to meet (either may be unset): a time per output token, and
    tokens/s per user (1,000 / TPOT in ms); the card then names the layout and batch with the most
    tokens/s per GPU that meets both, or the closest miss and by how much."""

    tpot_target_ms: float | None = Field(default=None, gt=0, le=100_000)
    min_tokens_per_s_per_user: float | None = Field(default=None, gt=0, le=1_000_000)


# The `question` keys that ask the answer card for a target (Target), apart from the case study.
TARGET_KEYS = tuple(Target.model_fields)


def _error(exc: ValidationError) -> ConfigError:
    """Return a ConfigError naming the first bad key of a `question` section in one line."""
    error = exc.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    shown = "" if error["type"] in ("missing", "value_error") else f"={error['input']!r}"
    return ConfigError(f"question{where}{shown}: {message}")


def target(value: object) -> Target:
    """Return the target a config's `question` section asks (both unset where it asks none);
    raise ConfigError naming a bad key."""
    if not isinstance(value, dict):
        return Target()
    try:
        return Target.model_validate({k: value[k] for k in TARGET_KEYS if k in value})
    except ValidationError as exc:
        raise _error(exc) from None


def parse(value: object) -> Question | None:
    """Return the Question a config's `question` section describes (its target keys aside), None
    for none (absent, or empty but for the target); raise ConfigError naming the first bad key in
    one line."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in TARGET_KEYS}
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"question={value!r}: expected a mapping")
    try:
        return Question.model_validate(value)
    except ValidationError as exc:
        raise _error(exc) from None


def validate(value: object, catalog: dict) -> None:
    """Raise ConfigError for a bad `question` section (its target included) or one about hardware
    no file describes."""
    target(value)
    question = parse(value)
    if question is not None and question.hardware not in catalog:
        valid = ", ".join(catalog)
        raise ConfigError(
            f"question.hardware={question.hardware!r}: unknown hardware; valid: {valid}"
        )
    tiles = getattr(question, "tiles", None) if question is not None else None
    if tiles is not None:
        # cycle: the registry's discovery imports fused_moe.commands -> config -> question
        from tilesweep import backends

        known = sorted(b.name for b in backends.registered())
        if tiles.backend not in known:
            raise ConfigError(
                f"question.tiles.backend={tiles.backend!r}: no such backend (its launch rows "
                f"hold the tiles); valid: {', '.join(known)}"
            )


def of(settings: RootSettings | dict) -> Question | None:
    """Return the question a resolved config names (the settings object, or the plain containers
    the report reads), or None."""
    return parse(settings_group(settings, "question"))
