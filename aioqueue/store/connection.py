"""The Redis clients of an App, and the connection policy they share.

Two pools, because their traffic differs:
- ``internal``: a plain pool for aioqueue's own traffic (enqueues, the worker's loops),
  whose concurrency is bounded by design; it skips the blocking pool's per-command wait
  machinery (~60 µs a command here). Each queue's enqueue batcher keeps one of its
  connections (``wire.checkout``) and sends packed script calls on it (see batching.py).
- ``shared``: a blocking pool (waits for a free connection instead of raising) for
  user-driven calls whose concurrency aioqueue does not control (job.result(), info, admin).

Every script aioqueue runs is safe to send twice (an enqueue finds its own record, a take
returns what the same lease token took, acks carry the lease token), so a bounded retry
after a dropped connection is safe and hides blips; it is bounded by the call's deadline
too (``deadline.DeadlineRetry``). Responses stay bytes: job payloads need not be UTF-8,
and decoding must never destroy them.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from inspect import signature
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, OutOfMemoryError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import (
    AioqueueError,
    AuthenticationFailed,
    EnqueueUnconfirmed,
    PermissionDenied,
    ServerOutOfMemory,
    ServerUnavailable,
    TlsFailed,
    describe,
)
from ..core.memory import MEMORY_SCHEME
from ..core.settings import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    cluster_nodes,
    mask_url,
    sentinel_service,
)
from .deadline import DeadlineRetry
from .memory import memory_pools
from .routing import close_lines

if TYPE_CHECKING:
    from ..core.settings import AppSettings
    from .sentinel import MasterWatch

CALL_FAILURES: tuple[type[Exception], ...] = (RedisError, AttributeError, TypeError)
"""What a call through redis-py raises when Redis or the connection fails: its own errors,
and the AttributeError or TypeError of a connection closed under the call (see
``lost_under_call``; ``failure`` tells those from a bug)."""
RETRIES = 3
SENTINEL_RETRIES = 8  # ~5 s of reconnecting: a failover's election takes a few seconds
INTERNAL_MAX_CONNECTIONS = 4096  # a ceiling, not a target: internal demand is bounded


@dataclass(frozen=True, slots=True)
class Clients:
    shared: Redis
    internal: Redis
    owned: bool = True  # False: the user's own client (App(client=...)), not ours to close
    sentinel: Sentinel | None = None  # its clients of the Sentinels, closed with ours
    watch: MasterWatch | None = None  # Sentinel: where the master is, kept current

    async def aclose(self) -> None:
        if self.watch is not None:
            await self.watch.aclose()
        for client in (self.shared, self.internal):
            await lines_closed(client)
        if self.owned:
            await self.shared.aclose()
            await self.internal.aclose()
        if self.sentinel is not None:
            await self.sentinel.aclose()


async def settle_cluster(client: Redis) -> None:
    """Read a Cluster client's slot map now, before its first uses race each other: in
    redis-py 8.1 the first topology read recycles the connections it used while concurrent
    first commands may hold them ('NoneType' object has no attribute 'writelines', or
    "Connection closed by server", seen 1 in ~40 ``aioqueue info`` runs). One server: no-op."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        await client.ping(target_nodes=RedisCluster.PRIMARIES)  # (each node's first connection)


def describe_client(client: Any) -> str:
    """Where a client given to the App points, as a URL-like string for messages."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes() or client.startup_nodes
        return "redis+cluster://" + ",".join(node.name for node in nodes)
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


async def lines_closed(client: Redis) -> None:
    """Give back the raw connections ``routing`` kept for a client (before it closes)."""
    await close_lines(client)


_REDIS_PY = str(Path(redis.__file__).parent) + "/"
_ASYNCIO = str(Path(asyncio.__file__).parent) + "/"


def lost_under_call(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's AttributeError or TypeError of a connection closed
    under a call: in redis-py 8.1, after a Cluster's topology changes (a failover), the
    slot map's new read recycles connections that commands still hold ("'NoneType' object
    has no attribute 'writelines'"). Raised in redis-py's code (or asyncio's, under it),
    as opposed to a bug of aioqueue's or the caller's, which is raised elsewhere."""
    if not isinstance(exc, AttributeError | TypeError):
        return False
    files = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    inner = files[-1] if files else ""
    return inner.startswith((_REDIS_PY, _ASYNCIO)) and any(f.startswith(_REDIS_PY) for f in files)


def failure(exc: Exception, url: str, job_ids: list[str] | None = None) -> AioqueueError | None:
    """The aioqueue error for a Redis failure a user can act on, or None (a bug: let it
    be). ``job_ids``: an enqueue's, which any lost connection leaves unconfirmed: even
    "cannot connect" may end retries whose first attempt went out and landed. A
    connection closed under the call (``lost_under_call``) is a lost connection."""
    if lost_under_call(exc):
        exc = RedisConnectionError(f"the connection closed under the call ({describe(exc)})")
    where, reason = mask_url(url), describe(exc)
    if isinstance(exc, AuthenticationError):
        return AuthenticationFailed(f"Redis at {where} refused the credentials: {reason}")
    if isinstance(exc, NoPermissionError):
        return PermissionDenied(f"Redis at {where} denied it: {reason}")
    if isinstance(exc, OutOfMemoryError):
        return ServerOutOfMemory(f"Redis at {where} is out of memory: {reason}")
    if not isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return None
    handshake = url.startswith("rediss") and "Timeout connecting" in str(exc)
    if "SSL" in str(exc) or handshake:  # a TLS handshake with a plain server never ends
        return TlsFailed(f"TLS with Redis at {where} failed: {reason}")
    if job_ids is None:
        return ServerUnavailable(f"cannot reach Redis at {where}: {reason}")
    return EnqueueUnconfirmed(job_ids, exc, where)


def make_clients(url: str, settings: AppSettings) -> Clients:
    if urlsplit(url).scheme in CLUSTER_SCHEMES:
        return _cluster_clients(url, settings)
    if urlsplit(url).scheme in SENTINEL_SCHEMES:
        return _sentinel_clients(url, settings)
    if urlsplit(url).scheme == MEMORY_SCHEME:  # in-process, for tests (store/memory.py)
        return Clients(*memory_pools(url, settings))
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.connect_timeout,
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "decode_responses": False,
        **_handshake_options(),
    }
    shared = BlockingConnectionPool.from_url(
        url,
        max_connections=settings.max_connections,
        timeout=settings.connect_timeout + settings.socket_timeout,  # wait for a free one
        retry=retry_policy(RETRIES, settings.call_timeout, patient_connects=False),
        **options,
    )
    internal = ConnectionPool.from_url(
        url, max_connections=INTERNAL_MAX_CONNECTIONS,
        retry=retry_policy(RETRIES, patient_connects=False), **options,
    )  # fmt: skip
    return Clients(Redis.from_pool(shared), Redis.from_pool(internal))


def retry_policy(
    retries: int, default: float | None = None, *, patient_connects: bool = True
) -> DeadlineRetry:
    """How a connection retries after losing its server: a few times, backing off, and
    never past the deadline of the call under way (``deadline``); ``default`` bounds a
    command sent outside any call (the shared client's: user-driven calls). An enqueue
    retries until its deadline, a server that refuses connections too unless
    ``patient_connects`` is off (one server: down is down; under Sentinel, a failover)."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
    return DeadlineRetry(backoff, retries, default=default, patient_connects=patient_connects)


def _cluster_clients(url: str, settings: AppSettings) -> Clients:
    """Two RedisCluster clients (``redis+cluster://host:port[,host:port...]``): redis-py
    routes each command to the node serving its key's slot and follows MOVED, ASK and
    TRYAGAIN. A RedisCluster is not a ``Redis`` (it has the same command methods, no
    connection pool): ``store/routing.py`` finds raw connections on it, and the few
    calls that differ check ``routing.is_cluster``. Options from the query string: ``ssl_*``,
    ``read_from_replicas`` is not used (every read must see the latest write)."""
    parts = urlsplit(url)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    tls = parts.scheme.startswith("rediss")
    tls_options: dict[str, Any] = {k: v for k, v in query.items() if k.startswith("ssl_")}
    if "ssl_check_hostname" in tls_options:
        tls_options["ssl_check_hostname"] = tls_options["ssl_check_hostname"] in ("1", "true")

    def client() -> Redis:
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes(url)],
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            ssl=tls, socket_timeout=settings.socket_timeout,
            socket_connect_timeout=settings.connect_timeout,
            max_connections=settings.max_connections, decode_responses=False,
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), RETRIES),
            **_handshake_options(), **tls_options,
        )  # fmt: skip
        return cast("Redis", cluster)  # see the docstring

    return Clients(client(), client())


def _sentinel_clients(url: str, settings: AppSettings) -> Clients:
    """Two clients of the master that the Sentinels name (``redis+sentinel://host:port
    [,host:port...]/SERVICE[/db]``), whose connections follow it through failovers
    (``sentinel.MasterWatch``: writes wait while one is under way, and every connection
    moves to the new master at its switch). The URL's credentials are the data nodes';
    ``sentinel_username`` / ``sentinel_password`` in the query string are the Sentinels'
    own."""
    # Imported here: only a Sentinel URL needs them, never a worker's start on one server.
    from .following import FollowingPool
    from .sentinel import MasterWatch

    parts = urlsplit(url)
    nodes, service, db = sentinel_service(url)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    timeouts = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.connect_timeout,
    }
    sentinel_kwargs: dict[str, Any] = {**timeouts, "retry": Retry(NoBackoff(), 1)}
    for option in ("username", "password"):
        if f"sentinel_{option}" in query:
            sentinel_kwargs[option] = query[f"sentinel_{option}"]
    options: dict[str, Any] = {
        **timeouts, "db": db, "decode_responses": False,
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        **_handshake_options(),
    }  # fmt: skip
    if parts.scheme.startswith("rediss"):
        options["ssl"] = True
        options.update({k: v for k, v in query.items() if k.startswith("ssl_")})
    sentinel = Sentinel(nodes, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    watch = MasterWatch(sentinel, service, sentinel_kwargs)

    def client(default: float | None) -> Redis:
        pool = FollowingPool(
            service, sentinel, watch, max_connections=INTERNAL_MAX_CONNECTIONS,
            retry=retry_policy(SENTINEL_RETRIES, default), **options,
        )  # fmt: skip
        return Redis.from_pool(pool)

    return Clients(client(settings.call_timeout), client(None), sentinel=sentinel, watch=watch)


def _handshake_options() -> dict[str, Any]:
    """The options of a new connection's handshake, where the installed redis-py takes them
    (7.x has redis.maint_notifications, but its asyncio connections reject the argument)."""
    parameters = signature(AbstractConnection.__init__).parameters
    options: dict[str, Any] = {}
    if "maint_notifications_config" in parameters:
        # redis-py 8 sends CLIENT MAINT_NOTIFICATIONS on every new connection (Redis
        # Enterprise only; Redis 7 rejects it): one wasted round trip per connection.
        from redis.maint_notifications import MaintNotificationsConfig

        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    if "driver_info" in parameters:
        # CLIENT SETINFO's version, given once: without it redis-py 8 reads the package's
        # metadata for every new connection (~2 ms each; a worker opens several at start).
        from redis.driver_info import DriverInfo

        options["driver_info"] = DriverInfo(lib_version=redis.__version__)
    return options
