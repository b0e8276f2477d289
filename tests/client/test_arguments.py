"""DESIGN.md §12: an argument arrives as it was sent, or the enqueue refuses it, writing
nothing. The worker decodes what a handler's annotations declare, and nothing for a
handler whose parameters are JSON's own."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import pydantic
import pytest
from redis.asyncio import Redis

import aioqueue
from tests.client.test_bad_input import assert_nothing_written
from tests.helpers import run_until_idle


@dataclasses.dataclass(frozen=True)
class Invoice:
    number: int
    due: datetime


class Customer(pydantic.BaseModel):
    id: UUID
    name: str


async def test_declared_types_arrive_as_sent(app: aioqueue.App) -> None:
    received: list[Any] = []

    @app.task(queue="q")
    async def bill(
        customer: Customer, invoice: Invoice, amount: Decimal, lines: tuple[int, ...],
        sent_at: datetime, key: UUID | None = None,
    ) -> None:  # fmt: skip
        received.extend([customer, invoice, amount, lines, sent_at, key])

    now, key = datetime.now(UTC), uuid4()
    customer, invoice = Customer(id=uuid4(), name="Ada"), Invoice(7, now)
    job = await bill.enqueue(customer, invoice, Decimal("19.90"), (1, 2, 3), now, key=key)
    await run_until_idle(app, queues=["q"])
    assert await job.status() is aioqueue.JobStatus.COMPLETE
    sent = [customer, invoice, Decimal("19.90"), (1, 2, 3), now, key]
    assert received == sent
    assert [type(value) for value in received] == [type(value) for value in sent]


async def test_what_json_would_change_is_refused_and_nothing_written(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def store(values: list[float], meta: dict[str, Any]) -> None: ...

    queue = app.queue("q")
    with pytest.raises(aioqueue.SerializationError, match=r"'values' holds nan at \[1\]"):
        await store.enqueue([1.0, math.nan], {})
    with pytest.raises(aioqueue.SerializationError, match="'meta' holds inf"):
        await store.enqueue([], {"x": math.inf})
    with pytest.raises(aioqueue.SerializationError, match=r"'meta' holds a datetime at \['at'\]"):
        await store.enqueue([], {"at": datetime.now(UTC)})
    with pytest.raises(aioqueue.SerializationError, match="'values' is a tuple"):
        await store.enqueue((1.0, 2.0), {})
    with pytest.raises(aioqueue.SerializationError, match="JSON has no NaN"):
        await app.queue("other").enqueue("elsewhere", math.nan)  # by name: the same rule
    with pytest.raises(aioqueue.SerializationError, match="JSON has no NaN"):
        await queue.enqueue_many([store.enqueue([1.0], {}), store.enqueue([math.nan], {})])
    await assert_nothing_written(redis, prefix, queue)


async def test_a_producer_without_the_task_sends_json_the_worker_decodes(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    """A producer in another service enqueues by name with the JSON forms (an ISO time, a
    UUID's str); the worker's handler declares the types and gets them. A value that is
    not the declared type's JSON form buries the job, naming the parameter."""
    received: list[Any] = []

    @app.task(queue="q", retries=3)
    async def remind(at: datetime, user: UUID) -> None:
        received.extend([at, user])

    user = uuid4()
    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as producer:
        queue = producer.queue("q")
        good = await queue.enqueue("remind", "2025-06-01T08:00:00+00:00", str(user))
        bad = await queue.enqueue("remind", "tomorrow", str(user))
    await run_until_idle(app, queues=["q"])
    assert received == [datetime(2025, 6, 1, 8, tzinfo=UTC), user]
    assert await app.queue("q").job(good.id).status() is aioqueue.JobStatus.COMPLETE
    info = await app.queue("q").job(bad.id).info()
    assert info.status is aioqueue.JobStatus.DEAD and info.attempts == 1  # not retried
    assert info.error is not None and "argument 'at' does not decode" in info.error.message


async def test_json_native_handlers_decode_nothing(app: aioqueue.App) -> None:
    """The worker's decode step costs such a task one truth test per job: it has no
    decoder at all."""

    @app.task
    async def native(a: int, b: str, c: dict[str, Any], d=None) -> None: ...  # type: ignore[no-untyped-def]

    @app.task
    async def typed(at: datetime) -> None: ...

    assert native.decoder is None
    assert typed.decoder is not None
