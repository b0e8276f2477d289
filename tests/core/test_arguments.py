"""Arguments arrive as they were sent, or the enqueue refuses them (core/arguments.py):
what a handler's annotations decode, what they leave alone, and what is refused."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, NewType
from uuid import UUID, uuid4

import orjson
import pydantic
import pytest

from aioqueue.core.arguments import check_sent, decoder_for, plain
from aioqueue.core.errors import SerializationError
from aioqueue.core.payload import encode_payload

if TYPE_CHECKING:
    from collections import OrderedDict  # resolvable only by a type checker


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    seen: datetime | None = None


@dataclasses.dataclass
class Route:
    points: list[Point]
    tag: UUID


class Pair(NamedTuple):
    left: int
    at: date


class Order(pydantic.BaseModel):
    id: int
    placed: datetime
    total: Decimal


UserId = NewType("UserId", UUID)


def through_json(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[list[Any], dict[str, Any]]:
    """What a worker hands ``fn``: the arguments encoded as a payload, read back, decoded."""
    body = orjson.loads(encode_payload("t", args, kwargs, None, 1 << 20))
    decoder = decoder_for(fn)
    assert decoder is not None
    return decoder.decode(body.get("a", []), body.get("k", {}))


def enqueue_check(fn: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> None:
    raw = encode_payload("t", args, kwargs, None, 1 << 20)
    decoder = None if fn is None else decoder_for(fn)
    check_sent(raw, args, kwargs, task="t", handler=fn, decoder=decoder)


# -- nothing to do for JSON-native parameters ----------------------------------------


def test_json_native_handlers_need_no_decoder() -> None:
    async def untyped(a, b=1, *rest, **named): ...

    async def native(
        a: int, b: str, c: dict[str, int], d: list[float], e: bool | None, f: Any,
        g: Literal["x", "y"], h: Sequence[str], i: object, j: float = 1.0,
    ) -> None: ...  # fmt: skip

    async def unresolved(a: OrderedDict[str, int]) -> None: ...  # a TYPE_CHECKING import

    assert decoder_for(untyped) is None
    assert decoder_for(native) is None
    assert decoder_for(unresolved) is None


# -- decoded back to what the annotations declare --------------------------------------


def test_scalars_come_back_as_their_types() -> None:
    async def handler(
        at: datetime, day: date, alarm: time, key: UUID, price: Decimal, color: Color,
        user: UserId, label: Annotated[datetime, "meta"], maybe: datetime | None = None,
    ) -> None: ...  # fmt: skip

    sent = (
        datetime(2025, 3, 1, 9, 30, 15, 250, tzinfo=timezone(timedelta(hours=2))),
        date(2025, 3, 1), time(9, 30), uuid4(), Decimal("10.10"), Color.BLUE,
        UserId(uuid4()), datetime(2025, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    args, kwargs = through_json(handler, *sent, maybe=None)
    assert args == list(sent) and kwargs == {"maybe": None}
    assert [type(value) for value in args] == [type(value) for value in sent]
    assert str(args[4]) == "10.10"  # the Decimal's digits, not a float's


def test_containers_and_classes_come_back_as_declared() -> None:
    async def handler(
        span: tuple[int, int], names: tuple[str, ...], anything: tuple, tags: set[str],  # type: ignore[type-arg]
        frozen: frozenset[int], times: list[datetime], ids: dict[str, UUID], pair: Pair,
        route: Route, order: Order, *extra: UUID, **named: Decimal,
    ) -> None: ...  # fmt: skip

    now = datetime.now(UTC)
    sent = (
        (1, 2), ("a", "b"), (1, "x", None), {"x", "y"}, frozenset({3}), [now, now],
        {"a": uuid4()}, Pair(1, date(2025, 1, 2)), Route([Point(1, now), Point(2)], uuid4()),
        Order(id=7, placed=now, total=Decimal("9.99")), uuid4(),
    )  # fmt: skip
    args, kwargs = through_json(handler, *sent, fee=Decimal("0.5"))
    assert args == list(sent) and kwargs == {"fee": Decimal("0.5")}
    assert isinstance(args[7], Pair) and isinstance(args[8].points[0], Point)
    assert isinstance(args[8].points[0].seen, datetime) and isinstance(args[9], Order)
    assert isinstance(args[10], UUID)
    enqueue_check(handler, *sent, fee=Decimal("0.5"))  # what the worker gets: what was sent


def test_string_annotations_resolve_one_by_one() -> None:
    """Under ``from __future__ import annotations`` (this module's) every annotation is a
    string; one that does not resolve leaves its parameter alone, not the others."""

    async def handler(at: datetime, other: OrderedDict[str, int]) -> None: ...

    decoder = decoder_for(handler)
    assert decoder is not None
    args, _ = decoder.decode(["2025-01-01T00:00:00"], {})
    assert args == [datetime(2025, 1, 1)]
    assert decoder.decode([], {"other": {"a": 1}})[1] == {"other": {"a": 1}}


def test_a_value_that_does_not_decode_says_which_parameter() -> None:
    async def handler(key: UUID) -> None: ...

    decoder = decoder_for(handler)
    assert decoder is not None
    with pytest.raises(TypeError, match="argument 'key' does not decode"):
        decoder.decode(["not-a-uuid"], {})


def test_a_workflow_parents_first_argument_is_left_alone() -> None:
    async def callback(results: list[Any], at: datetime) -> None: ...

    decoder = decoder_for(callback)
    assert decoder is not None
    inputs = [{"a": 1}]
    args, _ = decoder.decode([inputs, "2025-01-01T00:00:00+00:00"], {}, skip=1)
    assert args == [inputs, datetime(2025, 1, 1, tzinfo=UTC)]


# -- refused at enqueue ----------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_anywhere(value: float) -> None:
    async def handler(data: dict[str, Any]) -> None: ...

    with pytest.raises(SerializationError, match=r"argument 'data' holds .* at \['x'\]\[1\]"):
        enqueue_check(handler, {"x": [1.0, value]})
    with pytest.raises(SerializationError, match="JSON has no NaN or infinity"):
        enqueue_check(None, value)


def test_types_json_would_change_are_refused_unless_declared() -> None:
    async def loose(value: object, items: list[Any]) -> None: ...

    with pytest.raises(SerializationError, match="argument 'value' is a datetime, which arrives"):
        enqueue_check(loose, datetime.now(UTC), [])
    with pytest.raises(SerializationError, match=r"'items' holds a tuple at \[0\], which"):
        enqueue_check(loose, 1, [(1, 2)])
    with pytest.raises(SerializationError, match="is a UUID, which arrives as a str"):
        enqueue_check(loose, uuid4(), [])
    with pytest.raises(SerializationError, match="not registered in this app"):
        enqueue_check(None, Color.RED)  # by name, from a producer without the task


def test_what_the_worker_would_turn_into_another_type_is_refused() -> None:
    async def handler(at: datetime, day: date) -> None: ...

    with pytest.raises(
        SerializationError, match="'at' is a str, which the worker decodes to a datetime"
    ):
        enqueue_check(handler, "2025-01-01T00:00:00", date(2025, 1, 1))
    with pytest.raises(SerializationError, match="'day' is a datetime, which does not decode"):
        enqueue_check(handler, datetime.now(UTC), datetime.now(UTC))


def test_plain_arguments_skip_the_check() -> None:
    assert plain(("a", 1, True, None, 1.5), {"k": -2.0})
    assert not plain((math.nan,), {})
    assert not plain((), {"k": math.inf})
    assert not plain(([1],), {})
