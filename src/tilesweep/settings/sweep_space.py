"""The `grid` group: the kernel configurations, batches, targets and layouts swept."""

from __future__ import annotations

from tilesweep.settings.strict import Section


class Tile(Section):
    """One output tile of a grouped GEMM, and its reduction step."""

    m: int
    n: int
    k: int


class Layout(Section):
    """One split of the model over devices: tensor, pipeline and expert parallel degrees; world
    restates their product, and experts=ep spreads whole experts over the TP group."""

    tp: int
    pp: int
    ep: int
    world: int = None
    experts: str = None


class GridSettings(Section):
    """Tiles x stages x warps x batches x targets x layouts to sweep."""

    targets: list[str]
    dtypes: list[str]
    tiles: list[Tile]
    stages: list[int]
    warps: list[int]
    epilogues: list[str]
    tokens_per_expert: list[int]
    layouts: list[Layout]
