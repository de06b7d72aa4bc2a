"""The answer card: the sweep's answer as one data object, built once from the verdict, its check
and the engines' figures. It ends the console of every sweep, opens both reports and is written
as answer.json, so the three cannot disagree.

Per batch it names the layout that fits in memory and gives the most tokens/s, with its time per
output token (TPOT), tokens/s per user and per GPU, bound and TPOT over the roofline floor; with a
target (question.tpot_target_ms, question.min_tokens_per_s_per_user) it names the layout and batch
with the most tokens/s per GPU that meets it, or the closest miss and by how much. Its `rests_on`
line names what the figures rest on, read from the verdict rows' own `inputs` and columns (by name:
extra columns are ignored, missing ones are a labelled gap)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from tilesweep import question, references
from tilesweep.columns import PROVENANCE_COLUMNS
from tilesweep.io import write_text
from tilesweep.provenance import git_commit
from tilesweep.settings import RootSettings

# The figures one pick carries (answer.json's `picks` keys, the card table's columns).
PICK_FIELDS = (
    "batch",
    "layout",
    "gpus",
    "tpot_ms",
    "tokens_per_s_per_user",
    "tokens_per_s_per_gpu",
    "bound",
    "x_floor",
)
# The card table's header for each pick field.
PICK_HEADERS = {
    "batch": "batch",
    "layout": "layout",
    "gpus": "GPUs",
    "tpot_ms": "TPOT ms",
    "tokens_per_s_per_user": "tok/s/user",
    "tokens_per_s_per_gpu": "tok/s/GPU",
    "bound": "bound",
    "x_floor": "x floor",
    "runner_up": "runner-up",
}
# Items of a verdict row's `inputs` (key before ':' or '=') the card names when present: the
# efficiency the expert GEMMs take, and the kernel list and host term where the verdict has them.
NAMED_ITEMS = ("expert GEMMs", "kernel list", "kernels", "host")
# The clauses of `rests_on` the console's short form keeps (after the fit's).
SHORT_RESTS = ("expert GEMMs", "kernel list", "collectives", "check:", "engine check")
# The clauses the report's card keeps (after the fit's): one line each, three in all.
REPORT_RESTS = ("check:", "engine check")


def _clip(text: str, limit: int) -> str:
    """Return text cut at a word before `limit` characters (before a bracket it would leave
    open), with an ellipsis where cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    opened = [i for i, c in enumerate(cut) if c in "(["]
    closed = sum(c in ")]" for c in cut)
    if len(opened) > closed and opened[closed] > 0:  # the first bracket left open
        cut = cut[: opened[closed]]
    return cut.rstrip(",;( ") + " ..."


def clauses(text: str) -> list[str]:
    """Return the '; '-separated clauses of a line, a '; ' inside brackets kept in its clause."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return [*out, text[start:]]


def _finite(value: object) -> bool:
    """Return whether a value is a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _num(value: object, digits: int = 3) -> str:
    """Return a figure to `digits` significant digits, thousands separated ('1,694', '17.7')."""
    if not _finite(value):
        return "n/a"
    x = float(value)
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    return f"{float(f'{x:.{digits}g}'):g}"


def bound_word(bound: str) -> str:
    """Return a bound as the card words it: 'memory-bound', 'mixed', 'kernel-limited'."""
    return f"{bound}-bound" if bound in ("memory", "math", "communication", "launch") else bound


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

    def words(self) -> str:
        """Return the pick in words: 'tp8 (8 GPUs) at batch 8: TPOT 17.7 ms, ...'."""
        floor = f", {_num(self.x_floor)}x floor" if _finite(self.x_floor) else ""
        return (
            f"{self.layout} ({self.gpus} GPU{'s' if self.gpus != 1 else ''}) at batch "
            f"{self.batch}: TPOT {_num(self.tpot_ms)} ms{self.range_words()}, "
            f"{_num(self.tokens_per_s_per_user)} "
            f"tok/s per user, {_num(self.tokens_per_s_per_gpu)} tok/s per GPU, "
            f"{bound_word(self.bound)}{floor}"
        )

    def range_words(self) -> str:
        """Return ' (low-high over the cited band)' where the row has a band, else ''."""
        if not self.tpot_range_ms:
            return ""
        low, high = self.tpot_range_ms
        return f" ({_num(low)}-{_num(high)} over the cited band)"

    def cells(self) -> dict[str, str]:
        """Return the pick's figures as the card table's text cells, by header."""
        values = asdict(self)
        out = {}
        for name in PICK_FIELDS:
            value = values[name]
            text = _num(value) if isinstance(value, float) else str(value)
            if name == "tpot_ms" and self.tpot_range_ms:
                text += f" ({_num(self.tpot_range_ms[0])}-{_num(self.tpot_range_ms[1])})"
            out[PICK_HEADERS[name]] = text + ("x" if name == "x_floor" and _finite(value) else "")
        margin = self.margin_pct
        out[PICK_HEADERS["runner_up"]] = (
            f"{self.runner_up} +{_num(margin)}%" if self.runner_up and margin is not None else "-"
        )
        return out


@dataclass(frozen=True)
class Target:
    """A TPOT target and a tokens/s-per-user floor (either may be unset), and what meets them:
    the pick with the most tokens/s per GPU, or the closest miss and by how much."""

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
        parts = [f"TPOT <= {_num(self.tpot_ms)} ms"] if self.tpot_ms else []
        if self.min_tokens_per_s_per_user:
            parts.append(f">= {_num(self.min_tokens_per_s_per_user)} tok/s per user")
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
        over = f"{_num(self.miss_ms)} ms over the {_num(self.limit_ms)} ms it allows"
        if self.min_tokens_per_s_per_user:
            short = self.min_tokens_per_s_per_user - self.pick.tokens_per_s_per_user
            if short > 0:
                over += f", {_num(short)} tok/s per user short"
        return (
            f"No layout and batch meets {self.asked()}: the closest, {self.pick.words()}, is "
            f"{over}."
        )


@dataclass(frozen=True)
class AnswerCard:
    """The answer: the deployment, its picks per batch, the target's pick where one is asked,
    the batches where nothing fits, and the one line naming what it rests on."""

    model: str
    hardware: str
    picks: list[Pick]
    no_fit_batches: list[int] = field(default_factory=list)
    target: Target | None = None
    # Layouts that fit in memory but compose no TPOT (a labelled gap: `layout (bound)`).
    gaps: list[str] = field(default_factory=list)
    rests_on: str = ""
    trust: str = ""  # how far to trust the picks: the engine corpus' error on their family
    # What the picks rest on, as data (columns.PROVENANCE_COLUMNS of the first pick's row).
    provenance: dict = field(default_factory=dict)
    # The check's held-out error range (composed vs measured whole steps, %), where checked.
    check_error_pct: tuple[float, float] | None = None
    commit: str = ""  # the commit that composed it (provenance.git_commit)

    @property
    def headline(self) -> str:
        """Return the card's first sentence: the target's answer, else the pick with the most
        tokens/s per GPU, else that nothing fits."""
        head = f"{self.model} on {self.hardware}"
        if self.target is not None and self.target.pick is None:
            why = f"no layout {self.unusable()} at any batch, so none meets it"
            return f"{head}: At {self.target.asked()}: {why}."
        if self.target is not None:
            return f"{head}: {self.target.words()}"
        if not self.picks:
            return f"{head}: no layout of the grid {self.unusable()} at any batch."
        best = max(self.picks, key=lambda p: p.tokens_per_s_per_gpu)
        return f"{head}: the most tokens/s per GPU: {best.words()}."

    def table(self) -> pd.DataFrame:
        """Return the picks per batch as the card's table (text cells, headed as shown)."""
        return pd.DataFrame([p.cells() for p in self.picks], columns=list(PICK_HEADERS.values()))

    def no_fit_line(self) -> str:
        """Return the batches at which no layout fits, in one line, or ''."""
        if not self.no_fit_batches:
            return ""
        names = ", ".join(str(b) for b in self.no_fit_batches)
        return f"No layout {self.unusable()} at batch {names}."

    def unusable(self) -> str:
        """Return why no layout answers at a batch, in words: none fits in memory, or those that
        fit are gaps (named)."""
        if not self.gaps:
            return "fits in memory"
        return f"both fits in memory and composes ({'; '.join(self.gaps)})"

    def header(self) -> str:
        """Return what the answer is for, in one line: model and GPUs, engine and its version,
        formats, load and the fit its parts come from (the provenance of its first pick)."""
        p = self.provenance
        shown = [*self.picks, *([self.target.pick] if self.target and self.target.pick else [])]
        counts = sorted({p.gpus for p in shown})
        gpus = (
            f"{counts[0]}x {self.hardware}"
            if len(counts) == 1
            else f"{self.hardware} ({', '.join(map(str, counts))} GPUs by layout)"
        )
        parts = [f"{self.model} on {gpus}"]
        parts += [str(p["engine"])] if p.get("engine") else []
        parts += [str(p["formats"])] if p.get("formats") else []
        parts += [str(p["load"])] if p.get("load") else []
        if p.get("fit_file"):
            parts.append(f"fit {p['fit_file']}")
        elif p.get("fit_source"):
            parts.append("fit: " + _clip(str(p["fit_source"]).split("; ")[0], 70))
        return "For: " + " | ".join(parts)

    def rests_lines(self, keep: tuple[str, ...] = SHORT_RESTS) -> list[str]:
        """Return what the answer rests on as short clauses: the fit's, then those starting with
        one of `keep`, each cut short (the whole list is `rests_on`, in answer.json)."""
        parts = clauses(self.rests_on.rstrip("."))
        kept = [parts[0], *(c for c in parts[1:] if c.startswith(keep))]
        return [_clip(c, 100) for c in dict.fromkeys(kept)]

    def short_rests(self) -> str:
        """Return what the answer rests on in a few plain clauses, on one line (the console's)."""
        line = "; ".join(self.rests_lines())
        return line if line.endswith("...") else line + "."

    def lines(self) -> list[str]:
        """Return the card as plain text lines (the console's last lines)."""
        width = {
            h: max([len(h), *(len(c[h]) for c in self.table().to_dict("records"))])
            for h in PICK_HEADERS.values()
        }
        rows = [p.cells() for p in self.picks]
        out = ["The answer: " + self.headline]
        out += [self.header()] if self.picks else []
        if rows:
            out.append("  ".join(h.rjust(w) for h, w in width.items()))
            out += ["  ".join(r[h].rjust(w) for h, w in width.items()) for r in rows]
        out += [self.no_fit_line()] if self.no_fit_batches else []
        out += [self.trust] if self.trust else []
        out.append("Rests on: " + self.short_rests())
        return out

    def to_dict(self) -> dict:
        """Return the card as answer.json holds it."""
        out = asdict(self)
        out["headline"] = self.headline
        out["header"] = self.header() if self.picks else ""
        for pick, saved in zip(self.picks, out["picks"], strict=True):
            saved["margin_pct"] = pick.margin_pct
        if self.target is not None:
            out["target"]["limit_ms"] = self.target.limit_ms
            out["target"]["words"] = self.target.words()
        return out

    @classmethod
    def from_dict(cls, saved: dict) -> AnswerCard:
        """Return the card answer.json holds."""
        extra = ("tpot_range_ms", "runner_up", "runner_up_tpot_ms")
        picks = [
            Pick(
                **{k: p[k] for k in PICK_FIELDS},
                **{k: tuple(p[k]) if isinstance(p[k], list) else p[k] for k in extra if k in p},
            )
            for p in saved.get("picks", [])
        ]
        target = saved.get("target")
        if target:
            pick = Pick(**{k: target["pick"][k] for k in PICK_FIELDS}) if target["pick"] else None
            keep = ("tpot_ms", "min_tokens_per_s_per_user", "met", "miss_ms")
            target = Target(pick=pick, **{k: target.get(k) for k in keep})
        return cls(
            model=saved["model"],
            hardware=saved["hardware"],
            picks=picks,
            no_fit_batches=list(saved.get("no_fit_batches", [])),
            target=target,
            gaps=list(saved.get("gaps", [])),
            rests_on=saved.get("rests_on", ""),
            trust=saved.get("trust", ""),
            provenance=dict(saved.get("provenance") or {}),
            check_error_pct=tuple(saved["check_error_pct"])
            if saved.get("check_error_pct")
            else None,
            commit=saved.get("commit", ""),
        )


# ---- building it ----------------------------------------------------------------------------


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    """Return a column as numbers (NaN where absent or not a number)."""
    if name not in frame:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[name], errors="coerce")


def fitting_rows(verdict: pd.DataFrame) -> pd.DataFrame:
    """Return the verdict rows that fit in memory and have a TPOT: the only candidates."""
    if verdict.empty or "fits_memory" not in verdict or "tpot_ms" not in verdict:
        return verdict.iloc[0:0]
    tpot = _col(verdict, "tpot_ms")
    return verdict[(verdict["fits_memory"].astype(str) == "yes") & (tpot > 0)]


def pick_of(rec: dict) -> Pick:
    """Return the card's figures of one verdict row."""
    tpot = float(rec["tpot_ms"])
    world = int(rec["world"]) if _finite(rec.get("world")) else 1
    batch = int(rec["batch"])
    per_gpu = rec.get("tokens_per_s_per_gpu")
    per_gpu = float(per_gpu) if _finite(per_gpu) else batch * 1000.0 / tpot / world
    return Pick(
        batch=batch,
        layout=str(rec["layout"]),
        gpus=world,
        tpot_ms=tpot,
        tokens_per_s_per_user=1000.0 / tpot,
        tokens_per_s_per_gpu=per_gpu,
        bound=str(rec.get("bound") or "bound missing"),
        x_floor=float(rec["x_floor"]) if _finite(rec.get("x_floor")) else None,
        tpot_range_ms=(
            (float(rec["tpot_low_ms"]), float(rec["tpot_high_ms"]))
            if _finite(rec.get("tpot_low_ms")) and _finite(rec.get("tpot_high_ms"))
            else None
        ),
    )


def gap_layouts(verdict: pd.DataFrame) -> list[str]:
    """Return, per reason, the layouts that fit in memory at some batch but compose no TPOT
    there: `communication unknown: tp2-pp1-ep1, tp4-pp2-ep1`, in the verdict's order."""
    if verdict.empty or "fits_memory" not in verdict or "tpot_ms" not in verdict:
        return []
    tpot = _col(verdict, "tpot_ms")
    rows = verdict[(verdict["fits_memory"].astype(str) == "yes") & tpot.isna()]
    by_reason: dict[str, list[str]] = {}
    for rec in rows.to_dict("records"):
        reason = str(rec.get("bound") or "gap").removeprefix("gap (").removesuffix(")")
        names = by_reason.setdefault(reason, [])
        if str(rec["layout"]) not in names:
            names.append(str(rec["layout"]))
    return [f"{reason}: {', '.join(names)}" for reason, names in by_reason.items()]


def per_batch(verdict: pd.DataFrame) -> tuple[list[Pick], list[int]]:
    """Return (per batch the fitting layout with the most tokens/s, i.e. the lowest TPOT at that
    batch; the batches at which no layout fits)."""
    fits = fitting_rows(verdict)
    picks, none = [], []
    for batch in sorted(_col(verdict, "batch").dropna().astype(int).unique()):
        rows = fits[_col(fits, "batch") == batch]
        if rows.empty:
            none.append(int(batch))
            continue
        ranked = rows.assign(_t=_col(rows, "tpot_ms")).sort_values("_t")
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
    """Return the target's answer: among the fitting rows within both bounds, the one with the
    most tokens/s per GPU; else the row closest to the TPOT they allow, and by how much it misses.
    None where neither bound is set."""
    if not tpot_ms and not min_per_user:
        return None
    fits = fitting_rows(verdict)
    empty = Target(tpot_ms, min_per_user, met=False, pick=None)
    if fits.empty:
        return empty
    limit = empty.limit_ms
    tpot = _col(fits, "tpot_ms")
    meets = fits[tpot <= limit + 1e-9]
    if not meets.empty:
        picks = [pick_of(r) for r in meets.to_dict("records")]
        best = max(picks, key=lambda p: (p.tokens_per_s_per_gpu, -p.tpot_ms))
        return Target(tpot_ms, min_per_user, met=True, pick=best)
    closest = pick_of(fits.loc[tpot.idxmin()].to_dict())
    return Target(tpot_ms, min_per_user, met=False, pick=closest, miss_ms=closest.tpot_ms - limit)


# ---- what it rests on ------------------------------------------------------------------------


def input_items(text: str) -> list[str]:
    """Return a verdict row's `inputs` split into its items: on '; ' outside brackets, so a
    label's own '; ' (inside its parentheses) stays in it, and a clause with no key of its own
    stays with the item before it."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == ";" and depth == 0 and text[i + 1 : i + 2] == " ":
            items.append(text[start:i].strip())
            start = i + 2
    items.append(text[start:].strip())
    out: list[str] = []
    for item in (x for x in items if x):
        # An item with no key of its own ('the bf16 step's efficiency applied ...') goes on
        # saying the one before it.
        if out and not re.search(r"[:=]", item):
            out[-1] += "; " + item
        else:
            out.append(item)
    return out


def _key(item: str) -> str:
    """Return an input item's key: the text before its first ':' or '='."""
    return re.split(r"[:=]", item, maxsplit=1)[0].strip()


def _value(item: str) -> str:
    """Return an input item's value: the text after its first ':' or '='."""
    parts = re.split(r"[:=]", item, maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else item


def fit_labels(inputs: str) -> list[str]:
    """Return the fit labels ('launch-aware fit on ... at batches [...]', with where it was
    shipped from) a row's inputs name, each once, in order."""
    found = []
    for m in re.finditer(r"\((launch-aware fit on )", inputs):
        depth, i = 1, m.end()
        while i < len(inputs) and depth:
            depth += {"(": 1, ")": -1}.get(inputs[i], 0)
            i += 1
        label = inputs[m.start() + 1 : i - 1]
        if label not in found:
            found.append(label)
    return found


def _fit_words(inputs: str) -> str:
    """Return which fit the parts rest on, or that they are at the roofline alone and why."""
    labels = fit_labels(inputs)
    if labels:
        return "parts composed from the " + " and the ".join(labels)
    for item in input_items(inputs):
        if item.startswith("parts at the target's roofline"):
            return item
    return "parts at the target's roofline alone (no fit named in the verdict's inputs)"


def collective_words(inputs: str) -> str:
    """Return whether the collectives are modelled or measured, and where from."""
    for item in input_items(inputs):
        if _key(item) == "interconnect":
            value = _value(item)
            if "measured on" in value:
                return f"collectives measured ({value})"
            what, _, where = value.partition(" (")
            where = f"from {where.rstrip(')')} " if where else ""
            return f"collectives modelled {where}({what}), not measured"
    return "collectives: not named in the verdict's inputs"


def _varying(rows: list[dict], key: str) -> str:
    """Return one named input item over the picked rows: once where all agree, else per batch
    (first and last)."""
    values = []
    for rec in rows:
        found = [x for x in input_items(str(rec.get("inputs") or "")) if _key(x).startswith(key)]
        if found:
            values.append((rec["batch"], "; ".join(found)))
    if not values:
        return ""
    distinct = list(dict.fromkeys(v for _, v in values))
    if len(distinct) == 1:
        return distinct[0]
    (b0, first), (b1, last) = values[0], values[-1]
    return f"{first} at batch {b0} ... {_value(last)} at batch {b1}"


def _column_words(rows: list[dict]) -> list[str]:
    """Return the host term and kernel list where the verdict carries them as columns."""
    out = []
    host = [float(r["host_ms"]) for r in rows if _finite(r.get("host_ms"))]
    if host:
        span = _num(min(host)) if min(host) == max(host) else f"{_num(min(host))}-{_num(max(host))}"
        out.append(f"host term {span} ms per step (verdict host_ms)")
    lists = list(dict.fromkeys(str(r["kernel_list"]) for r in rows if r.get("kernel_list")))
    lists = [x for x in lists if x and x != "nan"]
    if lists:
        out.append("kernel list " + ", ".join(lists))
    return out


def _check_words(check: pd.DataFrame, labels: list[str]) -> str:
    """Return what the check says of this fit: the held-out error and over which steps, or that
    the check tests another fit (one made on another device) and so says nothing of this one."""
    if check is None or check.empty or "composed_error_pct" not in check:
        return "check: no whole step measured"
    err = _held_out_errors(check)
    device = ", ".join(sorted(set(check.get("device", pd.Series(["?"])).dropna().astype(str))))
    checked = (
        set(check["composed_label"].dropna().astype(str)) if "composed_label" in check else set()
    )
    same = any(lab.split(";")[0] in c for lab in labels for c in checked)
    if labels and not same:
        return (
            f"check: none of this fit (the {len(check)} whole steps measured on {device} test a "
            "fit made there, not this one)"
        )
    if err.empty:
        return f"check: no held-out whole step on {device}"
    low, high = f"{err.min():+.0f}%", f"{err.max():+.0f}%"
    spread = low if low == high else f"{low} to {high}"
    return (
        f"check: composed {spread} off {len(err)} held-out whole steps measured on {device} "
        "(one rank each, collectives left out)"
    )


def _engine_words(engines: pd.DataFrame | None, model: str, hardware: str) -> str:
    """Return the engine check: the engines' published TPOT beside the composition (same model,
    the same hardware first), each ratio named as composed over engine."""
    if engines is None or engines.empty or "composed_over_engine" not in engines:
        return "engine check: none cited"
    rows = engines[pd.to_numeric(engines["composed_over_engine"], errors="coerce").notna()]
    if "model" in rows:
        same = rows[rows["model"].astype(str) == model]
        rows = same if not same.empty else rows
    if "hardware" in rows:
        rows = rows.assign(_here=rows["hardware"].astype(str) == hardware)
        rows = rows.sort_values("_here", ascending=False, kind="stable")
    parts = [
        f"{r.get('engine', '?')} {r.get('model', '?')} {r.get('layout', '?')} on "
        f"{r.get('hardware', '?')} at batch {r.get('batch', '?')}: composed "
        f"{_num(r.get('composed_tpot_ms'))} ms vs its {_num(r.get('engine_tpot_ms'))} ms "
        f"({float(r['composed_over_engine']):.2f}x)"
        for r in rows.head(2).to_dict("records")
    ]
    more = f" (+{len(rows) - 2} more in engines.csv)" if len(rows) > 2 else ""
    BAND, corpus_summary = references.BAND, references.corpus_summary

    got = corpus_summary(engines)
    corpus = (
        f"{got['in_band']} of {got['composed']} held-out engine figures within "
        f"{BAND[0]}-{BAND[1]}x (median |error| {got['median_abs_error_pct']:.0f}%"
        + (f"; {got['contradicted']} contradicted by its own source" if got["contradicted"] else "")
        + "); "
        if got.get("composed")
        else ""
    )
    return (
        "engine check: " + corpus + "; ".join(parts) + more if parts else "engine check: none cited"
    )


def rests_on(
    verdict: pd.DataFrame,
    picks: list[Pick],
    check: pd.DataFrame | None,
    engines: pd.DataFrame | None,
) -> str:
    """Return the one line naming what the picks rest on: the fit and where it was measured, the
    expert GEMMs' efficiency, the kernel list and host term where named, modelled or measured
    collectives, the check of this fit and the engines' figures beside it."""
    fits = fitting_rows(verdict)
    chosen = [
        r
        for p in picks
        for r in fits.to_dict("records")
        if str(r["layout"]) == p.layout and int(r["batch"]) == p.batch
    ]
    if not chosen:
        return "nothing: no layout is composed"
    inputs = str(chosen[0].get("inputs") or "")
    labels = fit_labels(inputs)
    model = str(chosen[0].get("model", "?"))
    hardware = str(chosen[0].get("hardware", "?"))
    parts = [_fit_words(inputs)]
    parts += [x for x in (_varying(chosen, key) for key in NAMED_ITEMS) if x]
    named = {p.split(":")[0] for p in parts}
    parts += [
        w
        for w in _column_words(chosen)
        if " ".join(w.split()[:2]) not in named and w.split()[0] not in named
    ]
    parts.append(collective_words(inputs))
    if check is not None:  # None: composed before the whole steps were checked (card_json)
        parts.append(_check_words(check, labels))
    parts.append(_engine_words(engines, model, hardware))
    return "; ".join(parts) + "."


def build(
    settings: RootSettings,
    verdict: pd.DataFrame,
    check: pd.DataFrame | None = None,
    engines: pd.DataFrame | None = None,
) -> AnswerCard:
    """Return the answer card of a verdict (with its check and the engines' figures), under the
    question's target where settings ask one."""
    asked = target_of(settings)
    picks, none = per_batch(verdict)
    target = choose(verdict, asked.tpot_target_ms, asked.min_tokens_per_s_per_user)
    basis = list(picks)
    if target is not None and target.pick is not None and target.pick not in basis:
        basis = [target.pick, *basis]
    first = verdict.iloc[0] if len(verdict) else {}
    model, hardware = settings.model.name, settings.hardware.name
    engine, version = settings.engine.name, settings.engine.version
    trust = references.trust_words(engines, model, hardware, engine) if picks else ""
    return AnswerCard(
        model=str(first.get("model", model)),
        hardware=str(first.get("hardware", hardware)),
        picks=picks,
        no_fit_batches=none,
        target=target,
        gaps=gap_layouts(verdict),
        check_error_pct=_check_range(check),
        commit=git_commit(),
        rests_on=rests_on(verdict, basis, check, engines),
        trust=trust,
        provenance=_with_fit(_with_engine(_provenance(verdict, basis), engine, version), settings),
    )


def _provenance(verdict: pd.DataFrame, picks: list[Pick]) -> dict:
    """Return the provenance columns of the first pick's verdict row ({} where there is none)."""
    if not picks or verdict.empty or "layout" not in verdict:
        return {}
    first = picks[0]
    rows = verdict[
        (verdict["layout"].astype(str) == first.layout) & (_col(verdict, "batch") == first.batch)
    ]
    if rows.empty:
        return {}
    row = rows.iloc[0]
    out = {c: str(row[c]) for c in PROVENANCE_COLUMNS if c in row and row[c] == row[c]}
    if "weight_dtype" in row and "kv_dtype" in row:
        out["formats"] = f"{row['weight_dtype']} weights, {row['kv_dtype']} KV cache"
    if "engine" in row and row["engine"] == row["engine"]:
        out["engine"] = str(row["engine"])
    return out


def _with_engine(provenance: dict, engine: str, version: str) -> dict:
    """Return the provenance with the engine named with its version (the card's header)."""
    if not provenance:
        return provenance
    name = provenance.get("engine", engine)
    return {**provenance, "engine": f"engine {name} {version.split(' (')[0]}".strip()}


def _held_out_errors(check: pd.DataFrame) -> pd.Series:
    """Return the composed error (%) of the check's held-out rows (every row where unmarked)."""
    held = check
    if "held_out" in check:
        held = check[check["held_out"].astype(str).str.lower() == "true"]
    return pd.to_numeric(held["composed_error_pct"], errors="coerce").dropna()


def _check_range(check: pd.DataFrame | None) -> tuple[float, float] | None:
    """Return the held-out check's composed error range in percent, or None."""
    if check is None or check.empty or "composed_error_pct" not in check:
        return None
    err = _held_out_errors(check)
    return (round(float(err.min()), 2), round(float(err.max()), 2)) if len(err) else None


def _with_fit(provenance: dict, settings: RootSettings) -> dict:
    """Return the provenance with the shipped fit file its parts come from, where one is set."""
    fit = settings.deployment.fit_file
    if not provenance or not fit or "shipped as" not in provenance.get("fit_source", ""):
        return provenance
    return {**provenance, "fit_file": str(fit)}


def target_of(settings: RootSettings) -> question.Target:
    """Return the question's target a resolved config asks."""
    return question.target(settings)


def card_json(card: AnswerCard) -> str:
    """Return the card as JSON text (answer.json's, and the verdict step's card before its
    check)."""
    return json.dumps(card.to_dict(), indent=1) + "\n"


def write(card: AnswerCard, path: str | Path) -> None:
    """Write the card as answer.json."""
    write_text(str(path), card_json(card))


# What the console adds under the card the verdict step writes, before the check has run.
CHECK_TO_COME = (
    "Check: the composition's check against the measured whole steps comes with the report "
    "(it waits for every whole step; the answer does not)."
)


def early_lines(path: str | Path) -> list[str]:
    """Return the console's lines for the card the verdict step wrote, before its check."""
    lines = console_lines(path)
    return lines + [CHECK_TO_COME] if lines and lines[0].startswith("The answer") else lines


def console_lines(path: str | Path) -> list[str]:
    """Return the card answer.json holds as the console's closing lines, or one line saying
    why there is none."""
    try:
        return AnswerCard.from_dict(json.loads(Path(path).read_text())).lines()
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"no answer card at {path} ({type(err).__name__}: {err})"]


def _row_cells(rec: dict) -> str:
    """Return one verdict row as the card's words: layout, batch, TPOT and its band, rates."""
    pick = pick_of(rec)
    band = pick.tpot_range_ms
    band_words = f" ({_num(band[0])}-{_num(band[1])})" if band else ""
    return (
        f"{pick.layout} at batch {pick.batch}: TPOT {_num(pick.tpot_ms)} ms{band_words}, "
        f"{_num(pick.tokens_per_s_per_user)} tok/s per user, "
        f"{_num(pick.tokens_per_s_per_gpu)} tok/s per GPU, {pick.bound}"
    )


def top_lines(verdict: pd.DataFrame, n: int, target: Target | None) -> list[str]:
    """Return the n composed rows with the most tokens/s per GPU that meet the target (all rows
    where none is asked), best first, as numbered lines under a heading."""
    fits = fitting_rows(verdict)
    limit = target.limit_ms if target is not None else None
    if limit:
        fits = fits[_col(fits, "tpot_ms") <= limit + 1e-9]
    where = f" at {target.asked()}" if target is not None and limit else ""
    if fits.empty:
        return [f"Top {n}{where}: no composed row meets it."]
    ranked = fits.assign(_g=_col(fits, "tokens_per_s_per_gpu")).sort_values(
        ["_g", "tpot_ms"], ascending=[False, True]
    )
    rows = ranked.head(n).to_dict("records")
    return [f"Top {len(rows)} by tokens/s per GPU{where}:"] + [
        f"  {i}. {_row_cells(r)}" for i, r in enumerate(rows, 1)
    ]


def pareto_lines(verdict: pd.DataFrame) -> list[str]:
    """Return the Pareto frontier of the composed rows (no other row has both more tokens/s
    per user and more tokens/s per GPU), fastest per user first, as lines under a heading."""
    fits = fitting_rows(verdict)
    if fits.empty:
        return ["Pareto frontier: no composed row."]
    user = 1000.0 / _col(fits, "tpot_ms")
    gpu = _col(fits, "tokens_per_s_per_gpu")
    order = sorted(range(len(fits)), key=lambda i: (-user.iloc[i], -gpu.iloc[i]))
    front, best_gpu = [], -math.inf
    for i in order:
        if gpu.iloc[i] > best_gpu:
            front.append(fits.iloc[i].to_dict())
            best_gpu = gpu.iloc[i]
    return ["Pareto frontier (tok/s per user against tok/s per GPU; fastest per user first):"] + [
        f"  {_row_cells(r)}" for r in front
    ]
