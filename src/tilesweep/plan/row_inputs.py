"""What a composed verdict row rests on, as data: an ordered mapping of item -> text (each figure
or choice and where it comes from), kept as JSON text in the verdict's `inputs_json` column and
in answer.json, and made into words for people here only (the report, the card, the tests)."""

import json
from collections.abc import Mapping

import pandas as pd

# The verdict column that holds a row's items (JSON text of an object, in the order composed).
COLUMN = "inputs_json"


def dumps(items: Mapping[str, str]) -> str:
    """Return a row's items as the JSON text its column holds, their order kept."""
    return json.dumps(dict(items), ensure_ascii=False)


def of(row: Mapping) -> dict[str, str]:
    """Return the items a verdict row holds ({} where it holds none)."""
    text = row.get(COLUMN)
    return json.loads(text) if isinstance(text, str) and text else {}


def lines(items: Mapping[str, str]) -> list[str]:
    """Return the items as people read them, one 'item: text' line each."""
    return [f"{key}: {text}" for key, text in items.items()]


def words(items: Mapping[str, str]) -> str:
    """Return the items on one line, '; '-joined."""
    return "; ".join(lines(items))


def row_words(row: Mapping) -> str:
    """Return a verdict row's items on one line (words)."""
    return words(of(row))


def column_words(frame: pd.DataFrame) -> pd.Series:
    """Return each row's items on one line (words), by row."""
    return frame[COLUMN].map(lambda text: row_words({COLUMN: text}))
