"""aioqueue's pytest plugin, registered through the ``pytest11`` entry point: installed
with aioqueue, it is there in every pytest run, so it does nothing unless a test asks for
one of its fixtures (no autouse fixture, no server started up front, nothing flushed but
the databases of the server it started itself).

Fixtures (``aioqueue.testing`` has the functions that go with them):

- ``aioqueue_url``: this test's own backend: an in-process server of its own
  (``memory://...``, the default), or a database of its own on a real Redis server the
  plugin starts for the session when a test first needs it (``--aioqueue-redis=real``,
  the ini option ``aioqueue_redis = real``, or ``@pytest.mark.aioqueue_redis("real")``
  on a test or module). Its data is gone when the test ends.
- ``aioqueue_app``: a new ``App`` on ``aioqueue_url``, with a key prefix of its own,
  closed when the test ends: register tasks on it in the test.
- ``aioqueue_isolate``: a function that points an App of yours (the one your tasks are
  registered on) at ``aioqueue_url`` for the test, and back after.

The async fixtures need pytest-asyncio (``pip install 'aioqueue[testing]'``).
"""

from __future__ import annotations

import itertools
import uuid
from typing import TYPE_CHECKING, Any, cast

import pytest

from ..app import App
from ..ops.embedded import EmbeddedServer
from ..store import memory

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

BACKENDS = ("memory", "real")
DATABASES = 1024  # the plugin's server has this many: one per test, reused in turn


def _async_fixture() -> Callable[[Any], Any]:
    """pytest-asyncio's fixture decorator; without it, one whose fixtures say what they
    need (the plugin itself still loads: it is in every pytest run)."""
    try:
        import pytest_asyncio
    except ImportError:
        return _needs_pytest_asyncio
    return cast("Callable[[Any], Any]", pytest_asyncio.fixture)


def _needs_pytest_asyncio(fn: Any) -> Any:
    @pytest.fixture(name=fn.__name__)
    def needs_pytest_asyncio() -> None:
        pytest.fail("aioqueue's fixtures need pytest-asyncio: pip install 'aioqueue[testing]'")

    return needs_pytest_asyncio


async_fixture = _async_fixture()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("aioqueue")
    group.addoption(
        "--aioqueue-redis", choices=BACKENDS, default=None,
        help="the backend of aioqueue's fixtures: memory (in-process, default) or real "
        "(a redis-server the plugin starts)",
    )  # fmt: skip
    parser.addini("aioqueue_redis", "the backend of aioqueue's fixtures: memory or real")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "aioqueue_redis(backend): the backend of aioqueue's fixtures here: 'memory' or 'real'",
    )


def chosen_backend(request: pytest.FixtureRequest) -> str:
    """The marker's backend, else the command line's, else the ini file's, else memory."""
    marker = request.node.get_closest_marker("aioqueue_redis")
    config = request.config
    backend = (
        (marker.args[0] if marker is not None and marker.args else None)
        or config.getoption("--aioqueue-redis")
        or config.getini("aioqueue_redis")
        or "memory"
    )
    if backend not in BACKENDS:
        raise pytest.UsageError(f"aioqueue_redis: {backend!r} is not one of {', '.join(BACKENDS)}")
    return str(backend)


class RealServer:
    """The plugin's redis-server, started on first use; a database of its own per test."""

    def __init__(self) -> None:
        self._server: EmbeddedServer | None = None
        self._databases = itertools.cycle(range(1, DATABASES))

    def url_for_a_test(self) -> str:
        if self._server is None:
            server = EmbeddedServer(extra_args=("--databases", str(DATABASES)))
            server.start()
            self._server = server
        return f"redis://127.0.0.1:{self._server.port}/{next(self._databases)}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


@pytest.fixture(scope="session")
def aioqueue_real_server() -> Iterator[RealServer]:
    """The real server of ``aioqueue_redis("real")`` tests (started when first needed)."""
    real = RealServer()
    try:
        yield real
    finally:
        real.stop()


@pytest.fixture
def aioqueue_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """This test's own backend (see the module's docstring)."""
    if chosen_backend(request) == "memory":
        name = f"t{uuid.uuid4().hex[:12]}"
        try:
            yield f"memory://{name}"
        finally:
            memory.forget(name)
        return
    real: RealServer = request.getfixturevalue("aioqueue_real_server")
    url = real.url_for_a_test()
    try:
        yield url
    finally:
        _flush_database(url)


def _flush_database(url: str) -> None:
    """Empty a test's database on the plugin's own server, for the test that gets it next."""
    from redis import Redis

    client = Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


@async_fixture
async def aioqueue_app(aioqueue_url: str) -> AsyncIterator[App]:
    """A new App on this test's backend, with a key prefix of its own."""
    app = App(redis_url=aioqueue_url, prefix=f"t{uuid.uuid4().hex[:12]}")
    try:
        yield app
    finally:
        await app.close()


@async_fixture
async def aioqueue_isolate(aioqueue_url: str) -> AsyncIterator[Callable[[App], App]]:
    """``aioqueue_isolate(app)`` points your App at this test's backend until it ends."""
    used: list[App] = []

    def isolate(app: App) -> App:
        app.set_redis_url(aioqueue_url)
        used.append(app)
        return app

    try:
        yield isolate
    finally:
        for app in used:
            await app.close()
            app.set_redis_url(None)
