"""The `grid` group: the kernel configurations, batches, targets and layouts swept."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from tilesweep.settings.strict import AtLeastOne, PowerOfTwo, Section, distinct, refuse
from tilesweep.settings.workload import Dtype, ModelSettings

Epilogue = Literal["default", "finalize"]
# Beyond these no GPU has the registers, threads or memory (32 warps = 1,024 threads a block).
MAX_STAGES, MAX_WARPS, MAX_TOKENS_PER_EXPERT = 16, 32, 65536
# A tile side: a power of two, at least the 16 rows or columns of one MMA.
TileSide = Annotated[int, Field(ge=16), PowerOfTwo]


class Tile(Section):
    """One output tile of a grouped GEMM, and its reduction step."""

    m: TileSide
    n: TileSide
    k: TileSide

    def fit(self, model: ModelSettings) -> None:
        """Raise Refused (key below the tile) when k does not divide the model's reductions."""
        for dim in ("hidden", "moe_intermediate"):
            if getattr(model, dim) % self.k:
                raise refuse("k", f"does not divide model.{dim}={getattr(model, dim)}", self.k)


class Layout(Section):
    """One split over devices: tp x ep per pipeline stage pp (MoE layers: moe_split)."""

    tp: AtLeastOne = Field(description="attention tensor-parallel degree")
    pp: AtLeastOne = Field(description="pipeline stages")
    ep: AtLeastOne = Field(description="attention data-parallel degree")
    world: int = Field(None, description="devices, restating tp*pp*ep")
    experts: Literal["tp", "ep"] = Field(
        None, description="ep: whole experts spread over the TP group (MoE TP 1)"
    )
    moe_tp: AtLeastOne = Field(None, description="MoE TP, a divisor of tp*ep; unset: tp")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Refuse a world not tp*pp*ep, experts=ep without TP, or a MoE TP not dividing ranks."""
        if self.experts == "ep" and (self.ep != 1 or self.tp < 2):
            why = "spreads whole experts over the TP group; give tp >= 2 and ep: 1"
            raise refuse("experts", why, "ep")
        if self.experts == "ep" and self.moe_tp not in (None, 1):
            raise refuse("moe_tp", "must be 1 with experts=ep (whole experts)", self.moe_tp)
        ranks = self.tp * self.ep
        if self.moe_tp is not None and ranks % self.moe_tp:
            why = f"does not divide a stage's tp*ep = {self.tp}*{self.ep} = {ranks} ranks"
            raise refuse("moe_tp", why, self.moe_tp)
        world = ranks * self.pp
        if "world" in self.model_fields_set and self.world != world:
            why = f"tp*pp*ep = {self.tp}*{self.pp}*{self.ep} = {world} devices"
            raise refuse("world", why, self.world)
        return self

    def moe_split(self) -> tuple[int, int]:
        """Return (MoE TP, MoE EP): by default tp x ep; experts=ep: 1 x tp*ep; else moe_tp."""
        moe_tp = self.moe_tp or (1 if self.experts == "ep" else self.tp)
        return moe_tp, self.tp * self.ep // moe_tp

    def fit(self, model: ModelSettings) -> None:
        """Raise Refused (key below the layout) when the model cannot be split this way."""
        tp, experts = self.tp, model.routed_experts
        moe_tp, moe_ep = self.moe_split()
        if experts % moe_ep:
            if self.moe_tp is not None:
                why = f"gives MoE EP {moe_ep}, which does not divide model.routed_experts={experts}"
                raise refuse("moe_tp", why, self.moe_tp)
            if self.experts == "ep":
                why = f"does not divide model.routed_experts={experts} (experts=ep)"
                raise refuse("tp", why, tp)
            raise refuse("ep", f"does not divide model.routed_experts={experts}", self.ep)
        for split, name in ((tp, "tp"), (moe_tp, "moe_tp")):
            if model.moe_intermediate % split:
                why = f"does not divide model.moe_intermediate={model.moe_intermediate}"
                raise refuse(name, why, split)
        heads = model.attention.heads
        if heads % tp:
            why = "(each TP rank holds whole attention heads)"
            raise refuse("tp", f"does not divide model.attention.heads={heads} {why}", tp)
        if self.pp > model.moe_layers:
            raise refuse("pp", f"more stages than model.moe_layers={model.moe_layers}", self.pp)


class GridSettings(Section):
    """Tiles x stages x warps x batches x targets x layouts to sweep."""

    targets: distinct(str)  # names in conf/hardware: checked against the catalog by the root
    dtypes: distinct(Dtype)
    tiles: distinct(Tile)
    stages: distinct(Annotated[int, Field(ge=1, le=MAX_STAGES)])
    warps: distinct(Annotated[int, Field(ge=1, le=MAX_WARPS), PowerOfTwo])
    epilogues: distinct(Epilogue)
    tokens_per_expert: distinct(Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_EXPERT)])
    layouts: distinct(Layout)
