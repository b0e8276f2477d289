"""Worker: runs the jobs of one or more queues with bounded concurrency.

A worker is the list of components it runs, each owning its loops, its wake-up tokens,
its keys and its state. ``start`` builds them once Redis answers, each given its
collaborators, and starts them; ``stop`` stops them in three groups:

  intake      per queue: the consumer (takes jobs), the promoter (delayed jobs fall due),
              the periodic scheduler (cron and interval ticks); per subscriber group: its
              topic consumer
  settling    the in-flight jobs (the one owner of each job: runs it, settles it once),
              then the ack batchers (hold the leases, ack in batches)
  background  hand-offs, lease renewal and reclaim, abort listener, loop-lag monitor,
              dead-letter retention, heartbeat

One job's path: ``consumer`` takes it -> ``inflight`` admits it into a slot and runs it
through ``runner`` -> its Settlement goes to its queue's ``acks`` -> ``ack.lua``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import signal
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from ..core.keys import QueueKeys, TopicKeys
from ..core.observers import JobWatchers
from ..core.settings import WORKER_DEFAULTS, WorkerSettings
from ..store import reads, stored_limits
from . import outages
from .aborts import AbortListener
from .acks import AckBatcher
from .burst import Burst
from .consumer import QueueConsumer
from .contact import reach_redis
from .delivery import HandOff
from .heartbeat import Heartbeat
from .inflight import InFlight
from .injection import WorkerResources
from .leases import LeaseKeeper
from .looplag import LoopLagMonitor
from .loops import Component, stop_all
from .order import StrictOrder
from .promoter import Promoter
from .retention import DeadLetterTrimmer
from .runner import RunEnv
from .scheduler import PeriodicScheduler
from .subscriptions import TopicAcks, TopicConsumer

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

    from redis.asyncio import Redis

    from ..core.handlers import Subscriber
    from ..core.priorities import PriorityMode
    from ..core.registry import Registry
    from ..core.settings import AppSettings, QueueOrder

logger = logging.getLogger(__name__)

ABORTS_READY = 2.0  # seconds a starting worker waits for its abort channels, at most


class WorkerHost(Protocol):
    """What a Worker needs of its App: the registry, the settings and a client."""

    @property
    def registry(self) -> Registry: ...

    @property
    def settings(self) -> AppSettings: ...

    @property
    def redis_url(self) -> str | None: ...

    async def internal_client(self) -> Redis: ...


class Worker:
    """Runs jobs. Use ``async with app.worker(...)`` inside an existing asyncio service,
    ``await worker.run()`` as a process's main coroutine, or ``await
    worker.run_until_idle()`` to drain the queues and return (burst mode).

    Options: ``queues`` (default: every queue the app's tasks use), ``concurrency`` (jobs
    at once), ``lease`` (seconds; renewed while a job runs), ``grace`` (seconds running
    jobs get to finish at shutdown before they are cancelled and put back), ``burst``
    (with ``wait_retries``, default True: a burst worker also waits for the delayed
    retries of the jobs it ran, and runs them),
    ``priority_mode`` ("strict": higher levels always first; "weighted": levels share the
    slots by ``priority_weights``, default ``p + 1`` for level ``p``, so none starves),
    ``queue_order`` ("fair": every queue takes as it has work; "strict": the order of
    ``queues`` is their priority, a queue taking only while those before it are dry),
    ``subscribers`` (default True: also run the app's topic subscribers, see
    ``App.subscriber``), ``log_jobs`` (an INFO line per finished job).
    """

    def __init__(
        self,
        app: WorkerHost,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = WORKER_DEFAULTS.concurrency,
        lease: float = WORKER_DEFAULTS.lease,
        grace: float = WORKER_DEFAULTS.grace,
        burst: bool = WORKER_DEFAULTS.burst,
        wait_retries: bool = WORKER_DEFAULTS.wait_retries,
        idle_wait: float = WORKER_DEFAULTS.idle_wait,
        reclaim_interval: float = WORKER_DEFAULTS.reclaim_interval,
        priority_mode: PriorityMode = WORKER_DEFAULTS.priority_mode,
        priority_weights: Mapping[int, float] | None = WORKER_DEFAULTS.priority_weights,
        queue_order: QueueOrder = WORKER_DEFAULTS.queue_order,
        loop_lag_warning: float = WORKER_DEFAULTS.loop_lag_warning,
        subscribers: bool = True,
        log_jobs: bool = WORKER_DEFAULTS.log_jobs,
    ) -> None:
        self._host = app
        self.registry = registry = app.registry
        self._serve_subscribers = subscribers
        self.settings = WorkerSettings(
            queues=tuple(queues or registry.queue_names()), concurrency=concurrency,
            lease=lease, grace=grace, burst=burst, wait_retries=wait_retries,
            idle_wait=idle_wait, reclaim_interval=reclaim_interval,
            priority_mode=priority_mode, priority_weights=priority_weights,
            loop_lag_warning=loop_lag_warning, queue_order=queue_order, log_jobs=log_jobs,
        )  # fmt: skip
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.state: dict[str, Any] = {}  # shared resources from the app's startup hooks
        self._resources = WorkerResources(registry, self.state)  # and worker-scoped Depends()
        self._inflight: InFlight | None = None  # built by start(), with the other components
        self._burst: Burst | None = None  # burst mode's (built by start())
        self._burst_watch: asyncio.Task[None] | None = None
        self._consumers: list[QueueConsumer | TopicConsumer] = []
        self._order = StrictOrder() if self.settings.queue_order == "strict" else None
        self._intake: list[Component] = []
        self._acks: list[AckBatcher] = []
        self._topic_acks: list[TopicAcks] = []
        self._background: list[Component] = []
        self._stop_requested = asyncio.Event()
        self._outage = outages.ServerOutage()  # Redis not answering, for all the loops
        self._handoff: HandOff | None = None
        self._force = False
        self._started = False
        self._stopped = False

    def __repr__(self) -> str:
        return f"Worker({self.id!r}, queues={list(self.settings.queues)})"

    @property
    def running(self) -> int:
        """How many jobs are running now."""
        return len(self._inflight.running) if self._inflight is not None else 0

    @property
    def outcomes(self) -> Counter[str]:
        """Settlements by outcome (complete, retry, bury, fail, abort, release)."""
        return self._inflight.outcomes if self._inflight is not None else Counter()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, and start taking jobs in the background."""
        if self._started:
            raise RuntimeError("a Worker can be started once")
        self._started = True
        redis = await reach_redis(self._host, self._stop_requested)
        if redis is None:  # asked to stop before Redis answered
            self._stopped = True
            return
        await self._resources.open()  # startup hooks, worker-scoped dependencies
        inflight = await self._compose(redis)
        loops = outages.shared_context(self._outage)  # (one line, not one per loop)
        for component in (inflight, *self._acks, *self._topic_acks, *self._background):
            loops.run(component.start)
        await self._hear_aborts()
        for component in self._intake:
            loops.run(component.start)
        if self._burst is not None:
            stopping = self._burst.stop_when_drained(self.request_stop)
            self._burst_watch = asyncio.get_running_loop().create_task(stopping)
        served = ", ".join(self.settings.queues)
        if self._topic_acks:  # subscriber groups as "<topic>/<group>"
            served += "; topics " + ", ".join(acks.name for acks in self._topic_acks)
        logger.info(
            "worker %s serving %s with concurrency %d", self.id, served,
            self.settings.concurrency,
        )  # fmt: skip
        for unused in filter(None, map(self.registry.unused_queue, self.settings.queues)):
            logger.warning("worker %s: %s", self.id, unused)

    async def _hear_aborts(self) -> None:
        """Take jobs once the abort channels are subscribed, so that a job cancelled as soon
        as it runs is stopped at once, not at its next lease renewal (which still covers a
        subscription that takes longer than ABORTS_READY)."""
        listeners = [c for c in self._background if isinstance(c, AbortListener)]
        waits = [asyncio.ensure_future(listener.listening.wait()) for listener in listeners]
        if waits:
            _, late = await asyncio.wait(waits, timeout=ABORTS_READY)
            for wait in late:
                wait.cancel()

    async def _compose(self, redis: Redis) -> InFlight:
        """Build the components, now that their inputs exist (a client; the middleware and
        observers as the startup hooks left them); returns the in-flight jobs' owner."""
        registry, prefix = self.registry, self._host.settings.prefix
        env = RunEnv(
            registry.find_task, tuple(registry.middleware), self.state,
            JobWatchers.of(registry.observers), functools.partial(reads.inputs, redis, prefix),
            provided=self._resources.values,
        )  # fmt: skip
        inflight = self._inflight = InFlight(
            env, concurrency=self.settings.concurrency, log_jobs=self.settings.log_jobs
        )
        queues = [QueueKeys.for_queue(prefix, name) for name in self.settings.queues]
        handoff = self._handoff = HandOff(
            redis, prefix, queues, result_ttl_ms=self._host.settings.result_ttl_ms
        )
        if self.settings.burst:  # (it reads the lists the queues below are added to)
            self._burst = Burst(inflight, handoff, self._acks, self._consumers)
        for keys in queues:
            await self._apply_declared_limits(redis, keys)
            self._add_queue(redis, keys, inflight, handoff)
        if self._serve_subscribers:
            for subscriber in registry.subscribers.values():
                self._add_subscriber(redis, subscriber, inflight)
        self._background = [handoff, *self._background_components(redis, queues, inflight)]
        return inflight

    async def _apply_declared_limits(self, redis: Redis, keys: QueueKeys) -> None:
        """Write the limits a task of the queue declares, unless Redis has them already
        (writing them restarts the rate's window)."""
        declared = self.registry.declared_limits(keys.name)
        if declared is None:
            return
        if (await stored_limits.read(redis, keys)).to_fields() != declared.to_fields():
            await stored_limits.write(redis, keys, declared)
            logger.info("queue %s: limits %s, as its task declares", keys.name, declared.describe())

    def _add_queue(
        self, redis: Redis, keys: QueueKeys, inflight: InFlight, handoff: HandOff
    ) -> None:
        """The components of one queue: its ack batcher, consumer, promoter and (unless
        bursting) periodic scheduler."""
        settings, app_settings = self.settings, self._host.settings
        acks = AckBatcher(
            redis, keys, result_ttl_ms=app_settings.result_ttl_ms,
            kept_ms=app_settings.idempotency_ttl_ms, keep_payload=app_settings.keep_payload,
            history_ms=app_settings.history_ms,
            track_retries=settings.burst and settings.wait_retries,
            on_handoff=handoff.wake.set, flush_wait=app_settings.call_timeout,
        )  # fmt: skip
        consumer = QueueConsumer(
            redis, acks, inflight, settings=settings,
            result_ttl_ms=app_settings.result_ttl_ms, worker_id=self.id, order=self._order,
            due_first=keys.name in app_settings.due_first,
            span_ms=app_settings.idempotency_ttl_ms,
            burst_busy=self._burst.busy if self._burst else None,
        )  # fmt: skip
        periodic = None
        if not settings.burst:
            periodic = PeriodicScheduler(
                redis, keys, declared=self.registry.declared_periodic(keys.name),
                max_payload_bytes=app_settings.max_payload_bytes,
                span_ms=app_settings.idempotency_ttl_ms,
            )  # fmt: skip
        promoter = Promoter(
            redis, keys, worker_id=self.id, idle_wait=settings.idle_wait,
            promote=consumer.promote_due, on_wake=periodic.wake if periodic else None,
        )  # fmt: skip
        self._acks.append(acks)
        self._consumers.append(consumer)
        self._intake += (consumer, promoter, *([periodic] if periodic else []))

    def _add_subscriber(self, redis: Redis, subscriber: Subscriber, inflight: InFlight) -> None:
        """The components of one topic's subscriber group: its acks and its consumer."""
        keys = TopicKeys.of(self._host.settings.prefix, subscriber.topic)
        acks = TopicAcks(
            redis, keys, subscriber.group, self.id, lease_ms=self.settings.lease_ms,
            options=subscriber.task.options, flush_wait=self._host.settings.call_timeout,
        )  # fmt: skip
        consumer = TopicConsumer(redis, acks, inflight, subscriber, settings=self.settings)
        self._topic_acks.append(acks)
        self._consumers.append(consumer)
        self._intake.append(consumer)

    def _background_components(
        self, redis: Redis, queues: list[QueueKeys], inflight: InFlight
    ) -> list[Component]:
        settings, app_settings = self.settings, self._host.settings
        return [
            LeaseKeeper(
                self._acks, lease_ms=settings.lease_ms, reclaim_interval=settings.reclaim_interval,
                default_max_attempts=app_settings.default_max_attempts,
                result_ttl_ms=app_settings.result_ttl_ms, on_abort=inflight.abort,
                on_expired=inflight.lease_expired,
            ),
            AbortListener(
                redis, queues, inflight.abort, worker_id=self.id, poll=settings.idle_wait
            ),
            LoopLagMonitor(inflight.running, threshold=settings.loop_lag_warning),
            DeadLetterTrimmer(
                redis, queues, max_jobs=app_settings.dead_max_jobs,
                ttl_ms=int(app_settings.dead_ttl * 1000),
            ),
            Heartbeat(
                redis, queues, worker_id=self.id, concurrency=settings.concurrency,
                running=inflight.running, tasks=self.registry.tasks,
                idempotency_ms=app_settings.idempotency_ttl_ms, quiet=self._stop_requested.is_set,
            ),
        ]  # fmt: skip

    async def run(self, *, handle_signals: bool = False) -> None:
        """Run until stop() is requested (or a signal arrives, or burst mode drains)."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.start()
            await self._stop_requested.wait()
        finally:
            await self.stop()
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def run_until_idle(self) -> None:
        """Burst mode: run until nothing is ready, running or due, then stop."""
        if not self.settings.burst:
            raise RuntimeError("run_until_idle() needs a worker made with burst=True")
        await self.run()

    def request_stop(self, *, force: bool = False) -> None:
        """Ask run() to return: stop taking jobs, let running ones finish within the grace
        period (none with force=True), put the rest back."""
        self._force = self._force or force
        self._stop_requested.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        if not self._stop_requested.is_set():
            logger.info("%s: stopping (grace %.1fs)", sig.name, self.settings.grace)
            self.request_stop()
            return
        logger.warning("second %s: cancelling running jobs now", sig.name)
        self._force = True
        if self._inflight is not None:
            self._inflight.cancel_all()

    async def stop(self) -> None:
        """Stop gracefully; every job ends settled, back in ready, or (its thread running
        on) leased to this process: never lost, never run twice at once (``inflight``)."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        self._outage.stopping = True
        inflight = self._inflight
        if inflight is not None:  # (None if start() failed before building it)
            inflight.stop_taking()
            await stop_all(self._intake)
            await inflight.finish(self.settings, force=self._force)
            await stop_all([*self._acks, *self._topic_acks])
            await stop_all([inflight, *self._background])
        # after the jobs (those left in threads: once they end), then the shutdown hooks
        await self._resources.close(inflight.outliving if inflight else None)
        logger.info("worker %s stopped: %s", self.id, dict(self.outcomes))

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
