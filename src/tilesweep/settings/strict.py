"""The base of every config model, and the one-line message for a refused value."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tilesweep.errors import ConfigError


class Section(BaseModel):
    """A config mapping: its keys are the fields, each of its type exactly (no coercion, bools are
    not integers), no other key, and no NaN or infinity in a number. A field declared `= None`
    is an optional key: left out it stays unset, and a null given for it is refused like any
    other wrong type (pydantic does not validate defaults)."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


# What each pydantic type error expects, in the words of the messages.
_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true/false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
}


def check(model: type[Section], data: Any, where: str = "") -> None:
    """Raise ConfigError naming the first key of data that model refuses; return None if none."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, data, model, where)) from None


def explain(exc: ValidationError, data: Any, model: type, where: str = "") -> str:
    """Return one line for the first error: the dotted key, its value and what it must be."""
    errors = exc.errors(include_url=False)
    rank = {"extra_forbidden": 0, "missing": 1}
    first = min(errors, key=lambda e: rank.get(e["type"], 2))
    path, node, tail = _walk(first["loc"], data, where)
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted(_fields(_annotation_at(model, first["loc"][:-1]))))
        return f"{path}: unknown key" + (f"; allowed: {allowed}" if allowed else "")
    if kind == "missing":
        parent, _, key = path.rpartition(".")
        return f"{parent}: missing key {key!r}" if parent else f"missing key {key!r}"
    if kind == "finite_number":
        return f"{path}={node!r}: must be a finite number"
    if kind == "too_short":
        return f"{path}={node!r}: give at least {first['ctx']['min_length']}"
    if tail:  # a union: every member that refused the value says what it expected
        base = first["loc"][: len(first["loc"]) - len(tail)]
        same = [e for e in errors if e["loc"][: len(base)] == base]
        wanted = list(dict.fromkeys(_EXPECTED.get(e["type"], e["msg"]) for e in same))
        return f"{path}={node!r}: expected {' or '.join(wanted)}"
    if kind in _EXPECTED:
        return f"{path}={node!r}: expected {_EXPECTED[kind]}"
    if first["msg"].startswith(("Input should be", "String should")):  # a range or a pattern
        said = first["msg"].replace("Input should be", "must be").replace("String should", "must")
        return f"{path}={node!r}: {said}"
    return f"{path}={node!r}: {first['msg']}"


def _walk(loc: tuple, data: Any, where: str) -> tuple[str, Any, tuple]:
    """Return the dotted path of loc in data, the value there, and the loc parts past it (the
    member names of a union)."""
    path, node = where, data
    for i, part in enumerate(loc):
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path, node = f"{path}[{part}]", node[part]
        elif isinstance(node, dict) and part not in ("[key]",):
            path = f"{path}.{part}" if path else str(part)
            node = node.get(part)
        else:
            return path, node, tuple(loc[i:])
    return path, node, ()


def _annotation_at(model: Any, loc: tuple) -> Any:
    """Return the type the models declare at loc (a model class, a list or dict type)."""
    node = model
    for part in loc:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(part)
            node = field.annotation if field else None
        elif typing.get_origin(node) in (list, dict):
            node = typing.get_args(node)[-1]
        else:
            return None
    return _unwrap(node)


def _unwrap(tp: Any) -> Any:
    """Return the one non-null member of an optional type, else the type itself."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return members[0] if len(members) == 1 else tp
    return tp


def _fields(tp: Any) -> list[str]:
    """Return the keys a model type allows; none for anything else."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    return []
