"""Settings as frozen dataclasses, validated once; the one source of every default, and the
one place the environment is read.

``App``, ``Worker`` and the CLI take their defaults from ``APP_DEFAULTS`` and
``WORKER_DEFAULTS`` (instances made with nothing but the required fields), so a default is
written once: in the field below.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

from .errors import ConfigError
from .keys import validate_name
from .memory import MEMORY_SCHEME, memory_server_name
from .priorities import PriorityMode, planner

if TYPE_CHECKING:
    from collections.abc import Mapping

ENV_REDIS_URL = "AIOQUEUE_REDIS_URL"
ENV_PREFIX = "AIOQUEUE_PREFIX"
DEFAULT_PREFIX = "aioqueue"
DEFAULT_QUEUE = "default"

QueueOrder = Literal["fair", "strict"]
"""How a worker of several queues shares its slots between them: "fair", every queue
takes as it has work; "strict", a queue takes only while the ones listed before it have
no work announced."""


def check_timeout(timeout: float | None, where: str) -> None:
    """A handler timeout is a positive number of seconds, or None for no limit; one rule
    for the task's option and the per-call one."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError(f"{where}: timeout must be a number of seconds or None")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ConfigError(f"{where}: timeout must be positive (or None for no limit)")


def _check_seconds(name: str, value: object) -> None:
    """A timeout setting is a positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}")


CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
URL_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES, MEMORY_SCHEME)


def mask_url(url: str) -> str:
    """The URL with its password (if any) replaced by ``***``, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=user + host))


def check_redis_url(url: str) -> str:
    """Raise ConfigError (naming the URL, password masked) unless redis-py can use it as
    meant: a known scheme, a numeric port, and a db that is a number (redis-py would
    ignore ``/abc`` and use db 0)."""
    if not url:
        raise ConfigError(
            f"the Redis URL is empty: leave it out (None) to use {ENV_REDIS_URL}, or give one"
        )
    try:
        parts = urlsplit(url)
        if parts.scheme in CLUSTER_SCHEMES:
            cluster_nodes(url)
        elif parts.scheme in SENTINEL_SCHEMES:
            sentinel_service(url)
        elif parts.scheme == MEMORY_SCHEME:  # in-process, for tests (core/memory.py)
            memory_server_name(url)
        else:
            parts.port  # noqa: B018 - parses the port: raises ValueError if not a number
            _check_db(parts.path if parts.scheme != "unix" else "", parts.query)
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {mask_url(url)!r}: {exc}") from exc
    if parts.scheme not in URL_SCHEMES:
        schemes = ", ".join(f"{scheme}://" for scheme in URL_SCHEMES)
        raise ConfigError(f"invalid Redis URL {mask_url(url)!r}: it must start with {schemes}")
    return url


def _check_db(path: str, query: str) -> None:
    """The db of a server's URL (``/2``, or ``?db=2``) is a number; ValueError if not."""
    for db in (path.strip("/"), *parse_qs(query).get("db", ())):
        if db and not db.isdigit():
            raise ValueError(f"db {db!r} is not a number (redis://host:port/DB)")


def sentinel_service(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """The Sentinels, the service name and the db of a ``redis+sentinel://[user:pass@]
    host:port[,host:port...]/SERVICE[/db]`` URL; ValueError if it is malformed."""
    nodes = cluster_nodes(url)
    service, _, db = urlsplit(url).path.strip("/").partition("/")
    if not service:
        raise ValueError("the service name is missing (redis+sentinel://host:port/SERVICE)")
    if db and not db.isdigit():
        raise ValueError(f"db {db!r} is not a number")
    return nodes, service, int(db or 0)


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The (host, port) list of a ``redis+cluster://`` (or ``redis+sentinel://``) URL:
    ``[user:pass@]host:port[,host:port...]``; ValueError if one is malformed."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    nodes = []
    for node in hosts.split(","):
        host, _, port = node.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{node!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def redis_url_from_env() -> str | None:
    """The Redis URL from ``AIOQUEUE_REDIS_URL``, or None when unset or empty."""
    return os.environ.get(ENV_REDIS_URL) or None


def prefix_from_env() -> str:
    """The key prefix from ``AIOQUEUE_PREFIX``, else "aioqueue"."""
    return os.environ.get(ENV_PREFIX) or DEFAULT_PREFIX


@dataclass(frozen=True, slots=True, kw_only=True)
class AppSettings:
    """How an App talks to Redis and what it stores. Seconds at the API, ms in Redis."""

    redis_url: str | None = None
    prefix: str = DEFAULT_PREFIX
    default_queue: str = DEFAULT_QUEUE
    max_payload_bytes: int = 1024 * 1024
    result_ttl: float = 24 * 3600.0
    idempotency_ttl: float | None = None  # a completed job with no result; None: result_ttl
    keep_payload: bool = False  # completed records keep their payload (task, arguments)
    default_max_attempts: int = 3
    dead_max_jobs: int = 100_000  # per queue; the oldest go first; 0 = no cap
    dead_ttl: float = 30 * 24 * 3600.0  # seconds a dead job is kept; 0 = forever
    socket_timeout: float = 5.0  # one read or write on a connection
    connect_timeout: float = 5.0  # one connect (and its handshake)
    enqueue_timeout: float = 10.0  # an enqueue in all: retries, a failover or a slot move
    call_timeout: float = 5.0  # every other call in all (reads, admin, check): retries too
    max_connections: int = 64
    due_first: frozenset[str] = frozenset()  # queues whose due delayed jobs jump the queue
    history: float = 24 * 3600.0  # seconds of per-minute outcome counts kept; 0 = none
    replicas: int = 0  # an enqueue returns once this many replicas have it (WAIT)
    replica_timeout: float = 1.0  # seconds an enqueue waits for them

    def __post_init__(self) -> None:
        self._check_numbers()
        if self.redis_url is not None:  # ("": a mistake, not "use the environment")
            check_redis_url(self.redis_url)
        validate_name("queue", self.default_queue)
        for queue in self.due_first:
            validate_name("queue", queue)
        if self.max_payload_bytes <= 0:
            raise ConfigError("max_payload_bytes must be positive")

    def _check_numbers(self) -> None:
        if self.replicas < 0 or self.replica_timeout <= 0:
            raise ConfigError("replicas must be >= 0 and replica_timeout positive")
        if self.result_ttl < 0 or (self.idempotency_ttl or 0) < 0:
            raise ConfigError("result_ttl and idempotency_ttl must not be negative")
        if self.history < 0:
            raise ConfigError("history must not be negative")
        if self.dead_max_jobs < 0 or self.dead_ttl < 0:
            raise ConfigError("dead_max_jobs and dead_ttl must not be negative")
        if self.default_max_attempts < 1:
            raise ConfigError("default_max_attempts must be at least 1")
        if self.max_connections < 4:
            raise ConfigError("max_connections must be at least 4")
        for name in ("socket_timeout", "connect_timeout", "enqueue_timeout", "call_timeout"):
            _check_seconds(name, getattr(self, name))

    @property
    def result_ttl_ms(self) -> int:
        return int(self.result_ttl * 1000)

    @property
    def history_ms(self) -> int:
        return int(self.history * 1000)

    @property
    def idempotency_ttl_ms(self) -> int:
        """How long a completed job with no result keeps its record (and its id its
        meaning as an idempotency key)."""
        ttl = self.result_ttl if self.idempotency_ttl is None else self.idempotency_ttl
        return int(ttl * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """How a worker runs. ``lease`` is renewed every third of itself while a job runs."""

    queues: tuple[str, ...]
    concurrency: int = 50
    lease: float = 30.0
    grace: float = 10.0
    burst: bool = False
    wait_retries: bool = True  # burst: wait for the delayed retries of the jobs it ran
    idle_wait: float = 2.0  # BLPOP timeout; below socket_timeout so a wait never looks hung
    reclaim_interval: float = 5.0
    loop_lag_warning: float = 1.0  # log the job that blocks the event loop this long
    priority_mode: PriorityMode = "strict"
    priority_weights: Mapping[int, float] | None = None
    queue_order: QueueOrder = "fair"  # "strict": the order of ``queues`` is their priority
    log_jobs: bool = False  # an INFO line per finished job (off: a truth test per job)

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")
        for queue in self.queues:
            validate_name("queue", queue)
        if len(set(self.queues)) != len(self.queues):
            raise ConfigError("queues are listed twice")
        if self.concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        if self.lease < 1:
            raise ConfigError("lease must be at least 1 second")
        if self.grace < 0:
            raise ConfigError("grace must not be negative")
        if not 0.1 <= self.idle_wait <= 60:
            raise ConfigError("idle_wait must be between 0.1 and 60 seconds")
        if self.reclaim_interval <= 0:
            raise ConfigError("reclaim_interval must be positive")
        planner(self.priority_mode, self.priority_weights)  # validates both
        if self.queue_order not in ("fair", "strict"):
            raise ConfigError(f"unknown queue_order {self.queue_order!r}: 'fair' or 'strict'")

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)


APP_DEFAULTS = AppSettings()
WORKER_DEFAULTS = WorkerSettings(queues=(DEFAULT_QUEUE,))
