"""The README's and the kept example's headline engine-check figures are the files' own: a test
recomputes each from the tables it is read off, so they cannot drift."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT

from tilesweep import references

EMPTY = pd.DataFrame()


def _said(summary: dict) -> str:
    """Return how the documents word a corpus summary: 'N of the M composed'."""
    return f"{summary['in_band']} of the {summary['composed']} composed"


def test_the_example_readme_states_its_own_engines_table():
    engines = pd.read_csv(ROOT / "docs/examples/h200/engines.csv")
    got = references.corpus_summary(engines)
    text = (ROOT / "docs/examples/h200/README.md").read_text()
    assert _said(got) in text
    assert f"{got['rows']} cited engine figures" in text
    assert f"median |error| {got['median_abs_error_pct']:.1f}%" in text


@pytest.mark.slow
def test_the_readme_states_what_tilesweep_verdict_composes_from_the_shipped_fit(corpus_engines):
    engines = corpus_engines
    got = references.corpus_summary(engines)
    text = (ROOT / "README.md").read_text()
    assert f"cites {got['rows']} public engine" in text
    assert _said(got) in text and f"{got['gaps']} are labelled" in text
    assert f"median |error| {got['median_abs_error_pct']:.1f}%" in text
