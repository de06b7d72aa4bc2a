"""The HTML report: the one ReportData as a self-contained page (inline CSS, base64 PNGs, no
scripts, no network) that fits a 1,280 px window."""

import base64
import html
import re

import pandas as pd

from tilesweep import package_data
from tilesweep.answer_card import REPORT_RESTS, AnswerCard
from tilesweep.report.document import Bullets, Code, Figure, Heading, ReportData, Table, Text
from tilesweep.report.formatting import fmt_value

DATA_FILES = ("templates/report.css", "templates/report.html", "templates/report_card.html")
# The report's one style sheet, inline in its <head>, the page around the sections and the card.
CSS = "\n" + package_data.data_file("tilesweep", DATA_FILES[0])
PAGE, CARD = (package_data.data_file("tilesweep", name).rstrip("\n") for name in DATA_FILES[1:])
WRAP_COLUMNS = {"reason", "inputs_json", "value"}
TEXT_COLUMNS = {"reason", "kernel", "runner", "best_runner", "best_tile", "best_baseline"}
# The cell colours of the verdict grid each legend word stands for (its colour key).
SWATCHES = {
    "memory, math, communication": ("memory", "math", "communication"),
    "launch": ("launch",),
    "mixed": ("mixed",),
    "kernel-limited": ("kernel-limited",),
    "does not fit (N GB short)": ("does",),
}
# The verdict cell classes: a cell's first word (bound, or `does` not fit), else `unknown`.
VERDICT_CLASSES = {*(kind for kinds in SWATCHES.values() for kind in kinds), "other"}


def esc(value: object) -> str:
    """Return value as HTML-escaped text."""
    return html.escape(str(value), quote=True)


def prose(text: object) -> str:
    """Return text as HTML-escaped prose, each `name` in backticks set as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def img(png: bytes, alt: str) -> str:
    """Return an <img> element holding the PNG inline as base64."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _cell(column: str, value: object, style: str) -> str:
    """Return one <td>: escaped text, a badge for the source, a verdict colour in the pivot."""
    text = fmt_value(value)
    if style == "verdict" and column.startswith("batch ") and text:
        head, _, numbers = text.partition("\n")
        word = head.split(" ")[0]
        kind = word if word in VERDICT_CLASSES else "unknown"
        lines = "<br>".join(esc(line) for line in numbers.split("\n"))
        return f'<td class="v-{kind}">{esc(head)}<small>{lines}</small></td>'
    body = esc(text)
    if column == "source" and text in ("model", "measured", "composed"):
        body = f'<span class="badge {text}">{body}</span>'
    kind = ' class="text"' if column in TEXT_COLUMNS or isinstance(value, str) else ""
    kind = ' class="text wrap"' if column in WRAP_COLUMNS else kind
    return f"<td{kind}>{body}</td>"


def table(
    frame: pd.DataFrame,
    columns: list[str] | None = None,
    style: str = "",
    empty: str = "(no rows)",
) -> str:
    """Return an HTML table of the given columns (those present) in its own scrolling box."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    if frame.empty or not cols:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for rec in frame[cols].to_dict("records"):
        source = rec.get("source") if "source" in rec else None
        cls = f' class="src-{esc(source)}"' if style and source is not None else ""
        cells = "".join(_cell(c, rec[c], style) for c in cols)
        body.append(f"<tr{cls}>{cells}</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _legend(items: tuple[tuple[str, str], ...], style: str = "") -> str:
    rows = ""
    for word, meaning in items:
        kinds = SWATCHES.get(word, ()) if style == "verdict" else ()
        keys = "".join(f'<span class="swatch v-{k}"></span>' for k in kinds)
        rows += f"<dt>{keys}{esc(word)}:</dt> <dd>{prose(meaning)}</dd>"
    return f'<dl class="legend">{rows}</dl>'


def _table(item: Table) -> str:
    note = f"<p>{prose(item.note)}</p>" if item.note else ""
    body = table(item.frame, item.shown(), item.style, empty=item.empty)
    if item.legend:
        body = f'<div class="with-legend">{body}{_legend(item.legend, item.style)}</div>'
    body = note + body
    if item.collapsed:
        return f"<details><summary>{esc(item.title)}</summary>{body}</details>"
    return (f"<h4>{esc(item.title)}</h4>" if item.title else "") + body


# How each kind of block is written; figures need the PNG bytes, so they get the ReportData.
BLOCKS = {
    Text: lambda item, data: f"<p>{prose(item.text)}</p>",
    Bullets: lambda item, data: (
        f'<ul class="headlines">{"".join(f"<li>{prose(x)}</li>" for x in item.items)}</ul>'
        if item.items
        else ""
    ),
    Heading: lambda item, data: f"<h3>{esc(item.text)}</h3>",
    Figure: lambda item, data: (
        f"<figure>{img(data.figures[item.name], item.alt)}"
        f"<figcaption>{prose(item.caption)}</figcaption></figure>"
    ),
    Code: lambda item, data: (
        f"<details><summary>{esc(item.title)}</summary><pre>{esc(item.text)}</pre></details>"
    ),
    Table: lambda item, data: _table(item),
}


def card_html(card: AnswerCard) -> str:
    """Return the answer card: headline, picks per batch, where nothing fits, what it rests on."""
    notes = "".join(f"<p>{esc(line)}</p>" for line in card.notes() if line)
    rests = "".join(f"<li>{esc(line)}</li>" for line in card.rests_lines(REPORT_RESTS))
    said = {"table": table(card.table()) if card.picks else "", "notes": notes, "rests": rests}
    return CARD.format(headline=esc(card.headline), **said)


def render(data: ReportData) -> str:
    """Return the whole report as one self-contained HTML page."""
    present = {s.key for s in data.sections}
    nav = "".join(
        f'<a href="#{esc(key)}">{esc(label)}</a>' for key, label in data.nav if key in present
    )
    body = "".join(
        f'<section id="{s.key}"><h2>{esc(s.title)}</h2>'
        + "".join(BLOCKS[type(b)](b, data) for b in s.blocks)
        + "</section>"
        for s in data.sections
    )
    card = card_html(data.card) if data.card is not None else ""
    said = {"title": esc(data.title), "intro": esc(data.intro), "card": card}
    return PAGE.format(css=CSS, nav=nav, body=body, **said) + "\n"
