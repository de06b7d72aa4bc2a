"""The question a sweep's report answers, as data (conf/question); the library names no model or
GPU, it asks `asks_about` whether a deployment is the question's."""

from __future__ import annotations

from tilesweep.errors import ConfigError
from tilesweep.settings.question_group import Question, QuestionGroup, Tiles

__all__ = ["Question", "Tiles", "validate"]


def validate(group: QuestionGroup, catalog: dict) -> None:
    """Raise ConfigError for a question about unknown hardware, or tiles no launch row holds."""
    question = group.case
    if question is not None and question.hardware not in catalog:
        valid = ", ".join(catalog)
        raise ConfigError(
            f"question.hardware={question.hardware!r}: unknown hardware; valid: {valid}"
        )
    tiles = question.tiles if question is not None else None
    if tiles is not None:
        # cycle: the registry's discovery imports fused_moe.commands -> config -> question
        from tilesweep import backends

        known = sorted(b.name for b in backends.registered())
        if tiles.backend not in known:
            raise ConfigError(
                f"question.tiles.backend={tiles.backend!r}: no such backend (its launch rows "
                f"hold the tiles); valid: {', '.join(known)}"
            )
