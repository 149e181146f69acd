"""How a config section declares its fields and how they are checked.

Every section is a frozen stdlib dataclass whose field types carry their limits, pydantic-style::

    epochs: Annotated[int, Ge(1)] = 40
    dropout_rate: Annotated[float, Interval(ge=0, lt=1)] = 0.1
    learning_rate: Annotated[float, Gt(0), FINITE] = 1e-3
    bless_metric: Literal["BLEU-1", ..., "CIDEr"] = "BLEU-4"
    image_dense_units: Annotated[Tuple[int, ...], check(non_empty_sizes, "must be ...")] = (1024, 512)

pydantic validates each field's value against its annotated type, strictly (no "3" for an int,
no 1 for a bool). Why stdlib dataclasses checked by pydantic, and not pydantic models: a config
with a value out of range must still be buildable (``--set`` collects every problem before
saying any; the evaluator is tested on thresholds the config would refuse), which models forbid,
and ``dataclasses.replace`` / ``asdict`` keep working for every caller. The text a user reads
(``must be >= 1``, ``must be in [0, 1)``) is generated from the same annotations, so a limit and
its message cannot disagree; ``make settings`` prints it.

Imports no stage: every section module, and the root that composes them, builds on it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from typing import Any, Callable, Dict, List, Literal, Mapping, Tuple

import annotated_types
import pydantic
from pydantic.types import AllowInfNan

Ge, Gt, Le, Lt, Interval = (annotated_types.Ge, annotated_types.Gt, annotated_types.Le,
                            annotated_types.Lt, annotated_types.Interval)
FINITE = AllowInfNan(False)

# pydantic error types that are a value out of its limits (reported by validate()), as opposed to
# a value of the wrong type (refused when a config is built from JSON).
_LIMIT_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                           "finite_number", "literal_error", "value_error"})


class Note(str):
    """Said after a field's limit in messages: ``must be >= 0 (0: greedy)``."""


def check(predicate: Callable[[Any], bool], allowed: str) -> pydantic.AfterValidator:
    """A limit no bound says (a pattern, a list rule): ``predicate`` must hold; ``allowed`` is
    the message."""
    def validate(value):
        if not predicate(value):
            raise ValueError(allowed)
        return value

    validate.allowed = allowed
    return pydantic.AfterValidator(validate)


def non_empty(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def field_types(section_type: type) -> Dict[str, Any]:
    """``{field name: annotated type}`` of a section dataclass."""
    hints = typing.get_type_hints(section_type, include_extras=True)
    return {field.name: hints[field.name] for field in dataclasses.fields(section_type)}


def base_type(hint: Any) -> Any:
    """``int`` for ``Annotated[int, Ge(1)]``; ``str`` for a Literal of strings; ``tuple`` for tuples."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin is Literal:
        return type(typing.get_args(hint)[0])
    return origin or hint


def _number(value: float) -> str:
    return f"{value:g}"


def allowed_text(hint: Any) -> str:
    """What a field allows beyond its type, in words; empty where only the type limits it."""
    base, metadata = (typing.get_args(hint)[0], typing.get_args(hint)[1:]) \
        if typing.get_origin(hint) is typing.Annotated else (hint, ())
    notes = [item for item in metadata if isinstance(item, Note)]
    if typing.get_origin(base) is Literal:
        text = f"must be one of {list(typing.get_args(base))}"
    else:
        custom = [item.func.allowed for item in metadata
                  if isinstance(item, pydantic.AfterValidator) and hasattr(item.func, "allowed")]
        text = custom[0] if custom else _bounds_text(base, metadata)
    return " ".join([text, *notes]) if text else ""


def _bounds_text(base: Any, metadata: Tuple[Any, ...]) -> str:
    bounds = {}
    for item in metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(item, name, None) is not None:
                bounds[name] = getattr(item, name)
    finite = any(isinstance(item, AllowInfNan) and not item.allow_inf_nan for item in metadata)
    lower = ("ge", bounds["ge"]) if "ge" in bounds else ("gt", bounds["gt"]) if "gt" in bounds else None
    upper = ("le", bounds["le"]) if "le" in bounds else ("lt", bounds["lt"]) if "lt" in bounds else None
    if lower and upper:
        if base is int and lower[0] == "ge" and upper[0] == "le":
            return f"must be in {lower[1]}..{upper[1]}"
        return (f"must be in {'[' if lower[0] == 'ge' else '('}{_number(lower[1])}, "
                f"{_number(upper[1])}{']' if upper[0] == 'le' else ')'}")
    if lower or upper:
        name, value = lower or upper
        symbol = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[name]
        return f"must be {'finite and ' if finite else ''}{symbol} {_number(value)}"
    return ""


@functools.cache
def _adapter(hint: Any) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(hint, config=pydantic.ConfigDict(strict=True))


def _errors(hint: Any, value: Any) -> List[dict]:
    if isinstance(value, list):  # JSON has no tuples
        value = tuple(value)
    try:
        _adapter(hint).validate_python(value)
    except pydantic.ValidationError as error:
        return error.errors()
    return []


def type_problem(key: str, hint: Any, value: Any) -> str:
    """Why ``value`` is not of the field's type, or "" when it is (its limits aside)."""
    wrong = [error for error in _errors(hint, value) if error["type"] not in _LIMIT_ERRORS]
    if not wrong:
        return ""
    return f"Config {key!r} must be {_type_words(hint)}, got {value!r}."


def _type_words(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) is tuple:
        items = {item for item in typing.get_args(hint) if item is not Ellipsis}
        return "a list of " + " or ".join(sorted(item.__name__ for item in items))
    expected = base_type(hint)
    return getattr(expected, "__name__", str(expected))


def limit_problems(prefix: str, section: Any) -> List[str]:
    """``"<prefix>.<field>=<value>: <what is allowed>"`` for each field out of its limits."""
    problems = []
    for name, hint in field_types(type(section)).items():
        value = getattr(section, name)
        if any(error["type"] in _LIMIT_ERRORS for error in _errors(hint, value)):
            problems.append(f"{prefix}.{name}={value!r}: {allowed_text(hint)}")
    return problems


def build_section(section_type: type, values: Mapping[str, Any], prefix: str) -> Any:
    """The section from JSON-like ``values`` (lists become tuples, ints become floats where a
    float is declared). Unknown keys raise ValueError, values of the wrong type TypeError; values
    out of their limits are kept for :func:`limit_problems` to report."""
    if not isinstance(values, Mapping):
        raise TypeError(f"Config section {prefix!r} must be a mapping, got {values!r}.")
    types = field_types(section_type)
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise ValueError(f"Unknown config keys {unknown} in section {prefix!r}; known: {sorted(types)}.")
    kwargs = {}
    for name, value in values.items():
        problem = type_problem(f"{prefix}.{name}", types[name], value)
        if problem:
            raise TypeError(problem)
        if isinstance(value, list):
            value = tuple(value)
        elif base_type(types[name]) is float and not isinstance(value, bool):
            value = float(value)
        kwargs[name] = value
    return section_type(**kwargs)


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_text(key: str, raw_value: str, hint: Any) -> Any:
    """A ``--set`` value read as the field's type: booleans only true/false (any case), lists as
    ``a,b`` or JSON. Raises ValueError naming the key and the type; limits are validate()'s."""
    field_type = base_type(hint)
    try:
        if field_type is bool:
            lowered = raw_value.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(raw_value)
            return lowered == "true"
        if field_type is int:
            return int(raw_value)
        if field_type is float:
            return float(raw_value)
        if field_type is tuple:
            parsed = json.loads(raw_value) if raw_value.strip().startswith("[") else [
                item for item in raw_value.split(",") if item]
            return [_coerce_scalar(item) for item in parsed]
        return raw_value
    except ValueError:
        expected = "bool (true or false)" if field_type is bool else \
            getattr(field_type, "__name__", field_type)
        raise ValueError(f"Config override {key}={raw_value!r} is not a valid {expected}.") from None


def _coerce_scalar(item: Any) -> Any:
    if not isinstance(item, str):
        return item
    for convert in (int, float):
        try:
            return convert(item)
        except ValueError:
            pass
    return item
