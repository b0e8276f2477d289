"""memory://: the in-process backend behaves as Redis does where aioqueue relies on it, and
refuses, naming why, where it cannot (the suite runs most tests on it too: conftest)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

import aioqueue
import aioqueue.store
from aioqueue.store import memory
from tests.helpers import plain_client, redis_ms


@pytest.fixture
async def server(prefix: str) -> AsyncIterator[Any]:
    """A client of an in-process server of this test's own (typed Any: redis-py's
    ``execute_command`` is untyped)."""
    client = plain_client(f"memory://{prefix}")
    yield client
    await client.aclose()
    memory.forget(prefix)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("memory://?maxmemory=1mb", "unknown option 'maxmemory': memory:// takes none"),
        ("memory://a?x=1&y=2", "unknown option 'x', 'y'"),
        ("memory://name:6379", "no credentials or port"),
        ("memory://user:secret@name", "no credentials or port"),
        ("memory://name/2", "takes a name only"),
        ("memory://bad name", "may use letters, digits"),
    ],
)
def test_a_bad_memory_url_is_one_clear_line(url: str, says: str) -> None:
    with pytest.raises(aioqueue.ConfigError, match="invalid Redis URL") as raised:
        aioqueue.App(redis_url=url)
    assert says in str(raised.value)
    assert "secret" not in str(raised.value)  # (masked, as any URL's password)
    assert "\n" not in str(raised.value)


async def test_apps_naming_one_server_share_it_and_others_do_not(prefix: str) -> None:
    apps = [aioqueue.App(redis_url=f"memory://{name}", prefix=prefix) for name in ("a", "a", "b")]
    try:
        await apps[0].queue().enqueue("some.task")
        assert [(await app.queue().counts()).ready for app in apps] == [1, 1, 0]
    finally:
        for app in apps:
            await app.close()
        for name in ("a", "b"):
            memory.forget(name)


async def test_blocked_clients_are_served_oldest_first_before_any_other_command(
    server: Any, prefix: str
) -> None:
    """As Redis: the client blocked longest gets the element, and gets it at once, so a
    client that asks after the push (blocking or not) does not take it first."""
    url = f"memory://{prefix}"
    clients = [plain_client(url) for _ in range(3)]
    try:
        first = asyncio.create_task(_pop(clients[0]))
        await asyncio.sleep(0.01)  # (blocked first)
        second = asyncio.create_task(_pop(clients[1]))
        await asyncio.sleep(0.01)
        await server.rpush("k", "one")
        assert await clients[2].lpop("k") is None  # already the oldest waiter's
        assert await first == (b"k", b"one")
        assert not second.done()
        await server.rpush("k", "two")
        assert await second == (b"k", b"two")
    finally:
        for client in clients:
            await client.aclose()


async def test_a_blocked_client_that_times_out_or_closes_takes_nothing(
    server: Any, prefix: str
) -> None:
    waiting = plain_client(f"memory://{prefix}")
    try:
        assert await waiting.blpop(["k"], timeout=0.05) is None
        blocked = asyncio.create_task(_pop(waiting))
        await asyncio.sleep(0.01)
        blocked.cancel()  # (redis-py drops the connection of a cancelled read)
        with pytest.raises(asyncio.CancelledError):
            await blocked
    finally:
        await waiting.aclose()
    await server.rpush("k", "kept")
    assert await server.lrange("k", 0, -1) == [b"kept"]


async def _pop(client: Redis) -> Any:
    return await client.blpop(["k"], timeout=5)


async def test_wait_answers_as_a_server_without_replicas(server: Any) -> None:
    assert await server.execute_command("WAIT", 0, 0) == 0
    assert await server.execute_command("WAIT", 1, 20) == 0  # after its timeout


async def test_app_replicas_are_refused_at_start_up(prefix: str) -> None:
    app = aioqueue.App(redis_url=f"memory://{prefix}", replicas=1)
    with pytest.raises(aioqueue.ConfigError, match="has no replicas to WAIT for"):
        await app.client()
    await app.close()


async def test_client_pause_is_refused_rather_than_ignored(server: Any) -> None:
    with pytest.raises(ResponseError, match="CLIENT PAUSE is not simulated by memory://"):
        await server.execute_command("CLIENT", "PAUSE", 100)


async def test_the_clock_moves_time_expiry_and_stream_idle_times_together(
    server: Any, prefix: str
) -> None:
    url = f"memory://{prefix}"
    before = await redis_ms(server)
    await server.set("short", "lived", px=60_000)
    await server.xgroup_create("log", "readers", id="0", mkstream=True)
    await server.xadd("log", {"n": "1"}, id="1-0")
    await server.xreadgroup("readers", "me", {"log": ">"})
    memory.advance_clock(url, 61)
    assert await redis_ms(server) - before >= 61_000
    assert await server.get("short") is None
    [pending] = await server.xpending_range("log", "readers", "-", "+", 1)
    assert pending["time_since_delivered"] >= 61_000
    with pytest.raises(ValueError, match="only moves forward"):
        memory.advance_clock(url, -1)


async def test_a_missing_fakeredis_is_one_line_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    monkeypatch.setattr(memory, "_CONNECTION", [])
    monkeypatch.setitem(sys.modules, "aioqueue.store.memory_server", None)
    monkeypatch.delattr(aioqueue.store, "memory_server", raising=False)
    app = aioqueue.App(redis_url=f"memory://{prefix}")
    with pytest.raises(aioqueue.ConfigError, match=r"^memory:// needs fakeredis with Lua: pip"):
        await app.client()
    await app.close()


async def test_the_eviction_check_reads_that_memory_never_evicts(server: Any) -> None:
    assert await server.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert (await server.info("stats"))["evicted_keys"] == 0


async def test_scripts_lost_by_the_server_are_loaded_again(app: aioqueue.App) -> None:
    """NOSCRIPT, on the hot path and off it: the script goes again after SCRIPT LOAD."""

    @app.task
    async def noop(n: int) -> None: ...

    redis = await app.client()
    await noop.enqueue(0)
    await redis.script_flush()
    assert (await noop.enqueue(1)).created
    await redis.script_flush()
    assert all(job.created for job in await asyncio.gather(*(noop.enqueue(n) for n in range(9))))
    await redis.script_flush()
    assert (await app.queue().counts()).ready == 11
