"""A connection closed under a call, as redis-py 8.1's Cluster client does after a
topology change (a manual failover): its new read of the slot map recycles connections
that running commands still hold, which then fail with ``AttributeError: 'NoneType'
object has no attribute 'writelines'``. That reached the user as a traceback (only a
RedisError was mapped); now it is the one-line error of a lost connection (an enqueue's:
``EnqueueUnconfirmed``). The error is injected here, on one server, where redis-py
raises it: its writer gone between its connect and its write."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

import aioqueue
from aioqueue.core.settings import mask_url
from aioqueue.store import reads


def close_under_next_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next command's connection is closed, by someone else, just before it writes
    (redis-py then calls ``None.writelines``); the commands after it go on as usual."""
    check: Callable[[AbstractConnection], Awaitable[None]] = AbstractConnection.check_health
    armed = [True]

    async def closed_meanwhile(connection: AbstractConnection) -> None:
        await check(connection)
        if armed and connection._writer is not None:
            armed.clear()
            connection._writer.close()  # (what the slot map's new read does to it)
            connection._writer = None

    monkeypatch.setattr(AbstractConnection, "check_health", closed_meanwhile)


async def test_a_read_whose_connection_closed_under_it_is_a_lost_connection(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = app.queue()
    await queue.counts()
    close_under_next_write(monkeypatch)
    with pytest.raises(aioqueue.ServerUnavailable) as raised:
        await queue.counts()
    message = str(raised.value)
    assert message.startswith(f"cannot reach Redis at {mask_url(app.redis_url or '')}: "), message
    assert "closed under the call" in message
    assert "writelines" in message  # (what redis-py said, for the curious)
    assert "\n" not in message
    assert (await queue.counts()).ready == 0  # the next call works


async def test_an_enqueue_whose_connection_closed_under_it_is_unconfirmed(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task
    async def work(n: int) -> int:
        return n

    await work.enqueue(0)  # (the batcher's connection, connected)
    close_under_next_write(monkeypatch)
    with pytest.raises(aioqueue.EnqueueUnconfirmed, match="closed under the call") as raised:
        await work.enqueue(1).options(id="closed")
    assert raised.value.job_id == "closed"
    again = await work.enqueue(1).options(id="closed")  # as the error says: safe to retry
    assert await again.status() == aioqueue.JobStatus.QUEUED


async def test_an_attribute_error_of_a_bug_stays_what_it_is(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not raised in redis-py: not called a lost connection."""

    async def broken(*_: Any, **__: Any) -> Any:
        raise AttributeError("'NoneType' object has no attribute 'writelines'")

    monkeypatch.setattr(reads, "counts", broken)
    with pytest.raises(AttributeError, match="writelines"):
        await app.queue().counts()
