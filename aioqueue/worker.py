"""Worker: runs the jobs of one or more queues with bounded concurrency.

It is a composition of small loops, each owned by another module:
- per queue, a QueueConsumer's fetch loop and ack loop (``consumer``),
- per queue, a Promoter's promote loop and wake listener (``scheduler``),
- for all queues, a LeaseKeeper's renew and reclaim loops (``leases``),
- for all queues, the watchdogs, abort listener, heartbeat and dead-letter trimmer,
and one asyncio task per running job (``jobs``), which ``runner.run_job`` turns into a
Settlement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ._aio import wait_event
from .aborts import AbortListener
from .consumer import QueueConsumer
from .health import Heartbeat
from .jobs import JobTasks
from .leases import LeaseKeeper
from .retention import DeadLetterTrimmer
from .runner import RunEnv
from .scheduler import PeriodicScheduler, Promoter
from .settings import WorkerSettings
from .slots import Slots
from .watchdog import CHECK_INTERVAL, LoopLagMonitor, Watchdog

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Coroutine, Mapping, Sequence
    from types import TracebackType

    from redis.asyncio import Redis

    from .app import App
    from .priorities import PriorityMode
    from .scripts import Taken

logger = logging.getLogger(__name__)


class Worker:
    """Runs jobs. Use ``async with app.worker(...)`` inside an existing asyncio service,
    ``await worker.run()`` as a process's main coroutine, or ``await
    worker.run_until_idle()`` to drain the queues and return (burst mode).

    Options: ``queues`` (default: every queue the app's tasks use), ``concurrency`` (jobs
    at once), ``lease`` (seconds; renewed while a job runs), ``grace`` (seconds running
    jobs get to finish at shutdown before they are cancelled and put back), ``burst``,
    ``priority_mode`` ("strict": higher levels always first; "weighted": levels share the
    slots by ``priority_weights``, default ``p + 1`` for level ``p``, so none starves).
    """

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 50,
        lease: float = 30.0,
        grace: float = 10.0,
        burst: bool = False,
        idle_wait: float = 2.0,
        reclaim_interval: float = 5.0,
        priority_mode: PriorityMode = "strict",
        priority_weights: Mapping[int, float] | None = None,
        loop_lag_warning: float = 1.0,
    ) -> None:
        self.app = app
        self.settings = WorkerSettings(
            queues=tuple(queues or app.queue_names()),
            concurrency=concurrency,
            lease=lease,
            grace=grace,
            burst=burst,
            idle_wait=idle_wait,
            reclaim_interval=reclaim_interval,
            priority_mode=priority_mode,
            priority_weights=priority_weights,
            loop_lag_warning=loop_lag_warning,
        )
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.state: dict[str, Any] = {}  # shared resources from the app's startup hooks
        self._jobs = JobTasks(RunEnv(app.find_task, (), self.state))
        self._consumers: list[QueueConsumer] = []
        self._promoters: list[Promoter] = []
        self._fetchers: list[asyncio.Task[None]] = []
        self._loops: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[None]] = []
        self._stop_taking = asyncio.Event()
        self._closed = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._force = False
        self._started = False
        self._stopped = False

    def __repr__(self) -> str:
        return f"Worker({self.id!r}, queues={list(self.settings.queues)})"

    @property
    def running(self) -> int:
        """How many jobs are running now."""
        return len(self._jobs.running)

    @property
    def outcomes(self) -> Counter[str]:
        """Settlements by outcome (complete, retry, bury, fail, abort, release)."""
        return self._jobs.outcomes

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, and start taking jobs in the background."""
        if self._started:
            raise RuntimeError("a Worker can be started once")
        self._started = True
        redis = await self.app.internal_client()
        for hook in self.app.startup_hooks:
            await hook(self.state)
        self._jobs.env = RunEnv(self.app.find_task, tuple(self.app.middleware_stack), self.state)
        settings, app_settings = self.settings, self.app.settings
        self._slots: Slots[tuple[QueueConsumer, Taken]] = Slots(
            settings.concurrency, lambda job: self._jobs.start(*job)
        )
        for name in settings.queues:
            self._add_queue(redis, name)
        keeper = LeaseKeeper(
            self._consumers, lease_ms=settings.lease_ms,
            reclaim_interval=settings.reclaim_interval,
            default_max_attempts=app_settings.default_max_attempts,
            result_ttl_ms=app_settings.result_ttl_ms, on_abort=self._jobs.abort,
            stopping=self._closed,
        )  # fmt: skip
        self._aborts = AbortListener(
            redis, [c.keys.abort_channel for c in self._consumers], self._abort,
            wake_channel=f"{self._consumers[0].keys.abort_channel}:{self.id}",
            poll=settings.idle_wait, stopping=self._closed,
        )  # fmt: skip
        self._fetchers = [self._spawn(c.fetch_loop()) for c in self._consumers]
        self._loops = [self._spawn(c.acks.run()) for c in self._consumers]
        self._background += [
            *(self._spawn(p.promote_loop()) for p in self._promoters),
            *(self._spawn(p.listen_loop()) for p in self._promoters),
            self._spawn(keeper.renew_loop()),
            self._spawn(keeper.reclaim_loop()),
            self._spawn(Watchdog(self._jobs.running, self._jobs.abandon, self._closed).run()),
            self._spawn(
                LoopLagMonitor(self._jobs.running, threshold=settings.loop_lag_warning).run(
                    self._closed
                )
            ),
            self._spawn(self._aborts.run()),
            self._spawn(self._hand_back_stale()),
            self._spawn(DeadLetterTrimmer(
                redis, [c.keys for c in self._consumers], max_jobs=app_settings.dead_max_jobs,
                ttl_ms=int(app_settings.dead_ttl * 1000), stopping=self._closed,
            ).run()),
            self._spawn(Heartbeat(
                redis, [c.keys for c in self._consumers], worker_id=self.id,
                concurrency=settings.concurrency, running=lambda: self.running,
                stopping=self._closed,
            ).run()),
        ]  # fmt: skip
        if settings.burst:
            self._spawn(self._stop_when_drained())
        logger.info(
            "worker %s serving %s with concurrency %d", self.id,
            ", ".join(settings.queues), settings.concurrency,
        )  # fmt: skip

    def _add_queue(self, redis: Redis, name: str) -> None:
        """The loops of one queue: consumer, promoter and (unless bursting) periodic jobs."""
        keys = self.app.queue(name).keys
        consumer = QueueConsumer(
            redis, keys, settings=self.settings, result_ttl_ms=self.app.settings.result_ttl_ms,
            slots=self._slots, worker_id=self.id,
            stopping=self._stop_taking,
        )  # fmt: skip
        promoter = Promoter(
            redis, keys, wake_key=consumer.wake_key, idle_wait=self.settings.idle_wait,
            stopping=self._stop_taking, promote=consumer.promote_due,
        )  # fmt: skip
        self._consumers.append(consumer)
        self._promoters.append(promoter)
        if not self.settings.burst:
            periodic = PeriodicScheduler(
                redis, keys, declared=self.app.declared_periodic(name),
                max_payload_bytes=self.app.settings.max_payload_bytes, stopping=self._stop_taking,
            )  # fmt: skip
            promoter.on_wake(periodic.wake)
            self._background.append(self._spawn(periodic.run()))

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
        if self._stop_requested.is_set():
            logger.warning("second %s: cancelling running jobs now", sig.name)
            self._force = True
            self._jobs.cancel_all()
            return
        logger.info("%s: stopping (grace %.1fs)", sig.name, self.settings.grace)
        self.request_stop()

    async def stop(self) -> None:
        """Stop gracefully; every job ends settled or back in ready, never lost."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        self._stop_taking.set()
        self._slots.interrupt()
        for consumer in self._consumers:
            consumer.interrupt()
        for promoter in self._promoters:
            promoter.interrupt()  # wakes its periodic scheduler too
        await self._wake_blocked_waits()
        await asyncio.gather(*self._fetchers, return_exceptions=True)
        for consumer, taken in self._slots.take_waiting():  # never started: back to ready
            self._jobs.hand_back(consumer, taken)
        await self._jobs.finish(grace=self.settings.grace, force=self._force)
        for consumer in self._consumers:
            consumer.acks.close()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._closed.set()
        await self._wake_abort_listener()
        await asyncio.gather(*self._background, return_exceptions=True)
        for hook in reversed(self.app.shutdown_hooks):
            try:
                await hook(self.state)
            except Exception:
                logger.exception("shutdown hook %r failed", getattr(hook, "__name__", hook))
        logger.info("worker %s stopped: %s", self.id, dict(self.outcomes))

    def _abort(self, job_id: bytes) -> None:
        """An abort request: a job waiting for a slot ends at once, a running one is
        cancelled."""
        waiting = self._slots.take_waiting(lambda job: job[1].id == job_id)
        for consumer, taken in waiting:
            logger.info("job %s: cancelled on request before it started", taken.job_id)
            self._jobs.hand_back(consumer, taken, aborted=True)
        if not waiting:
            self._jobs.abort(job_id)

    async def _hand_back_stale(self) -> None:
        """Jobs taken ahead that still wait for a slot go back to ready for other workers."""
        while not await wait_event(self._stop_taking, CHECK_INTERVAL):
            for consumer, taken in self._slots.take_stale():
                self._jobs.hand_back(consumer, taken)

    async def _wake_blocked_waits(self) -> None:
        """Each queue has two BLPOPs (fetch, schedule) on this worker's wake list: push two
        tokens so they return now, without cancelling a redis-py call."""
        try:
            redis = await self.app.internal_client()
            async with redis.pipeline(transaction=False) as pipe:
                for consumer in self._consumers:
                    pipe.rpush(consumer.wake_key, "stop", "stop")
                    pipe.pexpire(consumer.wake_key, 60_000)
                await pipe.execute()
        except RedisError as exc:  # the BLPOPs then return at their timeout
            logger.warning("could not wake blocked waits: %r", exc)

    async def _wake_abort_listener(self) -> None:
        try:
            redis = await self.app.internal_client()
            await redis.publish(self._aborts.wake_channel, b"stop")
        except RedisError as exc:  # it then returns at its poll timeout
            logger.warning("could not wake the abort listener: %r", exc)

    async def _stop_when_drained(self) -> None:
        await asyncio.gather(*self._fetchers, return_exceptions=True)
        self.request_stop()

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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(_log_crash)
        return task


def _log_crash(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        if (exc := task.exception()) is not None:
            logger.error("worker loop crashed: %r", exc, exc_info=exc)
