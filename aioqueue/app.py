"""App: the task registry, the settings, the Redis client's lifecycle, and ``app.queue(name)``."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast, overload

from redis.exceptions import RedisClusterException, RedisError

from .backoff import Backoff, Exponential
from .errors import ConfigError, ServerUnavailable
from .messaging import DEFAULT_MAX_MESSAGES, Group, Mailbox, channels, unread
from .periodic import Missed, Periodic
from .priorities import DEFAULT_PRIORITY, resolve_priority
from .queue import Queue
from .settings import (
    APP_DEFAULTS,
    ENV_REDIS_URL,
    AppSettings,
    check_redis_url,
    mask_url,
    prefix_from_env,
    redis_url_from_env,
)
from .store.connection import Clients, describe_client, failure, make_clients, settle_cluster
from .store.keys import channels_registry, validate_name
from .store.scripts import load_all
from .store.server import warn_if_evicting
from .store.settled import SettledListener
from .task import TASK_DEFAULTS, UNLIMITED, Task, TaskOptions
from .topics import (
    SUBSCRIBER_PREFIX,
    Subscriber,
    Topic,
    check_subscriber,
    subscriber_run_name,
)
from .worker import Worker
from .workflows import Batch

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
    from types import TracebackType

    from redis.asyncio import Redis, RedisCluster

    from .limits import QueueLimits
    from .middleware import LifecycleHook, Middleware
    from .observers import Observer
    from .queue import EnqueueCall

P = ParamSpec("P")
R = TypeVar("R")
ObserverT = TypeVar("ObserverT", bound="Observer")


class App:
    """An aioqueue application: register tasks with ``@app.task``, enqueue with
    ``app.queue(name)`` or ``task.enqueue(...)``, run them with ``app.worker()``.

    Constructing an App touches nothing: Redis is reached on first use. ``redis_url``
    may name one server (``redis://``, ``rediss://``, ``unix://``), a Cluster
    (``redis+cluster://host:port,host:port``) or a Sentinel-managed master
    (``redis+sentinel://host:port,host:port/SERVICE``); or hand it a client of your own
    (``client=``: a ``redis.asyncio.Redis`` or ``RedisCluster``, e.g. for a managed
    service with its own discovery), which the App uses but does not close. A client is
    bound to one event loop, so an App given one lives on that loop.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        prefix: str | None = None,
        default_queue: str = APP_DEFAULTS.default_queue,
        max_payload_bytes: int = APP_DEFAULTS.max_payload_bytes,
        result_ttl: float = APP_DEFAULTS.result_ttl,
        idempotency_ttl: float | None = APP_DEFAULTS.idempotency_ttl,
        keep_payload: bool = APP_DEFAULTS.keep_payload,
        default_max_attempts: int = APP_DEFAULTS.default_max_attempts,
        dead_max_jobs: int = APP_DEFAULTS.dead_max_jobs,
        dead_ttl: float = APP_DEFAULTS.dead_ttl,
        socket_timeout: float = APP_DEFAULTS.socket_timeout,
        connect_timeout: float = APP_DEFAULTS.connect_timeout,
        max_connections: int = APP_DEFAULTS.max_connections,
        due_first: Iterable[str] = APP_DEFAULTS.due_first,
        history: float = APP_DEFAULTS.history,
        replicas: int = APP_DEFAULTS.replicas,
        replica_timeout: float = APP_DEFAULTS.replica_timeout,
        client: Redis | RedisCluster | None = None,
    ) -> None:
        if client is not None and redis_url is not None:
            raise ConfigError("give the App a redis_url or a client, not both")
        self._given_client = client
        self.settings = AppSettings(
            redis_url=redis_url,
            prefix=prefix or prefix_from_env(),
            default_queue=default_queue,
            max_payload_bytes=max_payload_bytes,
            result_ttl=result_ttl,
            idempotency_ttl=idempotency_ttl,
            keep_payload=keep_payload,
            default_max_attempts=default_max_attempts,
            dead_max_jobs=dead_max_jobs,
            dead_ttl=dead_ttl,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
            due_first=frozenset([due_first] if isinstance(due_first, str) else due_first),
            history=history,
            replicas=replicas,
            replica_timeout=replica_timeout,
        )
        self._tasks: dict[str, Task[..., Any]] = {}
        self._subscribers: dict[str, Subscriber] = {}
        self._periodic: dict[str, Periodic] = {}
        self.middleware_stack: list[Middleware] = []
        self.observers: tuple[Observer, ...] = ()
        self.startup_hooks: list[LifecycleHook] = []
        self.shutdown_hooks: list[LifecycleHook] = []
        self._queues: dict[str, Queue] = {}
        self._clients: Clients | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None  # see _connect
        self._connecting_loop: asyncio.AbstractEventLoop | None = None
        self._url_override: str | None = None
        self._settled: SettledListener | None = None

    # -- tasks -------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        *,
        name: str | None = ...,
        queue: str | None = ...,
        timeout: float | None = ...,
        retries: int | Literal["forever"] | None = ...,
        backoff: Backoff | None = ...,
        priority: int | str = ...,
        never_retry: tuple[type[BaseException], ...] = ...,
        dead_letter: bool = ...,
        rate_limit: str | None = ...,
        burst: int = ...,
        max_concurrency: int | None = ...,
    ) -> _TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
        timeout: float | None = TASK_DEFAULTS.timeout,
        retries: int | Literal["forever"] | None = None,
        backoff: Backoff | None = None,
        priority: int | str = TASK_DEFAULTS.priority,
        never_retry: tuple[type[BaseException], ...] = TASK_DEFAULTS.never_retry,
        dead_letter: bool = TASK_DEFAULTS.dead_letter,
        rate_limit: str | None = None,
        burst: int = 1,
        max_concurrency: int | None = None,
    ) -> Task[..., Any] | _TaskDecorator:
        """Register a handler (async, or plain ``def`` run in a thread) as a task.

        ``retries`` is how many times a failed job runs again (default: the app's
        ``default_max_attempts - 1``), or ``"forever"``: until it succeeds, only a
        ``never_retry`` error or a cancellation ending it; ``backoff`` spaces them
        (exponential with jitter, capped).

        ``rate_limit`` (``"100/s"``, with bursts of up to ``burst``) and ``max_concurrency``
        limit the task across every worker. They are its queue's limits (``Queue.set_limits``,
        enforced inside Redis), so a task that declares them must have its queue to itself;
        workers write them to Redis when they start (if they differ from what is there).
        """
        max_attempts = self._max_attempts(retries)

        def register(handler: Callable[..., Any]) -> Task[..., Any]:
            options = TaskOptions(
                name=handler.__name__ if name is None else name,
                queue=self.settings.default_queue if queue is None else queue,
                timeout=timeout,
                max_attempts=max_attempts,
                backoff=backoff or Exponential(),
                priority=resolve_priority(priority),
                never_retry=never_retry,
                dead_letter=dead_letter,
                rate_limit=rate_limit,
                burst=burst,
                max_concurrency=max_concurrency,
            )
            if options.name in self._tasks:
                raise ConfigError(f"a task named {options.name!r} is registered already")
            self._check_limits_alone(options)
            registered: Task[..., Any] = Task(handler, options, self.queue)
            self._tasks[options.name] = registered
            return registered

        return register(fn) if fn is not None else _TaskDecorator(register)

    def _check_limits_alone(self, options: TaskOptions) -> None:
        """A task's limits are its queue's: no other task may share a limited queue."""
        for other in self._tasks.values():
            if other.options.queue != options.queue:
                continue
            limited = [task for task in (options, other.options) if task.limits()]
            if limited:
                raise ConfigError(
                    f"task {limited[0].name!r} declares limits, which are its queue's: give it a "
                    f"queue of its own (queue {options.queue!r} has {other.name!r} and "
                    f"{options.name!r})"
                )

    def declared_limits(self, queue: str) -> QueueLimits | None:
        """The limits a task of ``queue`` declares (``rate_limit``, ``max_concurrency``)."""
        for task in self._tasks.values():
            if task.options.queue == queue and (limits := task.options.limits()):
                return limits
        return None

    def _max_attempts(self, retries: int | Literal["forever"] | None) -> int:
        if retries is None:
            return self.settings.default_max_attempts
        if retries == "forever":
            return UNLIMITED
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, 'forever' or None, got {retries!r}")
        return retries + 1

    # -- middleware and lifecycle hooks ----------------------------------------------------

    def middleware(self, layer: Middleware) -> Middleware:
        """Decorator: ``async def mw(job, call_next)`` runs around every job of this app
        (the first registered is outermost). Return ``await call_next()`` (or change it)."""
        self.middleware_stack.append(layer)
        return layer

    def add_observer(self, observer: ObserverT) -> ObserverT:
        """Register an observer (metrics, tracing): it sees every enqueue of this app
        and every job its workers run (see ``aioqueue.Observer``)."""
        self.observers = (*self.observers, observer)
        return observer

    def on_startup(self, hook: LifecycleHook) -> LifecycleHook:
        """Decorator: ``async def hook(state)`` runs when a worker starts, before any job;
        put shared resources in ``state``; handlers reach it as ``current_job().state``."""
        self.startup_hooks.append(hook)
        return hook

    def on_shutdown(self, hook: LifecycleHook) -> LifecycleHook:
        """Decorator: ``async def hook(state)`` runs when a worker has stopped (close what
        startup opened), in reverse order of registration."""
        self.shutdown_hooks.append(hook)
        return hook

    # -- periodic jobs -------------------------------------------------------------------

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        missed: Missed = "skip",
        misfire_grace: float = 60.0,
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task by itself: ``@app.periodic(cron="0 9 * * MON", tz="Europe/Paris")``
        (or ``every=60``) above ``@app.task``. Every worker serving the task's queue runs
        the scheduler; each tick is enqueued once. See ``aioqueue.periodic``."""

        def declare(task: Task[P, R]) -> Task[P, R]:
            spec = self._periodic_spec(
                task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs, name=name,
                missed=missed, misfire_grace=misfire_grace, declared=True,
            )  # fmt: skip
            if spec.name in self._periodic:
                raise ConfigError(f"a periodic job named {spec.name!r} is declared already")
            self._periodic[spec.name] = spec
            return task

        return declare

    async def add_periodic(
        self,
        task: Task[..., Any] | str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        queue: str | None = None,
        missed: Missed = "skip",
        misfire_grace: float = 60.0,
    ) -> Periodic:
        """Add (or replace) a periodic job at run time; running workers pick it up."""
        spec = self._periodic_spec(
            task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs, name=name,
            queue=queue, missed=missed, misfire_grace=misfire_grace, declared=False,
        )  # fmt: skip
        await self.queue(spec.queue).add_periodic(spec)
        return spec

    async def remove_periodic(self, name: str, *, queue: str | None = None) -> bool:
        """Remove a periodic job added at run time (or declared: until a worker restarts)."""
        return await self.queue(queue).remove_periodic(name)

    def declared_periodic(self, queue: str) -> list[Periodic]:
        """The periodic specs declared in code for one queue."""
        return [spec for spec in self._periodic.values() if spec.queue == queue]

    def _periodic_spec(
        self,
        task: Task[..., Any] | str,
        *,
        every: float | timedelta | None,
        kwargs: Mapping[str, Any] | None,
        name: str | None,
        queue: str | None = None,
        args: Sequence[Any],
        **options: Any,
    ) -> Periodic:
        task_name = task if isinstance(task, str) else task.name
        known = self._tasks.get(task_name)
        if known is not None:
            known.check_arguments(args, kwargs or {})
        return Periodic(
            name=task_name if name is None else name,
            task=task_name,
            queue=(known.options.queue if known else self.settings.default_queue)
            if queue is None
            else queue,
            every=every.total_seconds() if isinstance(every, timedelta) else every,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            priority=known.options.priority if known else DEFAULT_PRIORITY,
            **options,
        )

    def find_task(self, name: str) -> Task[..., Any] | None:
        """The task a job names (or the subscriber a topic message runs as)."""
        task = self._tasks.get(name)
        if task is None and name.startswith(SUBSCRIBER_PREFIX):
            subscriber = self._subscribers.get(name)
            return None if subscriber is None else subscriber.task
        return task

    @property
    def tasks(self) -> dict[str, Task[..., Any]]:
        """Registered tasks by name (a copy)."""
        return dict(self._tasks)

    def queue_names(self) -> list[str]:
        """Every queue a registered task uses, plus the default queue."""
        names = {self.settings.default_queue, *(t.options.queue for t in self._tasks.values())}
        return sorted(names)

    # -- queues and workers --------------------------------------------------------------

    def queue(self, name: str | None = None) -> Queue:
        """The queue with this name (the app's default queue when omitted)."""
        name = self.settings.default_queue if name is None else name
        if name not in self._queues:
            self._queues[name] = Queue(self, name)
        return self._queues[name]

    def batch(
        self,
        *,
        queue: str | None = None,
        on_complete: EnqueueCall[Any] | None = None,
        on_success: EnqueueCall[Any] | None = None,
    ) -> Batch:
        """Jobs enqueued together, with callbacks once all have settled (see ``Batch``):
        ``async with app.batch(on_complete=report.enqueue()) as batch: batch.add(...)``.
        The batch's queue: ``queue``, else its callbacks', else the default queue."""
        callback = on_complete or on_success
        chosen = self.queue(queue) if queue is not None or callback is None else callback._queue
        return Batch(chosen, on_complete=on_complete, on_success=on_success)

    def mailbox(self, name: str, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Mailbox:
        """The mailbox with this name: anyone sends, one reader fetches (see
        ``aioqueue.messaging``). ``max_messages`` bounds what it keeps (0: no bound)."""
        return Mailbox(self, name, max_messages)

    def group(self, name: str, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Group:
        """The group with this name: members send, and each reads every message after
        its own cursor. ``max_messages`` bounds what it keeps (0: no bound)."""
        return Group(self, name, max_messages)

    async def unread(self, member: str) -> dict[str, int]:
        """How many messages ``member`` has not acknowledged in each of its groups."""
        return await unread(self, member)

    async def channels(self) -> list[Mailbox | Group]:
        """Every mailbox sent to and group joined under this app's prefix, by name."""
        return await channels(self)

    def topic(self, name: str, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Topic:
        """The topic with this name: publish to it; every subscriber group (see
        ``subscriber``) processes every message. ``max_messages`` bounds what it keeps
        (0: no bound)."""
        return Topic(self, name, max_messages)

    def subscriber(
        self,
        topic: str,
        *,
        group: str,
        timeout: float | None = TASK_DEFAULTS.timeout,
        retries: int | Literal["forever"] | None = None,
        backoff: Backoff | None = None,
        never_retry: tuple[type[BaseException], ...] = TASK_DEFAULTS.never_retry,
        dead_letter: bool = TASK_DEFAULTS.dead_letter,
        batch: int | None = None,
    ) -> Callable[[Callable[[Any], Any]], Subscriber]:
        """Decorator: run ``fn(body)`` for every message of ``topic`` in subscriber
        group ``group``. Every group sees every message; the workers serving one group
        share its messages. Each runs under a task's rules: ``timeout``, ``retries``
        (then ``backoff``), ``never_retry``, and dead letters (``topic.dead_letters()``)
        unless ``dead_letter=False``; at least once: a worker that dies mid-message
        leaves it to another once its lease runs out.

        ``batch=N``: ``fn`` gets a list of up to N bodies (what one read brings: no waiting
        to fill it), for handlers that do better in bulk and to spare the per-run cost. A
        failed batch is retried as a whole; each message keeps its own attempts, so one
        with none left goes dead while the others run again."""
        max_attempts = self._max_attempts(retries)
        if batch is not None and (isinstance(batch, bool) or batch < 1):
            raise ConfigError(f"batch must be a positive int or None, not {batch!r}")
        validate_name("topic", topic)
        validate_name("subscriber group", group)

        def register(handler: Callable[[Any], Any]) -> Subscriber:
            check_subscriber(handler, topic, group)
            run_name = subscriber_run_name(topic, group)
            if run_name in self._subscribers:
                raise ConfigError(f"topic {topic!r} has a subscriber for group {group!r} already")
            options = TaskOptions(
                name=handler.__name__, queue=self.settings.default_queue, timeout=timeout,
                max_attempts=max_attempts, backoff=backoff or Exponential(),
                never_retry=never_retry, dead_letter=dead_letter,
            )  # fmt: skip
            registered = Subscriber(topic, group, Task(handler, options, self.queue), batch)
            self._subscribers[run_name] = registered
            return registered

        return register

    async def topics(self) -> list[Topic]:
        """Every topic with a subscriber group under this app's prefix (and every topic
        this app has subscribers for), by name."""
        redis = await self.client()
        listed: set[bytes] = await redis.smembers(channels_registry(self.settings.prefix))  # type: ignore[assignment]
        names = {raw.decode().partition(":")[2] for raw in listed if raw.startswith(b"topic:")}
        names |= {subscriber.topic for subscriber in self._subscribers.values()}
        return [self.topic(name) for name in sorted(names)]

    @property
    def subscribers(self) -> dict[str, Subscriber]:
        """Every subscriber registered on this app, by run name."""
        return dict(self._subscribers)

    def worker(self, **options: Any) -> Worker:
        """A Worker for this app; see ``Worker`` for the options."""
        return Worker(self, **options)

    # -- Redis ---------------------------------------------------------------------------

    @property
    def redis_url(self) -> str | None:
        """The URL in force: set_redis_url(), else the constructor's, else the environment
        (for a client given to the App: its address, for messages)."""
        if self._given_client is not None:
            return describe_client(self._given_client)
        return self._url_override or self.settings.redis_url or redis_url_from_env()

    def set_redis_url(self, url: str | None) -> None:
        """Point the app at a server chosen at run time (the CLI's embedded server);
        None goes back to the constructor's URL or the environment."""
        if self._clients is not None:
            raise ConfigError("set_redis_url() must be called while the app is not connected")
        self._url_override = check_redis_url(url) if url else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the app's Redis clients belong to (None until it connects).
        Code on another thread reads through the app on that loop."""
        return self._client_loop if self._clients is not None else None

    async def client(self) -> Redis:
        """The app's Redis client for the running event loop (created on first use).
        Raises ServerUnavailable (or AuthenticationFailed, ...) if Redis cannot be used."""
        try:
            return (await self._connect()).shared
        except RedisError as exc:
            raise failure(exc, self.redis_url or "") or exc from exc

    async def internal_client(self) -> Redis:
        """The client for aioqueue's own bounded traffic (enqueues, worker loops)."""
        return (await self._connect()).internal

    async def _connect(self) -> Clients:
        loop = asyncio.get_running_loop()
        if self._clients is not None and self._client_loop is loop:
            return self._clients
        # First uses that race (a page's reads fanned out at once) share one connect:
        # each would otherwise build clients of its own, and all but one would leak.
        if self._connecting is None or self._connecting_loop is not loop:
            self._connecting, self._connecting_loop = asyncio.Lock(), loop
        async with self._connecting:
            return await self._connect_once(loop)

    async def _connect_once(self, loop: asyncio.AbstractEventLoop) -> Clients:
        if self._given_client is not None and self._clients is None:
            given = cast("Redis", self._given_client)  # (see store.connection.make_clients)
            await load_all(given)
            await warn_if_evicting(given)
            self._clients, self._client_loop = Clients(given, given, owned=False), loop
        if self._clients is None or self._client_loop is not loop:
            url = self.redis_url
            if not url:
                raise ServerUnavailable(
                    f"no Redis URL: pass App(redis_url=...) or set {ENV_REDIS_URL}"
                )
            clients = make_clients(check_redis_url(url), self.settings)
            try:  # kept only once it works: a failed first contact is tried afresh
                await load_all(clients.internal)
                await warn_if_evicting(clients.internal)
                await settle_cluster(clients.shared)
            except RedisClusterException as exc:  # no node of the cluster answered
                await clients.aclose()
                raise ServerUnavailable(
                    f"cannot reach the cluster at {mask_url(url)}: {exc}"
                ) from exc
            except BaseException:
                await clients.aclose()
                raise
            self._clients, self._client_loop = clients, loop
        return self._clients

    def settled_listener(self) -> SettledListener:
        """What ``Job.result()`` waits on: one subscription per App and event loop."""
        loop = asyncio.get_running_loop()
        if self._settled is None or self._settled.loop is not loop:
            self._settled = SettledListener(self.internal_client, f"{self.settings.prefix}:wake")
        return self._settled

    async def close(self) -> None:
        """Close the Redis clients (and their connections)."""
        settled, self._settled = self._settled, None
        if settled is not None and settled.loop is asyncio.get_running_loop():
            await settled.close()
        clients, self._clients, self._client_loop = self._clients, None, None
        if clients is not None:
            await clients.aclose()

    async def __aenter__(self) -> App:
        await self.client()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _TaskDecorator:
    """What ``@app.task(...)`` returns: applied to a handler, it registers a Task."""

    def __init__(self, register: Callable[[Callable[..., Any]], Task[..., Any]]) -> None:
        self._register = register

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Task[..., Any]:
        return self._register(fn)
