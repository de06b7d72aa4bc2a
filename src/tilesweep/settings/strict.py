"""The base of every config model, and a refusal as one line naming its dotted YAML key (pydantic's
own messages span lines and name model fields)."""

import json
import reprlib
import types
import typing
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WrapValidator

from tilesweep import package_data
from tilesweep.errors import ConfigError

DATA_FILES = ("data/plan.yaml",)


class Section(BaseModel):
    """A config mapping: exact types, no other key, no NaN or infinity, no null."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Return the settings a rule's JSON param holds, validated, `by_gpus` keys integers."""
        return cls.model_validate(gpu_counts_as_ints(json.loads(text)))


def gpu_counts_as_ints(node: Any, key: str = "") -> Any:
    """Return node with every all-digit `by_gpus` mapping's keys as ascending integers."""
    if isinstance(node, list):
        return [gpu_counts_as_ints(v) for v in node]
    if not isinstance(node, dict):
        return node
    items = [(k, gpu_counts_as_ints(v, k)) for k, v in node.items()]
    if key == "by_gpus" and all(isinstance(k, str) and k.isdigit() for k, _ in items):
        items = sorted((int(k), v) for k, v in items)
    return dict(items)


def _as_written(value: Any, handler: Any) -> Any:
    """Return an integer given for a number as that integer (strict pydantic makes 900 900.0)."""
    checked = handler(value)
    return value if type(value) is int else checked


# A number (`float` refuses bools, NaN and infinity) that keeps an integer as the YAML wrote it,
# so that a dumped config writes the same JSON as the composed one (rule params are rerun keys).
Number = Annotated[float, WrapValidator(_as_written)]
PositiveNumber = Annotated[Number, Field(gt=0)]


def at_least(low: int, high: int | None = None) -> Any:
    """Return an integer type of at least low (and at most high, where given)."""
    return Annotated[int, Field(ge=low, le=high)]


AtLeastOne = at_least(1)
_NO_VALUE = object()


class Refused(ValueError):
    """A value a validator refuses: its key below the node, why in words, and the value (none:
    the message names the key alone)."""

    def __init__(self, key: str, why: str, value: Any = _NO_VALUE):
        super().__init__(why)
        self.key, self.value, self.why = key, value, why

    def line(self, where: str) -> str:
        """Return the one-line message with the key placed under where."""
        dot = "." if where and self.key and not self.key.startswith("[") else ""
        path = f"{where}{dot}{self.key}"
        said = "" if self.value is _NO_VALUE else f"={self.value!r}"
        return f"{path}{said}: {self.why}"


refuse = Refused  # what a validator raises: refuse(key, why[, value])


def ascending(values: list, key: str, why: str, strictly: bool = True) -> list:
    """Return values when each is above (`strictly=False`: not below) the one before."""
    if any(b <= a if strictly else b < a for a, b in zip(values, values[1:], strict=False)):
        raise refuse(key, why, values)
    return values


def _power_of_two(value: int) -> int:
    """Return value when it is a power of two; else raise."""
    if value & (value - 1):
        raise refuse("", "must be a power of two", value)
    return value


def _once_each(values: list) -> list:
    """Return values when none repeats (each names a cell, which would be run twice)."""
    for i, value in enumerate(values):
        if value in values[:i]:
            first = values.index(value)
            if isinstance(value, BaseModel):  # model_dump: output only (the message shows it)
                value = value.model_dump(exclude_unset=True)
            raise refuse(f"[{i}]", f"repeats item [{first}]; give each value once", value)
    return values


PowerOfTwo = AfterValidator(_power_of_two)


def distinct(item: Any) -> Any:
    """Return the type of a list of at least one item, none repeated."""
    return Annotated[list[item], Field(min_length=1), AfterValidator(_once_each)]


# What each pydantic type error expects, in the words of the messages.
_EXPECTED = package_data.data_typed("tilesweep", DATA_FILES[0], "expected_types", dict[str, str])


def check(model: type[Section], data: Any, where: str = "") -> Section:
    """Return data validated by model; raise ConfigError naming the first key it refuses."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, data, model, where)) from None


# How a refused value is shown: whole where short, cut where long (a YAML alias bomb's value
# was a 25 MB line).
_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 12
_REPR.maxstring = _REPR.maxlong = _REPR.maxother = 200


def _shown(value: Any) -> str:
    """Return a refused value as the one line shows it: repr(), cut where long."""
    text = _REPR.repr(value)
    return text if len(text) <= 300 else f"{text[:280]}...({len(text)} chars)"


def explain(exc: ValidationError, data: Any, model: type, where: str = "") -> str:
    """Return one line for the first error: the dotted key, its value and what it must be."""
    errors = exc.errors(include_url=False)
    rank = {"extra_forbidden": 0, "missing": 1}
    first = min(errors, key=lambda e: rank.get(e["type"], 2))
    path, node, tail = _walk(first["loc"], data, where)
    kind = first["type"]
    if kind == "extra_forbidden":
        parent = _declared_at(model, first["loc"][:-1])[0]
        allowed = ", ".join(sorted(getattr(parent, "model_fields", {})))  # a model's keys
        return f"{path}: unknown key" + (f"; allowed: {allowed}" if allowed else "")
    if kind == "missing":
        parent, _, key = path.rpartition(".")
        return f"{parent}: missing key {key!r}" if parent else f"missing key {key!r}"
    if kind == "finite_number":
        return f"{path}={_shown(node)}: must be a finite number"
    said = first.get("ctx", {}).get("error")
    if kind == "value_error" and isinstance(said, Refused | ConfigError):
        return said.line(path) if isinstance(said, Refused) else str(said)  # a group's own words
    declared = _declared_at(model, first["loc"])
    if kind == "too_short":
        least = first["ctx"]["min_length"]
        tp = declared[0]  # a list's: its items' type
        tp = _declared(typing.get_args(tp)[0])[0] if typing.get_origin(tp) is list else tp
        choices = _choices(tp)
        said = f"give at least {'one' if least == 1 else least}"
        return f"{path}={_shown(node)}: {said}" + (f"; allowed: {choices}" if choices else "")
    if kind == "literal_error":
        choices = _choices(declared[0])
        return f"{path}={_shown(node)}: allowed: {choices or first['ctx']['expected']}"
    if kind in _RANGES:
        return f"{path}={_shown(node)}: {_range_words(declared[1], first['msg'])}"
    if tail:  # a union: every member that refused the value says what it expected
        base = first["loc"][: len(first["loc"]) - len(tail)]
        same = [e for e in errors if e["loc"][: len(base)] == base]
        wanted = list(dict.fromkeys(_EXPECTED.get(e["type"], e["msg"]) for e in same))
        return f"{path}={_shown(node)}: expected {' or '.join(wanted)}"
    if kind in _EXPECTED:
        return f"{path}={_shown(node)}: expected {_EXPECTED[kind]}"
    if first["msg"].startswith(("Input should be", "String should")):  # a range or a pattern
        said = first["msg"].replace("Input should be", "must be").replace("String should", "must")
        return f"{path}={_shown(node)}: {said}"
    return f"{path}={_shown(node)}: {first['msg']}"


_RANGES = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _range_words(bounds: dict, said: str) -> str:
    """Return a declared range in words (at least 0, ...), else what pydantic said."""
    if {"ge", "le"} <= bounds.keys():
        return f"must be between {bounds['ge']:,} and {bounds['le']:,}"
    words = {"ge": "at least", "gt": "more than", "le": "at most", "lt": "less than"}
    parts = [f"{word} {bounds[op]:,}" for op, word in words.items() if op in bounds]
    return "must be " + " and ".join(parts) if parts else said.replace("Input should be", "must be")


def _choices(tp: Any) -> str:
    """Return a Literal type's values as the messages list them ('' for an empty string)."""
    if typing.get_origin(tp) is not typing.Literal:
        return ""
    return ", ".join(str(v) if v != "" else "''" for v in typing.get_args(tp))


def _declared(tp: Any) -> tuple[Any, dict]:
    """Return a type without its Annotated wrapper, and the bounds declared on it."""
    bounds: dict = {}
    while typing.get_origin(tp) is typing.Annotated:
        tp, *extra = typing.get_args(tp)
        bounds.update(_bounds(extra))
    return tp, bounds


def _bounds(metadata: list) -> dict:
    """Return the ge/gt/le/lt bounds among a field's metadata (FieldInfo or annotated_types)."""
    out = {}
    for item in metadata:
        for meta in getattr(item, "metadata", [item]):
            out.update({k: getattr(meta, k) for k in ("ge", "gt", "le", "lt") if hasattr(meta, k)})
    return out


def _declared_at(model: Any, loc: tuple) -> tuple[Any, dict]:
    """Return the type the models declare at loc and the bounds declared on it."""
    tp, bounds = model, {}
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            if field is None:
                return None, {}
            tp, bounds = _declared(field.annotation)
            bounds.update(_bounds(field.metadata))
        elif typing.get_origin(tp) in (list, dict):
            tp, bounds = _declared(typing.get_args(tp)[-1])
        else:
            return None, {}
    return _unwrap(tp), bounds


def _walk(loc: tuple, data: Any, where: str) -> tuple[str, Any, tuple]:
    """Return the dotted path of loc in data, the value there, and the loc parts past it."""
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


def _unwrap(tp: Any) -> Any:
    """Return the one non-null member of an optional type, else the type itself."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return members[0] if len(members) == 1 else tp
    return tp
