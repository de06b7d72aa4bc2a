"""backend.fused_moe's model: what is tuned, how it is timed and picked, the engines' defaults."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from tilesweep.fused_moe.engines.base import names as engine_names
from tilesweep.fused_moe.space import ENGINE_DTYPE, VARIANT_OFF, engine_default
from tilesweep.settings.strict import Number, Section, distinct, refuse

Positive = Annotated[int, Field(ge=1)]
EngineDtype = Literal[tuple(ENGINE_DTYPE)]


class Space(Section):
    """The tuners' search space: the values tried for each launch parameter."""

    BLOCK_SIZE_M: distinct(Positive)
    BLOCK_SIZE_N: distinct(Positive)
    BLOCK_SIZE_K: distinct(Positive)
    GROUP_SIZE_M: distinct(Positive)
    num_warps: distinct(Positive)
    num_stages: distinct(Positive)


class Rule(Section):
    """One rule of an engine's default heuristic: its value where its conditions hold."""

    value: int
    m_max: int = None
    m_le_e: bool = None
    m_per_e_over: int = None
    dtype: str = None
    block: bool = None  # the format is fp8 with 128 x 128 block scales


class EngineDefaults(Section):
    """An engine's default heuristic: the rules for each launch parameter."""

    BLOCK_SIZE_M: list[Rule]
    BLOCK_SIZE_N: list[Rule]
    BLOCK_SIZE_K: list[Rule]
    GROUP_SIZE_M: list[Rule]
    num_warps: list[Rule]
    num_stages: list[Rule]


class Variant(Section):
    """One of the project's kernel variants beyond the engines' space (space.VARIANT_OFF)."""

    TMA: int = Field(None, ge=0)
    PERSISTENT: int = Field(None, ge=0)
    SPLIT_K: int = Field(None, ge=0)
    SORT: int = Field(None, ge=0)

    @model_validator(mode="after")
    def _names_one(self) -> Self:
        """Refuse a variant that leaves every key off (the engines' own kernel)."""
        if all((getattr(self, key) or 0) <= off for key, off in VARIANT_OFF.items()):
            given = self.model_dump(exclude_unset=True)  # model_dump: the message shows it
            raise refuse("", "names no variant (every key off: the engines' own kernel)", given)
        return self


class EngineTune(Section):
    """backend.fused_moe.engine_tune: searching and picking in the engines' own kernels."""

    formats: list[Literal["bf16", "fp8", "fp8_block"]]
    rounds: int = Field(ge=1, le=4)
    finalists: int = Field(ge=1)
    screen_repeats: int = Field(ge=1)
    final_repeats: int = Field(ge=3)
    routing: list[Literal["uniform", "zipf"]]
    compile_workers: int = Field(ge=0)


class FusedMoeSettings(Section):
    """backend.fused_moe: what is tuned, how it is timed and picked, and the engines' defaults."""

    enabled: bool
    # Tune on a GPU machine (minutes per dtype and engine): opt-in, so a first GPU run ends with
    # its answer within minutes; the shipped drop-in files stand meanwhile.
    tune: bool
    dtypes: distinct(EngineDtype)
    batch_keys: distinct(Positive)
    space: Space
    routing: distinct(Literal["uniform", "zipf"])
    direct_sparsity: int = Field(ge=1)
    screen_repeats: int = Field(ge=1)
    final_repeats: int = Field(ge=1)
    graph_calls: int = Field(ge=1)
    graph_fill_ms: Number = Field(gt=0)
    finalists: int = Field(ge=1)
    guard_default: str
    variants: list[Variant]
    variant_tiles: int
    variant_finalists: int
    config_timeout_s: Number
    items_per_worker: int = Field(ge=0)  # 0: one worker; else the items each worker runs
    compile_timeout_s: Number
    compile_workers: int
    engines: distinct(str)  # each a known engine (engines/<name>.yaml or registered)
    engine_versions: dict[str, str]  # each plans an engine-tuning job
    engine_tune: EngineTune
    extra_tokens_per_expert: list[int]
    engine_defaults: dict[str, EngineDefaults]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Refuse unknown engines, missing or incomplete default rules, and unscreened variants."""
        known = engine_names()
        for key, listed in (("engine_versions", self.engine_versions), ("engines", self.engines)):
            for engine in listed:
                if engine not in known:
                    raise refuse(f"{key}.{engine}", f"unknown engine; valid: {', '.join(known)}")
        for engine in self.engine_versions:
            if engine not in self.engine_defaults:
                raise refuse(f"engine_defaults.{engine}", "missing: engine_versions names it")
        if self.guard_default not in self.engine_defaults:
            why = f"not one of engine_defaults ({', '.join(self.engine_defaults)})"
            raise refuse("guard_default", why, self.guard_default)
        if self.variants and min(self.variant_tiles, self.variant_finalists) < 1:
            why = "must be at least 1 when variants are screened (variants: [] turns them off)"
            key = "variant_tiles" if self.variant_tiles < 1 else "variant_finalists"
            raise refuse(key, why, getattr(self, key))
        for engine, defaults in self.engine_defaults.items():
            for dtype in self.dtypes:
                try:
                    engine_default(defaults, 1, 1, dtype)
                except ValueError as exc:
                    raise refuse(f"engine_defaults.{engine}", str(exc)) from None
        return self
