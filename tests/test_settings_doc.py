"""The README's configuration table is made from the settings models' field descriptions."""

from __future__ import annotations

import pytest
from conftest import ROOT
from pydantic import BaseModel

from tilesweep.settings import RootSettings, doc
from tilesweep.settings.cited_figures import References
from tilesweep.settings.question_group import QuestionGroup


def test_the_readme_table_is_the_one_the_models_make():
    readme = (ROOT / "README.md").read_text()
    assert doc.with_table(readme) == readme, "run python -m tilesweep.settings.doc"
    assert "| `deployment` | `default` (default), `bf16`," in readme


def models_below(model: type[BaseModel]) -> set[type[BaseModel]]:
    """Return a model and every model its fields hold (in lists, mappings or unions)."""
    found, todo = set(), [model]
    while todo:
        here = todo.pop()
        if here in found:
            continue
        found.add(here)
        for field in here.model_fields.values():
            todo += [t for t in _types(field.annotation) if issubclass(t, BaseModel)]
    return found


def _types(tp) -> list[type]:
    """Return the classes a type annotation names, through lists, mappings, unions, Annotated."""
    if isinstance(tp, type):
        return [tp]
    return [t for arg in getattr(tp, "__args__", ()) for t in _types(arg)]


@pytest.mark.parametrize("top", [QuestionGroup, References])
def test_every_field_of_the_question_and_the_references_says_what_it_sets(top):
    bare = [
        f"{m.__name__}.{name}"
        for m in models_below(top)
        for name, field in m.model_fields.items()
        if not field.description
    ]
    assert not bare


def test_every_root_key_says_what_it_sets():
    assert all(field.description for field in RootSettings.model_fields.values())


def test_check_names_a_stale_table_and_a_readme_without_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    readme.write_text(text.replace("| `model` |", "| `model (hand-edited)` |"))
    assert doc.main(["--readme", str(readme), "--check"]) == 1
    assert "differs from the models'" in capsys.readouterr().err
    assert doc.main(["--readme", str(readme)]) == 0 and readme.read_text() == text
    readme.write_text("# no table\n")
    assert doc.main(["--readme", str(readme), "--check"]) == 2
    err = capsys.readouterr().err
    assert "README.md: needs one" in err and err.count("\n") == 1
