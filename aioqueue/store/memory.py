"""The in-process backend: ``memory://`` URLs, for tests that start no server.

fakeredis (with Lua: ``pip install 'aioqueue[testing]'``) plays the server inside this
process, behind redis-py's own client and pools, so everything above ``store/`` runs as
it does on Redis: the same Lua scripts loaded and called by SHA (NOSCRIPT included), the
hot path's hand-packed EVALSHA on raw pool connections (``wire``, ``routing.Lines``),
BLPOP and XREADGROUP blocking with their wake lists, pub/sub, TIME. Servers are kept by
name (``core/memory.py``) for the life of the process.

Where fakeredis differs from Redis in what aioqueue relies on, ``memory_server`` makes it
behave as Redis does (blocked clients served oldest first, WAIT); where it cannot be
faithful, it refuses, naming the cause, rather than differ silently:
- another process cannot reach it (``aioqueue worker``, a worker process): the command
  line refuses the URL (``ops/``);
- it has no replicas: ``replicas=`` above 0 is refused at start-up (a call's own
  ``replicas=`` gets NotReplicated, as from a server without replicas);
- CLIENT PAUSE is refused (fakeredis would accept it and pause nothing);
- it is one server: no Cluster, no Sentinel (their URLs are other schemes).

Each server has its own clock (TIME, the scripts' clock, key expiry, stream delivery and
idle times): the host's plus an offset that ``advance_clock`` moves forward, which is how
the testing kit moves time for delayed and periodic jobs (``aioqueue.testing``).
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import TYPE_CHECKING, Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import ConfigError
from ..core.memory import memory_server_name

if TYPE_CHECKING:
    from types import ModuleType

    from ..core.settings import AppSettings

INSTALL = "pip install 'aioqueue[testing]'"
REDIS_VERSION = (7, 0)  # the version the suite's real servers run
MAX_CONNECTIONS = 4096  # as the real internal pool: a ceiling, not a target

_servers: dict[str, Any] = {}  # name -> FakeServer
_lock = threading.Lock()


def memory_pools(url: str, settings: AppSettings) -> tuple[Redis, Redis]:
    """The App's two clients (shared, internal) on the in-process server ``url`` names.
    ConfigError if fakeredis or its Lua is missing, or a setting needs a real server."""
    if settings.replicas:
        raise ConfigError(
            f"replicas={settings.replicas}: {url} has no replicas to WAIT for (replicas=0, "
            "or a real Redis with replicas)"
        )
    shared = _pool(
        url, BlockingConnectionPool, max_connections=settings.max_connections,
        timeout=settings.connect_timeout + settings.socket_timeout,
    )  # fmt: skip
    internal = _pool(url, ConnectionPool, max_connections=MAX_CONNECTIONS)
    return Redis.from_pool(shared), Redis.from_pool(internal)


def memory_client(url: str) -> Redis:
    """A plain client of the in-process server ``url`` names (to look at its keys, as
    ``Redis.from_url`` would on a real one); close it with ``aclose()``."""
    return Redis.from_pool(_pool(url, ConnectionPool, max_connections=MAX_CONNECTIONS))


def _pool(url: str, kind: type[ConnectionPool], **limits: Any) -> ConnectionPool:
    """A pool of connections to the server ``url`` names, with the real pools' retry
    policy (a connection CLIENT KILL closed is made again, as on Redis)."""
    return kind(
        connection_class=_connection_class(), server=_server(memory_server_name(url)),
        version=REDIS_VERSION, server_type="redis", client_class=Redis,
        decode_responses=False, retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError], **limits,
    )  # fmt: skip


def _server(name: str) -> Any:
    from fakeredis import FakeServer

    with _lock:
        found = _servers.get(name)
        if found is None:
            found = _servers[name] = FakeServer(version=REDIS_VERSION)
        return found


def forget(name: str) -> None:
    """Drop the in-process server ``name`` and its data (the next use starts afresh)."""
    with _lock:
        _servers.pop(name, None)


def check_available() -> None:
    """ConfigError (saying how to install it) unless memory:// can run here."""
    _connection_class()


# -- fakeredis, loaded on first use ---------------------------------------------------------

_CONNECTION: list[type[Any]] = []


def _connection_class() -> type[Any]:
    """The connection class of memory:// pools (``memory_server``; made once: fakeredis is
    imported then, so that only a memory:// URL needs it)."""
    if not _CONNECTION:
        _CONNECTION.append(_memory_server().MemoryConnection)
    return _CONNECTION[0]


def _memory_server() -> ModuleType:
    try:
        from . import memory_server
    except ImportError as exc:
        raise ConfigError(f"memory:// needs fakeredis with Lua: {INSTALL} ({exc})") from None
    return memory_server


# -- the clock ----------------------------------------------------------------------------


def clock_offset(url: str) -> float:
    """Seconds the clock of the in-process server ``url`` names is ahead of the host's."""
    offset = _memory_server().OFFSET
    return float(getattr(_server(memory_server_name(url)), offset, 0.0))


def advance_clock(url: str, seconds: float) -> None:
    """Move the clock of the in-process server ``url`` names forward (never back: a clock
    that went back would reorder what the scripts timed). ConfigError if this fakeredis
    reads the time somewhere the offset does not reach."""
    if not seconds >= 0:
        raise ValueError(f"time only moves forward (got {seconds} seconds)")
    clock = _memory_server()
    for name in clock.CLOCK_READERS:
        if getattr(importlib.import_module(name), "time", None) is not clock.SHIFTED:
            raise ConfigError(f"this fakeredis reads the time in {name}, out of memory://'s reach")
    server = _server(memory_server_name(url))
    with _lock:
        setattr(server, clock.OFFSET, getattr(server, clock.OFFSET, 0.0) + seconds)


def advance_clock_to(url: str, epoch_ms: int) -> None:
    """Move the clock of the in-process server ``url`` names to ``epoch_ms`` (or leave it,
    if it is there already)."""
    now = time.time() + clock_offset(url)
    advance_clock(url, max(0.0, epoch_ms / 1000 - now))
