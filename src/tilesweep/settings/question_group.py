"""The `question` group (conf/question): the case study a report answers and the card's target."""

from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    model_serializer,
    model_validator,
)

from tilesweep.errors import ConfigError
from tilesweep.settings.strict import Number, PositiveNumber


class _Strict(BaseModel):
    """A config model: unknown keys, wrong types, NaN and inf refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Layout(_Strict):
    """One parallel layout: tensor, pipeline and expert parallel degrees."""

    tp: PositiveInt = Field(description="tensor-parallel degree")
    pp: PositiveInt = Field(description="pipeline stages")
    ep: PositiveInt = Field(description="expert-parallel (attention data-parallel) degree")


class Tile(_Strict):
    """One output tile and its K step, and whether the question saw it run (unset: not said)."""

    m: PositiveInt = Field(description="output tile rows")
    n: PositiveInt = Field(description="output tile columns")
    k: PositiveInt = Field(description="reduction step")
    ran: bool | None = Field(None, description="whether the question saw it run; unset: not said")


class Tiles(_Strict):
    """The tiles the question asks about: the backend holding them and their table's title, note."""

    backend: str = Field(min_length=1, description="the backend whose launch rows hold them")
    shapes: list[Tile] = Field(min_length=1, description="each tile asked about")
    title: str = Field(min_length=1, description="their table's title")
    note: str = Field("", description="a note under their table")


class Power(_Strict):
    """A power reading the question took as evidence: watts of a limit, and what it read in them."""

    watts: PositiveNumber = Field(description="board power drawn during decode (W)")
    limit_watts: PositiveNumber = Field(description="the power limit it was drawn against (W)")
    claim: str = Field("", description="what the question read into the reading")

    @model_validator(mode="after")
    def _within_limit(self) -> Self:
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

    name: str = Field(
        min_length=1, pattern=r"^[a-z][a-z0-9_]*$", description="its source's name; its section id"
    )
    title: str = Field(min_length=1, description="its section's heading")
    model: str = Field(min_length=1, description="the conf/model name it asks about")
    hardware: str = Field(min_length=1, description="the conf/hardware name of its GPUs")
    gpus: PositiveInt = Field(description="GPUs of its deployment")
    layouts: list[Layout] = Field(min_length=1, description="the layouts it weighs")
    setting: str = Field(min_length=1, description="its panel's first sentence")
    tiles: Tiles | None = Field(None, description="the tiles it asks about")
    power: Power | None = Field(None, description="a power reading it took as evidence")

    @model_validator(mode="after")
    def _layouts_fill_the_gpus(self) -> Self:
        """Refuse a layout that does not use exactly `gpus` GPUs."""
        for i, lay in enumerate(self.layouts):
            used = lay.tp * lay.pp * lay.ep
            if used != self.gpus:
                raise ValueError(f"layouts[{i}] uses {used} GPUs, not {self.gpus}")
        return self

    def asks_about(self, model: str, hardware: str) -> bool:
        """Return whether a deployment of `model` on `hardware` is the one the question is about."""
        return (model, hardware) == (self.model, self.hardware)


class Target(_Strict):
    """The answer card's target (either unset): TPOT in ms, tokens/s per user (1,000 / TPOT)."""

    tpot_target_ms: Annotated[Number, Field(gt=0, le=100_000)] | None = Field(
        None, description="the longest time per output token allowed (ms); null: not asked"
    )
    min_tokens_per_s_per_user: Annotated[Number, Field(gt=0, le=1_000_000)] | None = Field(
        None, description="the fewest tokens/s each sequence must get; null: not asked"
    )


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


class QuestionGroup(_Strict):
    """The `question` group as validated: the card's target and the case study (None: none)."""

    target: Target = Field(description="what the answer card is asked to meet")
    case: Question | None = Field(None, description="the case study; None for none")

    @classmethod
    def parse(cls, value: Any) -> Self:
        """Return the group a `question` mapping describes; ConfigError at the first bad key."""
        if isinstance(value, QuestionGroup):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"question={value!r}: expected a mapping")
        case = {k: v for k, v in value.items() if k not in TARGET_KEYS}
        try:
            target = Target.model_validate({k: value[k] for k in TARGET_KEYS if k in value})
            return cls(target=target, case=Question.model_validate(case) if case else None)
        except ValidationError as exc:
            raise _error(exc) from None

    @model_serializer(mode="plain")
    def _as_written(self) -> dict:
        """Return the one mapping the group was validated from, keys left out left out."""
        # model_dump: output only (the rules' JSON params), never read back as a mapping
        case = self.case.model_dump(exclude_unset=True) if self.case else {}
        return {**case, **self.target.model_dump(exclude_unset=True)}
