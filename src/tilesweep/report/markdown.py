"""The Markdown report: renders the one ReportData (see report/document.py) as GitHub Markdown."""

import pandas as pd

from tilesweep.answer_card import REPORT_RESTS, AnswerCard
from tilesweep.report.document import Bullets, Code, Figure, Heading, ReportData, Table, Text
from tilesweep.report.formatting import fmt_value


def md_table(frame: pd.DataFrame, columns: list[str], empty: str = "(no rows)") -> str:
    """Return a GitHub-style Markdown table of the given columns (line breaks become <br>)."""
    cols = [c for c in columns if c in frame.columns]
    if frame.empty or not cols:
        return f"_{empty}_\n"
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for rec in frame[cols].to_dict("records"):
        cells = (fmt_value(rec[c]).replace("|", "/").replace("\n", "<br>") for c in cols)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def provenance_line(provenance: dict) -> str:
    """Return the provenance as one line: 'key value, ...' (nested mappings flattened)."""
    return ", ".join(
        f"{key}: " + "; ".join(f"{k} {v}" for k, v in value.items())
        if isinstance(value, dict)
        else f"{key} {value}"
        for key, value in provenance.items()
    )


def _table(item: Table) -> str:
    out = [f"#### {item.title}\n"] if item.title else []
    out += [item.note + "\n"] if item.note else []
    out.append(md_table(item.frame, item.shown(), empty=item.empty))
    if item.legend:
        out.append("".join(f"- **{word}**: {meaning}\n" for word, meaning in item.legend))
    return "\n".join(out)


# How each kind of block is written.
BLOCKS = {
    Text: lambda item: item.text + "\n",
    Bullets: lambda item: "".join(f"- {line}\n" for line in item.items),
    Heading: lambda item: f"### {item.text}\n",
    Figure: lambda item: (
        f"_Figure `{item.name}` (report.html, and plots/{item.name}.png beside the tables): "
        f"{item.caption}_\n"
    ),
    Code: lambda item: f"#### {item.title}\n\n```json\n{item.text}\n```\n",
    Table: _table,
}


def card_md(card: AnswerCard) -> str:
    """Return the answer card: headline, picks per batch, where nothing fits, what it rests on."""
    out = [f"**The answer.** {card.headline}\n"]
    table = card.table()
    if not table.empty:
        out.append(md_table(table, list(table.columns)))
    out += [line + "\n" for line in card.notes() if line]
    out.append(
        "_Rests on_:\n\n" + "".join(f"- {line}\n" for line in card.rests_lines(REPORT_RESTS))
    )
    return "\n".join(out)


def render(data: ReportData) -> str:
    """Return the whole report as Markdown: the title, the answer card, then the rest."""
    out = [
        f"# {data.title}\n",
        *([card_md(data.card)] if data.card is not None else []),
        data.intro + "\n",
        "Provenance: " + provenance_line(data.provenance) + "\n",
    ]
    for section in data.sections:
        out.append(f"## {section.title}\n")
        out += [BLOCKS[type(b)](b) for b in section.blocks]
    return "\n".join(out)
