"""The answer card: the sweep's answer as one data object, built once from the verdict, its check
and the engines' figures. It ends the console of every sweep, opens both reports and is written
as answer.json, so the three cannot disagree."""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from pydantic import TypeAdapter

from tilesweep import answer_picks, references
from tilesweep.answer_rests import check_range, rests_on
from tilesweep.columns import PROVENANCE_COLUMNS
from tilesweep.io import write_text
from tilesweep.plan import row_inputs
from tilesweep.provenance import git_commit
from tilesweep.settings import RootSettings

# The clauses of `rests_on` the console's short form keeps (after the fit's), by key.
SHORT_RESTS = ("expert GEMMs", "kernel list", "collectives", "check", "engine check")
# The clauses the report's card keeps (after the fit's): one line each, three in all.
REPORT_RESTS = ("check", "engine check")


@dataclass(frozen=True)
class AnswerCard:
    """The answer: deployment, picks per batch, the target's pick, no-fit batches, rests on."""

    model: str
    hardware: str
    picks: list[answer_picks.Pick]
    no_fit_batches: list[int] = field(default_factory=list)
    target: answer_picks.Target | None = None
    # Layouts that fit in memory but compose no TPOT (a labelled gap: `layout (bound)`).
    gaps: list[str] = field(default_factory=list)
    rests_on: dict[str, str] = field(default_factory=dict)  # answer_rests.rests_on
    trust: str = ""  # how far to trust the picks: the engine corpus' error on their family
    # What the picks rest on, as data (columns.PROVENANCE_COLUMNS of the first pick's row).
    provenance: dict = field(default_factory=dict)
    # Every input of the first pick's row with its source, item by item (plan.row_inputs).
    inputs: dict[str, str] = field(default_factory=dict)
    # The check's held-out error range (composed vs measured whole steps, %), where checked.
    check_error_pct: tuple[float, float] | None = None
    commit: str = ""  # the commit that composed it (provenance.git_commit)

    @property
    def headline(self) -> str:
        """Return the card's first sentence: the target's answer, else the best pick, else none."""
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
        return pd.DataFrame(
            [p.cells() for p in self.picks], columns=list(answer_picks.PICK_HEADERS.values())
        )

    def unusable(self) -> str:
        """Return why no layout answers at a batch: none fits, or those that fit are gaps."""
        if not self.gaps:
            return "fits in memory"
        return f"both fits in memory and composes ({'; '.join(self.gaps)})"

    def notes(self) -> list[str]:
        """Return the lines under the picks: where no layout fits, and those not composed, or ''."""
        batches, gaps = ", ".join(str(b) for b in self.no_fit_batches), "; ".join(self.gaps)
        return [
            f"No layout {self.unusable()} at batch {batches}." if batches else "",
            f"Not composed (left out of the picks): {gaps}." if gaps and self.picks else "",
        ]

    def header(self) -> str:
        """Return what the answer is for, in one line (the provenance of its first pick)."""
        p = self.provenance
        shown = [*self.picks, *([self.target.pick] if self.target and self.target.pick else [])]
        counts = sorted({p.gpus for p in shown})
        gpus = (
            f"{counts[0]}x {self.hardware}"
            if len(counts) == 1
            else f"{self.hardware} ({', '.join(map(str, counts))} GPUs by layout)"
        )
        parts = [
            f"{self.model} on {gpus}",
            *(str(p[k]) for k in ("engine", "formats", "load") if p.get(k)),
        ]
        if p.get("fit_file"):
            parts.append(f"fit {p['fit_file']}")
        elif p.get("fit_source"):
            parts.append(
                "fit: " + answer_picks.clip(self.inputs.get("fit") or str(p["fit_source"]), 70)
            )
        return "For: " + " | ".join(parts)

    def rests_lines(self, keep: tuple[str, ...] = SHORT_RESTS) -> list[str]:
        """Return the fit's clause, then those `keep` names, each cut short."""
        first, *rest = self.rests_on.items() or [("fit", "")]
        kept = [first[1], *(words for key, words in rest if key in keep)]
        return [answer_picks.clip(c, 100) for c in dict.fromkeys(kept)]

    def short_rests(self) -> str:
        """Return what the answer rests on in a few plain clauses, on one line (the console's)."""
        line = "; ".join(self.rests_lines())
        return line if line.endswith("...") else line + "."

    def lines(self) -> list[str]:
        """Return the card as plain text lines (the console's last lines)."""
        out = ["The answer: " + self.headline]
        if self.picks:
            table = self.table()
            width = {h: max([len(h), *table[h].str.len()]) for h in table}
            out.append(self.header())
            out += [
                "  ".join(r.rjust(w) for r, w in zip(row, width.values(), strict=True))
                for row in [list(width), *table.itertuples(index=False)]
            ]
        out += [line for line in [*self.notes(), self.trust] if line]
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
    def from_dict(cls, saved: dict) -> "AnswerCard":
        """Return the card answer.json holds (the words to_dict adds are read back as figures)."""
        return TypeAdapter(cls).validate_python(saved)


def build(
    settings: RootSettings,
    verdict: pd.DataFrame,
    check: pd.DataFrame | None = None,
    engines: pd.DataFrame | None = None,
) -> AnswerCard:
    """Return the answer card of a verdict, under the question's target where settings ask one."""
    asked = settings.question.target
    picks, none = answer_picks.per_batch(verdict)
    target = answer_picks.choose(verdict, asked.tpot_target_ms, asked.min_tokens_per_s_per_user)
    basis = list(picks)
    if target is not None and target.pick is not None and target.pick not in basis:
        basis = [target.pick, *basis]
    first = verdict.iloc[0] if len(verdict) else {}
    model, hardware = settings.model.name, settings.hardware.name
    trust = references.trust_words(engines, model, hardware, settings.engine.name) if picks else ""
    row = _first_row(verdict, basis)
    inputs = row_inputs.of(row) if row is not None else {}
    return AnswerCard(
        model=str(first.get("model", model)),
        hardware=str(first.get("hardware", hardware)),
        picks=picks,
        no_fit_batches=none,
        target=target,
        gaps=answer_picks.gap_layouts(verdict),
        check_error_pct=check_range(check),
        commit=git_commit(),
        rests_on=rests_on(verdict, basis, check, engines),
        trust=trust,
        provenance=_provenance(row, settings, inputs),
        inputs=inputs,
    )


def _first_row(verdict: pd.DataFrame, picks: list[answer_picks.Pick]) -> pd.Series | None:
    if not picks or verdict.empty or "layout" not in verdict:
        return None
    first = picks[0]
    rows = verdict[
        (verdict["layout"].astype(str) == first.layout)
        & (answer_picks.numeric(verdict, "batch") == first.batch)
    ]
    return None if rows.empty else rows.iloc[0]


def _provenance(row: pd.Series | None, settings: RootSettings, inputs: dict[str, str]) -> dict:
    """Return the first pick's row's provenance: its columns, formats, engine, shipped fit."""
    if row is None:
        return {}
    out = {c: str(row[c]) for c in PROVENANCE_COLUMNS if c in row and row[c] == row[c]}
    if "weight_dtype" in row and "kv_dtype" in row:
        out["formats"] = f"{row['weight_dtype']} weights, {row['kv_dtype']} KV cache"
    if "engine" in row and row["engine"] == row["engine"]:
        out["engine"] = str(row["engine"])
    if not out:
        return out
    version = settings.engine.version.split(" (")[0]
    out["engine"] = f"engine {out.get('engine', settings.engine.name)} {version}".strip()
    if settings.deployment.fit_file and "fit file" in inputs:
        out["fit_file"] = str(settings.deployment.fit_file)
    return out


def card_json(card: AnswerCard) -> str:
    """Return the card as JSON text."""
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
    """Return the card answer.json holds as console lines, or one line saying why there is none."""
    try:
        return AnswerCard.from_dict(json.loads(Path(path).read_text())).lines()
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"no answer card at {path} ({type(err).__name__}: {err})"]
