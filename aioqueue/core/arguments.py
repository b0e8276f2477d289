"""Arguments that arrive as they were sent, or are refused at enqueue.

A job's arguments travel as JSON, which carries str, int, float, bool, None, lists and
objects with str keys, and nothing else: a NaN would arrive as None, a datetime or a UUID
as a str, a tuple as a list. The rule (README, "Arguments"):

- a value JSON carries as it is (and no NaN or infinity anywhere) arrives as it was sent;
- a value of another type arrives as that type when the handler's annotation of its
  parameter declares it: ``datetime``, ``date``, ``time``, ``UUID``, ``Decimal``, enums,
  tuples, sets, dataclasses, NamedTuples and pydantic models, alone or inside ``list[...]``,
  ``dict[str, ...]``, ``tuple[...]``, ``set[...]`` or ``X | None``;
- anything else is refused by the enqueue, naming the argument, and nothing is written.

``decoder_for`` reads a handler's annotations once, when its task is registered: None
when every parameter is JSON-native (plain ``int``, ``str``, ``dict``, unannotated...), so
that a worker spends one truth test per job on them. ``check_sent`` is the enqueue's
check: the payload read back (and decoded as the worker will) must equal what was sent.
Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import types
import typing
from typing import TYPE_CHECKING, Any

import orjson

from .converters import Convert, converter, json_default
from .dependencies import job_signature
from .errors import SerializationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

_PLAIN = frozenset({str, int, bool, type(None)})  # values that always arrive as sent
_SCALARS = _PLAIN | {float}  # ...and floats, unless NaN or infinite
_NOTHING = inspect.Parameter.empty


# -- reading annotations --------------------------------------------------------------


class ArgumentDecoder:
    """A handler's converters, by parameter: applied by the worker to a job's JSON
    arguments (``decode``), and by the enqueue to check what the worker will get."""

    __slots__ = ("_by_name", "_positional", "_var_keyword", "_var_positional")

    def __init__(
        self,
        positional: Sequence[tuple[str, Convert | None]],
        var_positional: Convert | None,
        by_name: Mapping[str, Convert],
        var_keyword: Convert | None,
    ) -> None:
        self._positional = tuple(positional)
        self._var_positional = var_positional
        self._by_name = dict(by_name)
        self._var_keyword = var_keyword

    def decode(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], skip: int = 0
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments as the handler declares them. ``skip``: positional parameters
        filled before these arguments (a workflow parent's inputs). Raises TypeError or
        ValueError (naming the parameter) when a value cannot be decoded."""
        decoded = list(args)
        for index in range(skip, len(decoded)):
            name, convert = self._at(index)
            if convert is not None:
                decoded[index] = _apply(convert, decoded[index], name)
        named = dict(kwargs)
        for name, value in named.items():
            convert = self._by_name.get(name, self._var_keyword)
            if convert is not None:
                named[name] = _apply(convert, value, name)
        return decoded, named

    def at(self, index: int) -> Convert | None:
        """The converter of the positional argument ``index`` (None: nothing to do)."""
        return self._at(index)[1]

    def named(self, name: str) -> Convert | None:
        """The converter of the keyword argument ``name`` (None: nothing to do)."""
        return self._by_name.get(name, self._var_keyword)

    def _at(self, index: int) -> tuple[str, Convert | None]:
        if index < len(self._positional):
            return self._positional[index]
        return "*args", self._var_positional


def _apply(convert: Convert, value: Any, name: str) -> Any:
    if value is None:  # a default of None, or an Optional left out: nothing to decode
        return None
    try:
        return convert(value)
    except Exception as exc:  # a model's validator or __post_init__ may raise anything
        raise TypeError(f"argument {name!r} does not decode: {exc}") from exc


def decoder_for(fn: Callable[..., Any]) -> ArgumentDecoder | None:
    """The converters a handler's annotations call for, or None if every parameter is
    JSON-native (then the worker decodes nothing). Annotations that do not resolve (a
    name only imported for type checking) count as unannotated; injected parameters
    (``Depends``) are no arguments."""
    signature = job_signature(fn)
    if signature is None:
        return None
    hints = _hints(fn, signature)
    positional: list[tuple[str, Convert | None]] = []
    by_name: dict[str, Convert] = {}
    var_positional = var_keyword = None
    for name, parameter in signature.parameters.items():
        convert = converter(hints.get(name, Any))
        if parameter.kind is parameter.VAR_POSITIONAL:
            var_positional = convert
        elif parameter.kind is parameter.VAR_KEYWORD:
            var_keyword = convert
        else:
            if parameter.kind is not parameter.KEYWORD_ONLY:
                positional.append((name, convert))
            if convert is not None and parameter.kind is not parameter.POSITIONAL_ONLY:
                by_name[name] = convert
    needed = [convert for _, convert in positional] + [var_positional, var_keyword]
    if all(convert is None for convert in needed):
        return None
    return ArgumentDecoder(positional, var_positional, by_name, var_keyword)


def _hints(fn: Callable[..., Any], signature: inspect.Signature) -> dict[str, Any]:
    """Each parameter's annotation, resolved one by one (``typing.get_type_hints`` gives
    up on all of them when one name does not resolve)."""
    with contextlib.suppress(Exception):
        return typing.get_type_hints(fn)
    namespace = getattr(inspect.unwrap(fn), "__globals__", {})
    hints: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if parameter.annotation is _NOTHING:
            continue
        probe = types.SimpleNamespace(__annotations__={name: parameter.annotation})
        with contextlib.suppress(Exception):  # unresolved: as if unannotated
            hints[name] = typing.get_type_hints(probe, globalns=namespace)[name]
    return hints


# -- the enqueue's check ---------------------------------------------------------------


def plain(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether every argument is a str, an int, a bool, None or a finite float: those
    arrive as sent, so the enqueue need not read its payload back (most calls)."""
    if _PLAIN.issuperset(map(type, args)) and _PLAIN.issuperset(map(type, kwargs.values())):
        return True
    values = (*args, *kwargs.values())
    return _SCALARS.issuperset(map(type, values)) and all(
        value - value == 0 for value in values if type(value) is float
    )  # (inf - inf and nan - nan are nan)


def check_sent(
    raw: bytes,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    task: str,
    handler: Callable[..., Any] | None,
    decoder: ArgumentDecoder | None,
    skip: int = 0,
) -> None:
    """Raise SerializationError unless the arguments encoded in the payload ``raw``
    arrive as they were sent: read back and decoded as the worker will (``decoder``: the
    task's, None if it decodes nothing), equal to ``args`` and ``kwargs``. ``handler``:
    the task's function, None if this app does not have it (then nothing decodes).
    ``skip``: positional parameters the worker fills first (a workflow parent's inputs)."""
    body = orjson.loads(raw)
    arrived, arrived_named = body.get("a", []), body.get("k", {})
    with contextlib.suppress(TypeError):  # (a value that does not decode: found below)
        if decoder is not None:
            arrived, arrived_named = decoder.decode(arrived, arrived_named, skip)
        if _equal(arrived, list(args)) and _equal(arrived_named, dict(kwargs)):
            return
    names = _parameter_names(handler)
    checks: list[tuple[str, Any, Convert | None]] = []
    for index, value in enumerate(args, skip):
        label = repr(names[index]) if index < len(names) else f"{index + 1 - skip}"
        checks.append((label, value, None if decoder is None else decoder.at(index)))
    for name, value in kwargs.items():
        checks.append((repr(name), value, None if decoder is None else decoder.named(name)))
    for label, value, convert in checks:
        problem = _problem(value, convert, handler is not None)
        if problem is not None:
            raise SerializationError(f"task {task!r}: argument {label} {problem}")
    raise SerializationError(f"task {task!r}: its arguments would not arrive as they were sent")


def _parameter_names(handler: Callable[..., Any] | None) -> list[str]:
    """The names of the positional parameters, injected ones left out (none known:
    arguments go by position)."""
    signature = None if handler is None else job_signature(handler)
    if signature is None:
        return []
    parameters = signature.parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [parameter.name for parameter in parameters if parameter.kind in kinds]


def _equal(arrived: Any, sent: Any) -> bool:
    try:
        return bool(arrived == sent)
    except Exception:  # an __eq__ that raises (or returns an array): not the same
        return False


def _problem(value: Any, convert: Convert | None, known: bool) -> str | None:
    """How one argument would change on its way to the handler, or None if it would not:
    sent through JSON alone, then decoded by its parameter's converter (if any)."""
    arrived = orjson.loads(orjson.dumps(value, default=json_default))
    if convert is not None and arrived is not None:
        try:
            arrived = convert(arrived)
        except Exception as exc:  # (as in _apply)
            return f"is {_a(value)}, which does not decode as its annotation declares: {exc}"
    if _equal(arrived, value):
        return None
    found = _changed(value, "")
    if found is not None and isinstance(found[1], float):
        return no_nan(*found)
    if convert is not None:  # a JSON value the annotation turns into another type
        kind = _a(arrived)
        return f"is {_a(value)}, which the worker decodes to {kind} (its annotation): send {kind}"
    path, inner = ("", value) if found is None else found
    what = f"holds {_a(inner)} at {path}" if path else f"is {_a(inner)}"
    carried = _a(orjson.loads(orjson.dumps(inner, default=json_default)))
    if not known:
        return (
            f"{what}, which arrives as {carried}: send {carried} (the task is not "
            "registered in this app, so nothing here knows how its handler decodes it)"
        )
    kind = type(inner).__name__
    return (
        f"{what}, which arrives as {carried}: declare {kind} in the parameter's annotation "
        f"for the worker to decode it, or send {carried}"
    )


def no_nan(path: str, number: float) -> str:
    """What is wrong with a NaN or an infinity at ``path`` (JSON would write null)."""
    inside = f"holds {number!r} at {path}" if path else f"is {number!r}"
    return f"{inside}: JSON has no NaN or infinity (send None, or a str)"


def non_finite(value: object, path: str = "") -> tuple[str, float] | None:
    """The first NaN or infinity inside ``value`` (lists, tuples, dicts), with its path
    (``['scores'][2]``); for a result or a body, whose other types JSON carries as it may."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, list | tuple):
        items: Iterable[tuple[object, object]] = enumerate(value)
    elif isinstance(value, dict):
        items = ((repr(key), item) for key, item in value.items())
    else:
        return None
    for key, item in items:
        if (found := non_finite(item, f"{path}[{key}]")) is not None:
            return found
    return None


def _a(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeioAEIO' else 'a'} {name}"


def _changed(value: Any, path: str) -> tuple[str, Any] | None:
    """The first value inside ``value`` that JSON does not carry as it is (a NaN, an
    infinity, a type not JSON's own), with its path (``['scores'][2]``); else None."""
    kind = type(value)
    if kind is float:
        return None if math.isfinite(value) else (path, value)
    if kind in _PLAIN:
        return None
    if kind is list:
        for index, item in enumerate(value):
            if (found := _changed(item, f"{path}[{index}]")) is not None:
                return found
        return None
    if kind is dict:
        for key, item in value.items():
            if (found := _changed(item, f"{path}[{key!r}]")) is not None:
                return found
        return None
    return path, value
