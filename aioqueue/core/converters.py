"""How a JSON value becomes a value of the type a handler's annotation declares: one
converter per annotation, built once (``converter``), for ``core/arguments.py``; and how
the payload encoder writes the types orjson leaves out (``json_default``).

Converters raise TypeError or ValueError on a value that is not the declared type's JSON
form. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import types
import typing
from collections import abc
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Union
from uuid import UUID

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

Convert = typing.Callable[[Any], Any]
"""A JSON value -> the value of the declared type (raises TypeError or ValueError)."""

_EMPTY = inspect.Parameter.empty  # an unannotated parameter
NATIVE = frozenset({str, int, float, bool, type(None), dict, list, object, Any})
"""Annotations JSON carries as they are: nothing to convert."""


def json_default(value: Any) -> Any:
    """What the payload encoder writes for the types orjson leaves out (its ``default``):
    a Decimal as its str, a set or a NamedTuple as a list, a pydantic model as its JSON
    dump. Whether they arrive as sent is ``arguments.check_sent``'s business."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset | tuple):  # (orjson writes plain tuples itself)
        return list(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_validate"):
        return dump(mode="json")
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def converter(annotation: Any, depth: int = 0) -> Convert | None:
    """How a JSON value becomes a value of ``annotation``; None when JSON carries it as it
    is, or when the annotation does not say how (a union of two such types, a class aioqueue
    does not know): the enqueue then refuses a value that would arrive changed."""
    if depth > 8:  # a recursive type: its deeper levels decode nothing
        return None
    annotation = _unwrapped(annotation)
    if _native(annotation):
        return None
    origin, members = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None:
        return _class_converter(annotation, depth) if isinstance(annotation, type) else None
    if origin is Union or origin is types.UnionType:
        return _union(members, depth)
    if origin is tuple:
        return _tuple(members, depth)
    if origin in _SEQUENCES or origin in _SETS:
        return _items(origin, members, depth)
    if origin in _MAPPINGS and len(members) == 2:
        values = converter(members[1], depth + 1)
        return None if values is None else functools.partial(_dict_of, values)
    return None


def _native(annotation: Any) -> bool:
    try:
        return annotation in NATIVE
    except TypeError:  # unhashable: not one of them
        return False


_SEQUENCES = frozenset({list, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable})
_SETS = frozenset({set, frozenset, abc.Set, abc.MutableSet})
_MAPPINGS = frozenset({dict, abc.Mapping, abc.MutableMapping})


def _unwrapped(annotation: Any) -> Any:
    """``Annotated[X, ...]`` and ``NewType`` are X; ``Literal`` is what it lists (JSON)."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif isinstance(annotation, typing.NewType):
            annotation = annotation.__supertype__
        elif typing.get_origin(annotation) is typing.Literal or annotation is _EMPTY:
            return Any
        else:
            return annotation


def _class_converter(cls: type, depth: int) -> Convert | None:
    if issubclass(cls, enum.Enum):
        return cls
    if issubclass(cls, bool | int | float | str | dict | list):
        return None  # JSON's own types (a subclass arrives as its base, equal to it)
    for base, convert in _SCALARS:  # datetime before date: it is one
        if issubclass(cls, base):
            return convert
    if issubclass(cls, tuple):
        if hasattr(cls, "_fields"):  # a NamedTuple: its fields by their annotations
            hints = _class_hints(cls)
            fields = [converter(hints.get(name, Any), depth + 1) for name in cls._fields]
            return functools.partial(_named_tuple, cls, fields)
        return _tuple((), depth)
    if issubclass(cls, set | frozenset):
        return functools.partial(_collect, cls, None)
    if dataclasses.is_dataclass(cls):
        return _dataclass(cls, depth)
    validate = getattr(cls, "model_validate", None)  # a pydantic model
    return validate if callable(validate) else None


def _class_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # a name that does not resolve: those fields decode nothing
        return {}


def _union(members: Sequence[Any], depth: int) -> Convert | None:
    """``X | None``: X's converter, None passing through. Two types that both need one
    cannot be told apart in JSON: no converter (what would change is refused)."""
    some = [member for member in members if member is not type(None)]
    converters = [converter(member, depth + 1) for member in some]
    if len(converters) != 1 or converters[0] is None:
        return None
    return functools.partial(_optional, converters[0])


def _optional(convert: Convert, value: Any) -> Any:
    return None if value is None else convert(value)


def _tuple(members: Sequence[Any], depth: int) -> Convert:
    if len(members) == 2 and members[1] is Ellipsis:
        return functools.partial(_collect, tuple, converter(members[0], depth + 1))
    if not members or members == ((),):
        return functools.partial(_collect, tuple, None)
    fields = [converter(member, depth + 1) for member in members]
    return functools.partial(_fixed_tuple, fields)


def _items(origin: Any, members: Sequence[Any], depth: int) -> Convert | None:
    """``list[X]`` (and the sequence ABCs): X's converter on each item, if X needs one;
    ``set[X]``: a set of them, whatever X is (JSON has no sets)."""
    each = converter(members[0], depth + 1) if members else None
    if origin in _SETS:
        return functools.partial(_collect, frozenset if origin is frozenset else set, each)
    return None if each is None else functools.partial(_collect, list, each)


def _dataclass(cls: type, depth: int) -> Convert:
    hints = _class_hints(cls)
    fields = {
        field.name: (field.init, converter(hints.get(field.name, Any), depth + 1))
        for field in dataclasses.fields(cls)
    }
    return functools.partial(_make_dataclass, cls, fields)


# -- the converters ------------------------------------------------------------------


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a {what} travels as a str, not {type(value).__name__}")
    return value


def _datetime(value: Any) -> datetime:
    return datetime.fromisoformat(_text(value, "datetime"))


def _date(value: Any) -> date:
    return date.fromisoformat(_text(value, "date"))


def _time(value: Any) -> time:
    return time.fromisoformat(_text(value, "time"))


def _uuid(value: Any) -> UUID:
    return UUID(_text(value, "UUID"))


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"a Decimal travels as a str, not {type(value).__name__}")
    return Decimal(str(value))


_SCALARS: tuple[tuple[type, Convert], ...] = (
    (datetime, _datetime), (date, _date), (time, _time), (UUID, _uuid), (Decimal, _decimal),
)  # fmt: skip


def _array(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"a {what} travels as a list, not {type(value).__name__}")
    return value


def _collect(kind: Callable[[Any], Any], each: Convert | None, value: Any) -> Any:
    items = _array(value, getattr(kind, "__name__", "collection"))
    return kind(items if each is None else [each(item) for item in items])


def _fixed_tuple(fields: Sequence[Convert | None], value: Any) -> tuple[Any, ...]:
    items = _array(value, "tuple")
    if len(items) != len(fields):
        raise ValueError(f"a tuple of {len(fields)} items, not {len(items)}")
    return tuple(item if f is None else f(item) for f, item in zip(fields, items, strict=True))


def _named_tuple(cls: type, fields: Sequence[Convert | None], value: Any) -> Any:
    return cls(*_fixed_tuple(fields, _array(value, cls.__name__)))


def _dict_of(values: Convert, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a dict travels as an object, not {type(value).__name__}")
    return {key: values(item) for key, item in value.items()}


def _make_dataclass(
    cls: type, fields: Mapping[str, tuple[bool, Convert | None]], value: Any
) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"a {cls.__name__} travels as an object, not {type(value).__name__}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    given = {}
    for name, item in value.items():
        init, convert = fields[name]
        if init:
            given[name] = item if convert is None or item is None else convert(item)
    return cls(**given)
