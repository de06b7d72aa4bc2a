"""The answer card's picks: per batch and for a target, and the figures and words each carries."""

import math
from dataclasses import asdict, dataclass, replace

import pandas as pd

from tilesweep import package_data

DATA_FILES = ("data/report_texts.yaml",)
# The card table's header for each pick field.
PICK_HEADERS = package_data.data_typed("tilesweep", DATA_FILES[0], "pick_headers", dict[str, str])
# The figures one pick carries (answer.json's `picks` keys): every header's but the runner-up.
PICK_FIELDS = tuple(PICK_HEADERS)[:-1]
BOUND_KINDS = ("memory", "math", "communication", "launch")  # worded '<kind>-bound'


def clip(text: str, limit: int) -> str:
    """Return text cut at a word before `limit` characters, with an ellipsis where cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    opened = [i for i, c in enumerate(cut) if c in "(["]
    closed = sum(c in ")]" for c in cut)
    if len(opened) > closed and opened[closed] > 0:  # the first bracket left open
        cut = cut[: opened[closed]]
    return cut.rstrip(",;( ") + " ..."


def finite(value: object) -> bool:
    """Return whether a value is a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def number(value: object, digits: int = 3) -> str:
    """Return a figure to `digits` significant digits, thousands separated ('1,694', '17.7')."""
    if not finite(value):
        return "n/a"
    x = float(value)
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    return f"{float(f'{x:.{digits}g}'):g}"


@dataclass(frozen=True)
class Pick:
    """One layout at one batch that fits in memory, with the card's figures."""

    batch: int
    layout: str
    gpus: int
    tpot_ms: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    bound: str
    x_floor: float | None
    # The TPOT at the ends of a cited efficiency band the row rests on (verdict tpot_low_ms /
    # tpot_high_ms), where it has one.
    tpot_range_ms: tuple[float, float] | None = None
    # The next-best layout at this batch and its TPOT (none where one layout fits).
    runner_up: str = ""
    runner_up_tpot_ms: float | None = None

    @property
    def margin_pct(self) -> float | None:
        """Return how much slower the runner-up is, in percent of this pick's TPOT."""
        if self.runner_up_tpot_ms is None:
            return None
        return 100.0 * (self.runner_up_tpot_ms / self.tpot_ms - 1.0)

    def words(self, brief: bool = False) -> str:
        """Return the pick in words: 'tp8 (8 GPUs) at batch 8: TPOT 17.7 ms, ...'; brief: as a
        listed row, 'tp8 at batch 8: ...', its band unlabelled and its bound as the row has it."""
        floor = f", {number(self.x_floor)}x floor" if finite(self.x_floor) and not brief else ""
        # 'memory-bound', but 'mixed', 'kernel-limited' as they are
        bound = self.bound + ("-bound" if self.bound in BOUND_KINDS and not brief else "")
        gpus = "" if brief else f" ({self.gpus} GPU{'s' if self.gpus != 1 else ''})"
        band = self.band("" if brief else " over the cited band")
        return (
            f"{self.layout}{gpus} at batch {self.batch}: TPOT {number(self.tpot_ms)} ms{band}, "
            f"{number(self.tokens_per_s_per_user)} tok/s per user, "
            f"{number(self.tokens_per_s_per_gpu)} tok/s per GPU, {bound}{floor}"
        )

    def band(self, words: str = "") -> str:
        """Return ' (low-high{words})' of the TPOT over the cited band where it has one, else ''."""
        low_high = self.tpot_range_ms
        return f" ({number(low_high[0])}-{number(low_high[1])}{words})" if low_high else ""

    def cells(self) -> dict[str, str]:
        """Return the pick's figures as the card table's text cells, by header."""
        values = asdict(self)
        out = {}
        for name in PICK_FIELDS:
            value = values[name]
            text = number(value) if isinstance(value, float) else str(value)
            text += self.band() if name == "tpot_ms" else ""
            out[PICK_HEADERS[name]] = text + ("x" if name == "x_floor" and finite(value) else "")
        margin = self.margin_pct
        out[PICK_HEADERS["runner_up"]] = (
            f"{self.runner_up} +{number(margin)}%" if self.runner_up and margin is not None else "-"
        )
        return out


@dataclass(frozen=True)
class Target:
    """A TPOT target and a tokens/s-per-user floor, and the pick that meets them or misses least."""

    tpot_ms: float | None
    min_tokens_per_s_per_user: float | None
    met: bool
    pick: Pick | None
    miss_ms: float | None = None

    @property
    def limit_ms(self) -> float:
        """Return the TPOT both bounds allow: the target, and 1,000 / the per-user floor."""
        floor = self.min_tokens_per_s_per_user
        limits = [self.tpot_ms] if self.tpot_ms else []
        limits += [1000.0 / floor] if floor else []
        return min(limits)

    def asked(self) -> str:
        """Return the target in words: 'TPOT <= 30 ms and >= 40 tok/s per user'."""
        parts = [f"TPOT <= {number(self.tpot_ms)} ms"] if self.tpot_ms else []
        if self.min_tokens_per_s_per_user:
            parts.append(f">= {number(self.min_tokens_per_s_per_user)} tok/s per user")
        return " and ".join(parts)

    def words(self) -> str:
        """Return what meets the target in one sentence, or by how much the closest misses."""
        if self.met and self.pick:
            floor = (
                " (question.min_tokens_per_s_per_user=null removes the per-user floor)"
                if self.min_tokens_per_s_per_user
                else ""
            )
            return f"At {self.asked()}, the most tokens/s per GPU: {self.pick.words()}{floor}."
        if self.pick is None:
            return f"At {self.asked()}: no layout fits in memory at any batch, so none meets it."
        over = f"{number(self.miss_ms)} ms over the {number(self.limit_ms)} ms it allows"
        if self.min_tokens_per_s_per_user:
            short = self.min_tokens_per_s_per_user - self.pick.tokens_per_s_per_user
            if short > 0:
                over += f", {number(short)} tok/s per user short"
        return (
            f"No layout and batch meets {self.asked()}: the closest, {self.pick.words()}, is "
            f"{over}."
        )


def numeric(frame: pd.DataFrame, name: str) -> pd.Series:
    """Return a column as floats (NaN where absent or not a number)."""
    if name not in frame:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[name], errors="coerce").astype(float)


def fitting_rows(verdict: pd.DataFrame, composed: bool = True) -> pd.DataFrame:
    """Return the rows that fit and have a TPOT (the candidates); composed=False: fit, none."""
    if verdict.empty or "fits_memory" not in verdict or "tpot_ms" not in verdict:
        return verdict.iloc[0:0]
    tpot = numeric(verdict, "tpot_ms")
    return verdict[
        (verdict["fits_memory"].astype(str) == "yes") & (tpot > 0 if composed else tpot.isna())
    ]


def pick_of(rec: dict) -> Pick:
    """Return the card's figures of one verdict row."""
    tpot = float(rec["tpot_ms"])
    world = int(rec["world"]) if finite(rec.get("world")) else 1
    batch = int(rec["batch"])
    per_gpu = rec.get("tokens_per_s_per_gpu")
    per_gpu = float(per_gpu) if finite(per_gpu) else batch * 1000.0 / tpot / world
    return Pick(
        batch=batch,
        layout=str(rec["layout"]),
        gpus=world,
        tpot_ms=tpot,
        tokens_per_s_per_user=1000.0 / tpot,
        tokens_per_s_per_gpu=per_gpu,
        bound=str(rec.get("bound") or "bound missing"),
        x_floor=float(rec["x_floor"]) if finite(rec.get("x_floor")) else None,
        tpot_range_ms=(
            (float(rec["tpot_low_ms"]), float(rec["tpot_high_ms"]))
            if finite(rec.get("tpot_low_ms")) and finite(rec.get("tpot_high_ms"))
            else None
        ),
    )


def gap_layouts(verdict: pd.DataFrame) -> list[str]:
    """Return, per reason, the layouts that fit somewhere but compose no TPOT there."""
    rows = fitting_rows(verdict, composed=False)
    by_reason: dict[str, list[str]] = {}
    for rec in rows.to_dict("records"):
        reason = str(rec.get("bound") or "gap").removeprefix("gap (").removesuffix(")")
        names = by_reason.setdefault(reason, [])
        if str(rec["layout"]) not in names:
            names.append(str(rec["layout"]))
    return [f"{reason}: {', '.join(names)}" for reason, names in by_reason.items()]


def per_batch(verdict: pd.DataFrame) -> tuple[list[Pick], list[int]]:
    """Return (per batch the fitting layout with the most tokens/s; batches where none fits)."""
    fits = fitting_rows(verdict)
    picks, none = [], []
    for batch in sorted(numeric(verdict, "batch").dropna().astype(int).unique()):
        rows = fits[numeric(fits, "batch") == batch]
        if rows.empty:
            none.append(int(batch))
            continue
        ranked = rows.assign(_t=numeric(rows, "tpot_ms")).sort_values("_t")
        best = pick_of(ranked.iloc[0].to_dict())
        others = ranked[ranked["layout"].astype(str) != best.layout]
        if not others.empty:
            second = others.iloc[0]
            best = replace(
                best, runner_up=str(second["layout"]), runner_up_tpot_ms=float(second["tpot_ms"])
            )
        picks.append(best)
    return picks, none


def choose(
    verdict: pd.DataFrame, tpot_ms: float | None, min_per_user: float | None
) -> Target | None:
    """Return the target's pick (most tokens/s per GPU within both bounds) or closest miss."""
    if not tpot_ms and not min_per_user:
        return None
    fits = fitting_rows(verdict)
    empty = Target(tpot_ms, min_per_user, met=False, pick=None)
    if fits.empty:
        return empty
    limit = empty.limit_ms
    tpot = numeric(fits, "tpot_ms")
    meets = fits[tpot <= limit + 1e-9]
    if not meets.empty:
        picks = [pick_of(r) for r in meets.to_dict("records")]
        best = max(picks, key=lambda p: (p.tokens_per_s_per_gpu, -p.tpot_ms))
        return Target(tpot_ms, min_per_user, met=True, pick=best)
    closest = pick_of(fits.loc[tpot.idxmin()].to_dict())
    return Target(tpot_ms, min_per_user, met=False, pick=closest, miss_ms=closest.tpot_ms - limit)


def top_lines(verdict: pd.DataFrame, n: int, target: Target | None) -> list[str]:
    """Return the n rows with the most tokens/s per GPU that meet the target, as lines."""
    fits = fitting_rows(verdict)
    limit = target.limit_ms if target is not None else None
    if limit:
        fits = fits[numeric(fits, "tpot_ms") <= limit + 1e-9]
    where = f" at {target.asked()}" if target is not None and limit else ""
    if fits.empty:
        return [f"Top {n}{where}: no composed row meets it."]
    ranked = fits.assign(_g=numeric(fits, "tokens_per_s_per_gpu")).sort_values(
        ["_g", "tpot_ms"], ascending=[False, True]
    )
    rows = ranked.head(n).to_dict("records")
    return [f"Top {len(rows)} by tokens/s per GPU{where}:"] + [
        f"  {i}. {pick_of(r).words(brief=True)}" for i, r in enumerate(rows, 1)
    ]


def pareto_lines(verdict: pd.DataFrame) -> list[str]:
    """Return the Pareto frontier of the composed rows, fastest per user first, as lines."""
    fits = fitting_rows(verdict)
    if fits.empty:
        return ["Pareto frontier: no composed row."]
    user = 1000.0 / numeric(fits, "tpot_ms")
    gpu = numeric(fits, "tokens_per_s_per_gpu")
    order = sorted(range(len(fits)), key=lambda i: (-user.iloc[i], -gpu.iloc[i]))
    front, best_gpu = [], -math.inf
    for i in order:
        if gpu.iloc[i] > best_gpu:
            front.append(fits.iloc[i].to_dict())
            best_gpu = gpu.iloc[i]
    return ["Pareto frontier (tok/s per user against tok/s per GPU; fastest per user first):"] + [
        f"  {pick_of(r).words(brief=True)}" for r in front
    ]
