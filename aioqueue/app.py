"""App: the façade a user holds. It registers (into its ``Registry``), connects (its
``Connector``), and makes the handles: queues, workers, mailboxes, groups, topics."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, Unpack, cast, overload

from redis.exceptions import RedisError

from .client.eager import Eager
from .client.messaging import DEFAULT_MAX_MESSAGES, Group, Mailbox, channels, unread
from .client.queue import Queue
from .client.task import Task, TaskDecorator
from .client.topics import Topic, topic_names
from .client.workflows import Batch
from .core.errors import ConfigError
from .core.handlers import Handler, Subscriber, check_subscriber
from .core.keys import validate_name
from .core.registry import Registry
from .core.settings import APP_DEFAULTS, AppSettings, prefix_from_env
from .store import deadline
from .store.clients import Connector
from .store.connection import failure
from .worker import Worker
from .worker.drain import run_eagerly

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Coroutine, Iterable
    from types import TracebackType

    from redis.asyncio import Redis, RedisCluster

    from .client.queue import EnqueueCall
    from .core.handlers import RunRules, TaskKeywords
    from .core.middleware import LifecycleHook, Middleware
    from .core.observers import Observer
    from .core.periodic import Periodic
    from .core.registry import Schedule
    from .store.settled import SettledListener

P = ParamSpec("P")
R = TypeVar("R")
ObserverT = TypeVar("ObserverT", bound="Observer")


class App:
    """An aioqueue application: register tasks with ``@app.task``, enqueue with
    ``app.queue(name)`` or ``task.enqueue(...)``, run them with ``app.worker()``.

    Constructing an App touches nothing: Redis is reached on first use. ``redis_url``
    may name one server (``redis://``, ``rediss://``, ``unix://``), a Cluster
    (``redis+cluster://host:port,host:port``) or a Sentinel-managed master
    (``redis+sentinel://host:port,host:port/SERVICE``), or an in-process server for tests
    (``memory://``: ``aioqueue.testing``); or hand it a client of your own
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
        enqueue_timeout: float = APP_DEFAULTS.enqueue_timeout,
        call_timeout: float = APP_DEFAULTS.call_timeout,
        max_connections: int = APP_DEFAULTS.max_connections,
        due_first: Iterable[str] = APP_DEFAULTS.due_first,
        history: float = APP_DEFAULTS.history,
        replicas: int = APP_DEFAULTS.replicas,
        replica_timeout: float = APP_DEFAULTS.replica_timeout,
        client: Redis | RedisCluster | None = None,
    ) -> None:
        if client is not None and redis_url is not None:
            raise ConfigError("give the App a redis_url or a client, not both")
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
            enqueue_timeout=enqueue_timeout,
            call_timeout=call_timeout,
            max_connections=max_connections,
            due_first=frozenset([due_first] if isinstance(due_first, str) else due_first),
            history=history,
            replicas=replicas,
            replica_timeout=replica_timeout,
        )
        self.registry = Registry(
            default_queue=default_queue, default_max_attempts=default_max_attempts
        )
        self._queues: dict[str, Queue] = {}
        self._connector = Connector(self.settings, client)
        self.eager_mode = Eager(self._connector, functools.partial(run_eagerly, self))

    # -- tasks -------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: None = None, /, **options: Unpack[TaskKeywords]) -> TaskDecorator: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Unpack[TaskKeywords]
    ) -> Task[..., Any] | TaskDecorator:
        """Register a handler (async, or plain ``def`` run in a thread) as a task.

        Options (``core.handlers.TaskKeywords``): ``name``, ``queue``, ``timeout`` (seconds,
        default 300), ``priority``, ``never_retry`` (errors that end the job at once),
        ``dead_letter``; ``retries`` is how many times a failed job runs again (default:
        the app's ``default_max_attempts - 1``), or ``"forever"``: until it succeeds, only
        a ``never_retry`` error or a cancellation ending it; ``backoff`` spaces them
        (exponential with jitter, capped).

        ``rate_limit`` (``"100/s"``, with bursts of up to ``burst``) and ``max_concurrency``
        limit the task across every worker. They are its queue's limits (``Queue.set_limits``,
        enforced inside Redis), so a task that declares them must have its queue to itself;
        workers write them to Redis when they start (if they differ from what is there).
        """
        options_for = self.registry.task_options(options)

        def register(handler: Callable[..., Any]) -> Task[..., Any]:
            registered: Task[..., Any] = Task(handler, options_for(handler.__name__), self.queue)
            self.registry.add_task(registered)
            return registered

        return register(fn) if fn is not None else TaskDecorator(register)

    # -- middleware and lifecycle hooks ----------------------------------------------------

    def middleware(self, layer: Middleware) -> Middleware:
        """Decorator: ``async def mw(job, call_next)`` runs around every job of this app
        (the first registered is outermost). Return ``await call_next()`` (or change it)."""
        self.registry.middleware.append(layer)
        return layer

    def add_observer(self, observer: ObserverT) -> ObserverT:
        """Register an observer (metrics, tracing): it sees every enqueue of this app
        and every job its workers run (see ``aioqueue.Observer``)."""
        self.registry.observers = (*self.registry.observers, observer)
        return observer

    def on_startup(self, hook: LifecycleHook) -> LifecycleHook:
        """Decorator: ``async def hook(state)`` runs when a worker starts, before any job;
        put shared resources in ``state``; handlers reach it as ``current_job().state``."""
        self.registry.startup_hooks.append(hook)
        return hook

    def on_shutdown(self, hook: LifecycleHook) -> LifecycleHook:
        """Decorator: ``async def hook(state)`` runs when a worker has stopped (close what
        startup opened), in reverse order of registration."""
        self.registry.shutdown_hooks.append(hook)
        return hook

    # -- periodic jobs -------------------------------------------------------------------

    def periodic(self, **schedule: Unpack[Schedule]) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task by itself: ``@app.periodic(cron="0 9 * * MON", tz="Europe/Paris")``
        (or ``every=60``) above ``@app.task``; also ``args``, ``kwargs``, ``name``,
        ``missed`` ("skip" or "latest") and ``misfire_grace`` (``core.registry.Schedule``).
        Every worker serving the task's queue runs the scheduler; each tick is enqueued
        once. See ``aioqueue.core.periodic``."""

        def declare(task: Task[P, R]) -> Task[P, R]:
            self.registry.declare_periodic(task, schedule)
            return task

        return declare

    async def add_periodic(
        self, task: Task[..., Any] | str, *, queue: str | None = None, **schedule: Unpack[Schedule]
    ) -> Periodic:
        """Add (or replace) a periodic job at run time; running workers pick it up. Takes
        ``@app.periodic``'s options, and ``queue`` (default: the task's)."""
        spec = self.registry.periodic_spec(task, schedule, queue=queue, declared=False)
        await self.queue(spec.queue).add_periodic(spec)
        return spec

    async def remove_periodic(self, name: str, *, queue: str | None = None) -> bool:
        """Remove a periodic job added at run time (or declared: until a worker restarts)."""
        return await self.queue(queue).remove_periodic(name)

    def declared_periodic(self, queue: str) -> list[Periodic]:
        """The periodic specs declared in code for one queue."""
        return self.registry.declared_periodic(queue)

    def find_task(self, name: str) -> Handler[..., Any] | None:
        """The task a job names (or the subscriber a topic message runs as)."""
        return self.registry.find_task(name)

    @property
    def tasks(self) -> dict[str, Task[..., Any]]:
        """Registered tasks by name (a copy)."""
        return {name: cast("Task[..., Any]", task) for name, task in self.registry.tasks.items()}

    def queue_names(self) -> list[str]:
        """Every queue a registered task uses, plus the default queue."""
        return self.registry.queue_names()

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
        ``aioqueue.client.messaging``). ``max_messages`` bounds what it keeps (0: no bound)."""
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
        self, topic: str, *, group: str, batch: int | None = None, **rules: Unpack[RunRules]
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
        options_for = self.registry.subscriber_options(rules)
        if batch is not None and (isinstance(batch, bool) or batch < 1):
            raise ConfigError(f"batch must be a positive int or None, not {batch!r}")
        validate_name("topic", topic)
        validate_name("subscriber group", group)

        def register(handler: Callable[[Any], Any]) -> Subscriber:
            check_subscriber(handler, topic, group)
            options = options_for(handler.__name__)
            registered = Subscriber(topic, group, Handler(handler, options), batch)
            self.registry.add_subscriber(registered)
            return registered

        return register

    async def topics(self) -> list[Topic]:
        """Every topic with a subscriber group under this app's prefix (and every topic
        this app has subscribers for), by name."""
        names = await topic_names(self, {each.topic for each in self.registry.subscribers.values()})
        return [self.topic(name) for name in names]

    @property
    def subscribers(self) -> dict[str, Subscriber]:
        """Every subscriber registered on this app, by run name."""
        return dict(self.registry.subscribers)

    def worker(self, **options: Any) -> Worker:
        """A Worker for this app; see ``Worker`` for the options."""
        return Worker(self, **options)

    def eager(self) -> Eager:
        """For the tests of code that enqueues: within ``with app.eager():`` an enqueue
        returns once its job (and what it enqueued) has run in this process, on an
        in-process server of its own, after the same JSON round trip
        (``aioqueue.client.eager``; ``pip install 'aioqueue[testing]'``)."""
        return self.eager_mode

    # -- Redis ---------------------------------------------------------------------------

    @property
    def redis_url(self) -> str | None:
        """The URL in force: set_redis_url(), else the constructor's, else the environment
        (for a client given to the App: its address, for messages)."""
        return self._connector.url

    def set_redis_url(self, url: str | None) -> None:
        """Point the app at a server chosen at run time (the CLI's embedded server);
        None goes back to the constructor's URL or the environment."""
        self._connector.set_url(url)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the app's Redis clients belong to (None until it connects).
        Code on another thread reads through the app on that loop."""
        return self._connector.loop

    async def client(self) -> Redis:
        """The app's Redis client for the running event loop (created on first use).
        Raises ServerUnavailable (or AuthenticationFailed, ...) if Redis cannot be used
        (within ``call_timeout``)."""
        try:
            async with deadline.within(self.settings.call_timeout, "call_timeout"):
                return (await self._connector.connect()).shared
        except RedisError as exc:
            raise failure(exc, self.redis_url or "") or exc from exc

    async def internal_client(self) -> Redis:
        """The client for aioqueue's own bounded traffic (enqueues, worker loops)."""
        return (await self._connector.connect()).internal

    def settled_listener(self) -> SettledListener:
        """What ``Job.result()`` waits on: one subscription per App and event loop."""
        return self._connector.settled_listener(self.settings.prefix)

    async def close(self) -> None:
        """Close the Redis clients (and their connections)."""
        await self._connector.close()

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
