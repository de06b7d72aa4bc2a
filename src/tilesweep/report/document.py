"""The document model both reports render (report/markdown.py, report/html.py), so the two
cannot disagree."""

from dataclasses import dataclass, field

import pandas as pd

from tilesweep import package_data
from tilesweep.answer_card import AnswerCard

DATA_FILES = ("data/figures.yaml", "data/report_texts.yaml")


# Every figure: its file name under plots/, its alt text, caption and report category.
FIGURES = package_data.data_texts("tilesweep", DATA_FILES[0], ("alt", "caption", "category"))
# The sections' fixed texts, by key ({name}: filled in where used).
TEXTS = package_data.data_typed("tilesweep", DATA_FILES[1], "texts", dict[str, str])
# Every report's sections in order: key -> (title, the short name the navigation links by).
SECTION_TITLES = package_data.data_typed(
    "tilesweep", DATA_FILES[1], "sections", dict[str, tuple[str, str]]
)


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A list of one-line findings."""

    items: list[str]


class Heading(Text):
    """A sub-heading inside a section."""


@dataclass(frozen=True)
class Table:
    """A table: the frame, the columns shown, how it is introduced, its HTML style and legend."""

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
    """One of FIGURES (or a tuner's own) by name; `text` a caption made from its panels."""

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
    """One section of the report: key and title from SECTION_TITLES, and its blocks in order."""

    key: str
    title: str
    blocks: list[Block]


@dataclass(frozen=True)
class ReportData:
    """Everything both reports show: title, card, intro, sections, figures and navigation."""

    title: str
    intro: str
    provenance: dict
    sections: list[Section]
    card: AnswerCard | None = None
    figures: dict[str, bytes] = field(default_factory=dict)
    nav: list[tuple[str, str]] = field(default_factory=list)  # (key, label) the page links to
