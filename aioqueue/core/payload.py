"""What a job record stores as bytes: the payload (task name and JSON arguments), a
result, an error.

The payload is JSON (orjson), never pickle: a worker only ever runs registered handlers
with decoded JSON values. ``v`` versions the data format, separately from the Lua code;
absent, it is 1 (WIRE_VERSION), as an absent ``a`` is no arguments and ``k`` no keywords.
Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson

from .arguments import no_nan, non_finite
from .converters import json_default
from .errors import ChildFailed, PayloadError, PayloadTooLarge, SerializationError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

WIRE_VERSION = 1


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})  # shared: most jobs carry none


@dataclass(slots=True)  # not frozen: decoded once per job, and a frozen __init__ costs 4x
class Payload:
    """What a job asks a worker to do: a task name and JSON arguments (read-only by
    convention)."""

    task: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None  # per-call override of the task's timeout
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)  # e.g. trace context
    expires_ms: int | None = None  # not started this long after it was due: it expires
    inputs: str | None = None  # a workflow's parent: how its children's outcomes come (INPUTS)

    def encode(self, max_bytes: int) -> bytes:
        """Encode for Redis; raise SerializationError or PayloadTooLarge, writing nothing."""
        return encode_payload(
            self.task, self.args, self.kwargs, self.timeout, max_bytes, self.headers,
            self.expires_ms, self.inputs,
        )  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> Payload:
        """Decode a payload from Redis; raise PayloadError on anything unexpected."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise PayloadError(f"payload is not valid JSON: {exc}") from exc
        if _LONG_NUMBER.search(raw):
            _check_integers(raw)
        if not isinstance(body, dict):
            raise PayloadError("payload is not a JSON object")
        if body.get("v", WIRE_VERSION) != WIRE_VERSION:
            raise PayloadError(f"payload format v{body['v']!r} is not this worker's")
        task, args, kwargs = body.get("t"), body.get("a", []), body.get("k", {})
        timeout, headers, expires = body.get("to"), body.get("h", _NO_HEADERS), body.get("xp")
        inputs = body.get("in")
        if not isinstance(task, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PayloadError("payload lacks a task name, an args list or a kwargs object")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise PayloadError("payload timeout is not a positive number")
        if expires is not None and (
            isinstance(expires, bool) or not isinstance(expires, int) or expires <= 0
        ):
            raise PayloadError("payload expiry is not a positive number of milliseconds")
        if headers is not _NO_HEADERS and (
            not isinstance(headers, dict)
            or not all(isinstance(value, str) for value in headers.values())
        ):
            raise PayloadError("payload headers are not an object of strings")
        if inputs is not None and (not isinstance(inputs, str) or inputs not in INPUTS):
            raise PayloadError(f"payload inputs {inputs!r} is not one of {sorted(INPUTS)}")
        return cls(task, args, kwargs, timeout, headers, expires, inputs)


def encode_payload(
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout: float | None,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    expires_ms: int | None = None,
    inputs: str | None = None,
) -> bytes:
    """A Payload's bytes, without building the Payload (the enqueue path calls this)."""
    # Only what differs from the defaults: no version while it is 1, no empty args or
    # kwargs (every queued job carries its payload: these are ~20 of its ~260 bytes).
    body: dict[str, Any] = {"t": task}
    if args:
        body["a"] = args if type(args) in _JSON_ARRAYS else list(args)
    if kwargs:
        body["k"] = kwargs if type(kwargs) is dict else dict(kwargs)
    if timeout is not None:
        body["to"] = timeout
    if headers:
        body["h"] = dict(headers)
    if expires_ms is not None:
        body["xp"] = expires_ms
    if inputs is not None:
        body["in"] = inputs
    try:  # (a Decimal, a set, a pydantic model: see converters.json_default)
        raw = orjson.dumps(body, default=json_default)
    except TypeError as exc:
        raise SerializationError(
            f"arguments of task {task!r} are not JSON-serializable: {exc}"
        ) from exc
    if len(raw) > max_bytes:
        raise PayloadTooLarge(len(raw), max_bytes)
    return raw


INPUTS = frozenset({"list", "first", "summary"})
"""How a workflow's parent gets its children's outcomes, as its first argument: "list" (a
chord or flow: every child's result in order, a failed child's as a ChildFailed), "first"
(a chain's next step: the one child's result), "summary" (a batch's callback: a dict of
total, succeeded and failed)."""


def decode_inputs(inputs: str, outcomes: Mapping[bytes, bytes]) -> Any:
    """A parent's first argument from its inputs hash (include/links.lua: child index ->
    "c" or "f", then the result or error JSON): by ``inputs``, a list in child order (a
    failed child's entry a ChildFailed), the one child's result, or a batch's counts."""
    by_index = sorted((int(index), value) for index, value in outcomes.items())
    if inputs == "summary":  # the batch's barrier: its counts, however it ended
        return orjson.loads(by_index[0][1][1:]) if by_index else {}
    values = [_outcome(index, value) for index, value in by_index]
    if inputs == "first":
        return values[0] if values else None
    return values


def _outcome(index: int, value: bytes) -> Any:
    if value[:1] == b"c":
        return orjson.loads(value[1:]) if len(value) > 1 else None
    error = orjson.loads(value[1:]) if len(value) > 1 else {}
    return ChildFailed(index, str(error.get("type", "?")), str(error.get("message", "")))


_JSON_ARRAYS = (list, tuple)  # what orjson writes as arrays itself (a subclass is copied)

# orjson reads an integer beyond 64 bits as a float, silently changing it. Such digits
# are rare, so a cheap scan decides whether to re-read the payload strictly.
_LONG_NUMBER = re.compile(rb"\d{20,}")
_INT_RANGE = range(-(2**63), 2**64)


def _check_integers(raw: bytes) -> None:
    def strict_int(text: str) -> int:
        value = int(text)
        if value not in _INT_RANGE:
            raise PayloadError(f"payload holds an integer beyond 64 bits: {text[:40]}")
        return value

    json.loads(raw, parse_int=strict_int)


def encode_result(value: object) -> bytes:
    """Encode a handler's return value; raise SerializationError if JSON cannot hold it."""
    if value is None:  # (what most handlers return)
        return b"null"
    return encode_json(value, "result")


def encode_json(value: object, what: str) -> bytes:
    """``value`` as JSON; SerializationError naming ``what`` if JSON cannot hold it as it
    is: a type it lacks, or a NaN or an infinity (orjson would write null)."""
    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from exc
    if b"null" in raw and value is not None and (found := non_finite(value)) is not None:
        raise SerializationError(f"{what} {no_nan(*found)}")
    return raw


def encode_error(error_type: str, message: str, traceback: str) -> bytes:
    """The error field of a record: what ``ErrorInfo.decode`` reads back."""
    return orjson.dumps({"type": error_type, "message": message, "traceback": traceback})
