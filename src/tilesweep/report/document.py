"""The document model both reports render: blocks (text, bullets, headings, tables, figures,
code), sections and the one ReportData; report/markdown.py and report/html.py only render it,
so the two cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from tilesweep.answer_card import AnswerCard

# Every figure: its file name under plots/, its alt text and its caption.
FIGURES = {
    "pareto": (
        "tokens/s per GPU against tokens/s per user, per layout and batch that fits",
        "Each point is one layout at one batch that fits in memory, as the verdict composes it: "
        "tokens/s per user (1,000 / TPOT in ms) across, tokens/s per GPU (all sequences' "
        "tokens/s over the layout's GPUs) up; its label is the batch. The wide grey line joins "
        "the points no other point beats on both (the frontier): a deployment is chosen on it. "
        "Points of two layouts that coincide are drawn one inside the other, under one label "
        "that says how many layouts it stands for.",
    ),
    "verdict_split": (
        "step split per layout and batch",
        "Time per output token split into memory-bound parts, math-bound parts, communication "
        "and launch (kernels x their measured fixed cost), per layout and batch of the named "
        "deployment, as composed (see each row's source); the black tick is the step's "
        "roofline floor (floor_ms).",
    ),
    "check_error": (
        "composed against measured whole steps",
        "Per layout and batch, how far the composition of the depth-reduced model from its parts "
        "(blue; calibrated on TP1 only) and the roofline alone (orange, dotted) lie from the "
        "measured whole decode step on the device at hand, in percent of its median (0: exact; "
        "dashed: +-10%); grey: the measured p10..p90 band around that median.",
    ),
    "engine_tpot": (
        "composed against engines' measured TPOT, log-log, per GPU",
        "Each point is a time per output token an engine measured and published (across) beside "
        "this sweep's composition of the same deployment (up), log-log, one panel per GPU; marker: "
        "the engine, colour: the model. Grey: composed/engine within 0.75-1.33x, the band the "
        "engine check counts; dashed: equal. Figures the composition has no time for are in the "
        "table only.",
    ),
    "launch_smem": (
        "shared memory per kernel and target",
        "Bars: shared memory per block (colour: fits by default / after opt-in / not); hatched: "
        "the part outside CUTLASS's mainloop (epilogue and the rest); diamonds: the hand "
        "estimate; lines: default, opt-in and per-SM limits. One panel per target.",
    ),
    "decode_time": (
        "decode time and bandwidth against tokens per expert",
        "Time per grouped GEMM and achieved bandwidth against tokens per expert, one row of "
        "panels per dtype, at most six runners per axis (the fastest, with the best torch "
        "baseline; the rest are in the decode table); the dashed red line is the measured copy "
        "bandwidth.",
    ),
    "decode_roofline": (
        "decode roofline",
        "Achieved TFLOPS against arithmetic intensity on the measured roofline, per dtype, at "
        "most six runners per axis; the top axis gives the tokens per expert of each gate_up "
        "point.",
    ),
    "collective_bandwidth": (
        "collective bus bandwidth and time against message size",
        "Bus bandwidth and time against message size per collective and group size; dotted: the "
        "latency floor (the smallest message's time). The table also gives the least-squares "
        "fit time = latency + bytes / bandwidth.",
    ),
}


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A list of one-line findings."""

    items: list[str]


@dataclass(frozen=True)
class Heading:
    """A sub-heading inside a section."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table: the frame, the columns shown (those present), and how it is introduced.

    `style` names how the HTML page marks rows: "source" (measured vs model) or "verdict" (the
    summary pivot, cells coloured by verdict); Markdown renders every style the same way.
    `legend` defines the words its cells use, (word, meaning) each: the HTML page sets it beside
    the table, Markdown under it.
    """

    frame: pd.DataFrame
    columns: list[str] | None = None
    title: str = ""
    note: str = ""
    empty: str = "(no rows)"
    collapsed: bool = False
    style: str = ""
    legend: tuple[tuple[str, str], ...] = ()

    def shown(self) -> list[str]:
        """Return the columns this table shows: those asked for that the frame has."""
        return [c for c in (self.columns or list(self.frame.columns)) if c in self.frame.columns]


@dataclass(frozen=True)
class Figure:
    """One of FIGURES (or a tuner's own, which gives its alt text), by name; `text`, where
    given, is its caption generated from what its panels draw, in place of the general one."""

    name: str
    text: str = ""
    alt_text: str = ""

    @property
    def alt(self) -> str:
        """Return the figure's alt text."""
        return self.alt_text or FIGURES[self.name][0]

    @property
    def caption(self) -> str:
        """Return the figure's caption: the generated one, else the general one."""
        return self.text or FIGURES[self.name][1]


@dataclass(frozen=True)
class Code:
    """A block of preformatted text under a title (collapsed in HTML)."""

    title: str
    text: str


Block = Text | Bullets | Heading | Table | Figure | Code


@dataclass(frozen=True)
class Section:
    """One section of the report: key and title from SECTIONS, and its blocks in order."""

    key: str
    title: str
    blocks: list[Block]


@dataclass(frozen=True)
class ReportData:
    """Everything both reports show: title, the answer card (first on screen), intro, sections,
    the figures' PNG bytes and the sections the HTML page's navigation names."""

    title: str
    intro: str
    provenance: dict
    sections: list[Section]
    card: AnswerCard | None = None
    figures: dict[str, bytes] = field(default_factory=dict)
    nav: list[tuple[str, str]] = field(default_factory=list)  # (key, label) the page links to

    def tables(self) -> list[Table]:
        """Return every table of the report, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]

    def figure_names(self) -> list[str]:
        """Return the names of the figures the sections show, in order."""
        return [b.name for s in self.sections for b in s.blocks if isinstance(b, Figure)]
