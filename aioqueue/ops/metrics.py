"""Prometheus metrics for an app and its workers (the ``metrics`` extra: prometheus-client).

    metrics = instrument(app)                      # before the worker starts
    server = start_metrics_server(metrics, 9108)   # /metrics on 127.0.0.1:9108
    ...
    server.close()

An embedding app passes its own registry instead (``instrument(app, REGISTRY)``) and
serves it as it already does. Names, under the prefix (``aioqueue_`` by default):

======================  =========  ====================  ==================================
name                    type       labels                what
======================  =========  ====================  ==================================
jobs_total              counter    queue, task, outcome  attempts ended in this process
job_run_seconds         histogram  queue, task           how long each attempt ran
job_wait_seconds        histogram  queue                 ready -> started (Redis clock)
jobs_in_flight          gauge      queue                 started and not ended, here
enqueued_total          counter    queue, task           enqueues written by this process
worker_up               gauge                            1 while a worker runs here
queue_jobs              gauge      queue, state          depths, read when scraped
scrape_errors_total     counter                          depth reads that failed
======================  =========  ====================  ==================================

``outcome``: complete, retry, dead (buried in the dead-letter set), failed (final failure
of a task made with ``dead_letter=False``), cancelled, released (handed back by a stopping
worker; it runs again). ``state``: ready, scheduled, active, dead, as ``queue.counts()``.
``task`` is a task registered in the app, else ``(unregistered)``: names come from job
payloads, which anyone with access to Redis writes, and must not grow the label set.

Cost: prometheus-client's own metric objects take a lock per value and scan buckets
linearly: ~10 µs a job, where a worker spends 50-70 µs on a no-op job. Here the job
callbacks bump plain counters (~1 µs a job), and samples are built only when scraped
(``benchmarks/observer_overhead.py`` measures the difference a worker sees).

Queue depths are read at scrape time, one ``queue.counts()`` per queue, concurrently, on
the event loop the app's Redis client belongs to (reading on another loop would replace
the app's client). The scrape, in the server's thread, waits at most ``depth_timeout``;
then it exports no depths and counts an error. A read still under way is joined by the
next scrape, never repeated, so a hung Redis cannot pile reads up. There are no depths
while the app is not connected. A scrape on that loop's own thread (``generate_latest()``
called from async code) cannot wait for the loop it blocks: it exports the depths of the
last ``await metrics.refresh()``; call that just before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..core.errors import ConfigError, describe
from ..core.observers import Observer

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.utils import floatToGoString
except ImportError as exc:  # a ModuleNotFoundError: the CLI's one-line error names it
    raise ModuleNotFoundError(
        "aioqueue metrics need prometheus-client: pip install 'aioqueue[metrics]'",
        name=exc.name,
    ) from exc

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from ..app import App
    from ..core.observers import JobEvent
    from ..core.records import QueueCounts

__all__ = ["Metrics", "MetricsServer", "instrument", "start_metrics_server"]

logger = logging.getLogger(__name__)

OUTCOMES = {  # a settlement -> its ``outcome`` label
    "complete": "complete",
    "retry": "retry",
    "bury": "dead",
    "fail": "failed",
    "abort": "cancelled",
    "expire": "expired",
    "release": "released",
}
UNREGISTERED = "(unregistered)"  # the ``task`` label of names the app does not know
DEPTH_STATES = ("ready", "scheduled", "active", "dead")
DEFAULT_BUCKETS = (  # seconds, 1 ms to 5 min
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_go_float: Callable[[float], str] = floatToGoString  # untyped upstream
K = TypeVar("K")
V = TypeVar("V")


class _Histogram:
    """Observations by bucket (not cumulative; the last is +Inf), and their sum. The job
    callbacks add to it inline: ``counts[bisect_left(bounds, value)] += 1`` (bisect_left:
    a bucket's ``le`` is inclusive), ``total += value``."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0


class _Queue:
    """One queue, in this process: its jobs running, and the waits of those started."""

    __slots__ = ("in_flight", "tasks", "waits")

    def __init__(self, bounds: list[float]) -> None:
        self.in_flight = 0
        self.waits = _Histogram(bounds)
        self.tasks: dict[str, _Task] = {}  # by registered name, for job_ended


class _Task:
    """One (queue, task label): attempts by settlement, and their run times."""

    __slots__ = ("outcomes", "runs")

    def __init__(self, bounds: list[float]) -> None:
        self.outcomes: dict[str, int] = {}
        self.runs = _Histogram(bounds)


class _Enqueues:
    """One (queue, task label)'s count of enqueues: the context ``enqueuing`` returns,
    which counts when the write succeeded. Reused: counting allocates nothing."""

    __slots__ = ("count", "lock")

    def __init__(self, lock: threading.Lock) -> None:
        self.count = 0
        self.lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            with self.lock:
                self.count += 1


class _Families(NamedTuple):
    jobs: CounterMetricFamily
    runs: HistogramMetricFamily
    waits: HistogramMetricFamily
    in_flight: GaugeMetricFamily
    enqueued: CounterMetricFamily
    worker_up: GaugeMetricFamily
    depths: GaugeMetricFamily
    scrape_errors: CounterMetricFamily


class Metrics(Observer):
    """The Prometheus view of one app: an ``Observer`` of its jobs, and a collector whose
    scrapes also read the queue depths from Redis. Made and wired by ``instrument()``."""

    def __init__(
        self,
        app: App,
        registry: CollectorRegistry,
        *,
        queues: Sequence[str] | None,
        prefix: str,
        buckets: Sequence[float],
        depth_timeout: float,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if not _NAME.match(prefix or "_"):
            raise ConfigError(f"metric prefix {prefix!r} is not a valid Prometheus name start")
        if not bounds or len(set(bounds)) != len(bounds) or bounds[-1] == float("inf"):
            raise ConfigError("buckets must be distinct finite bounds (+Inf is implied)")
        if depth_timeout <= 0:
            raise ConfigError("depth_timeout must be > 0")
        self.registry = registry
        self.prefix = prefix
        self.depth_timeout = depth_timeout
        self._app = app
        self._depth_queues = None if queues is None else tuple(queues)
        self._bounds = bounds
        self._les = [*map(_go_float, bounds), "+Inf"]
        # The job callbacks run on the worker's loop, one thread: they bump ints without a
        # lock, and a scrape's copies (whole ints, C-level list and dict copies) are atomic
        # under the GIL. Enqueues may come from several threads, and new entries change the
        # dicts a scrape iterates: those take the lock.
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._tasks: dict[tuple[str, str], _Task] = {}
        self._enqueues: dict[tuple[str, str], _Enqueues] = {}
        self._workers: set[int] = set()  # id() of the state of each worker running here
        self._scrape_errors = 0
        self._reading: asyncio.Task[dict[str, QueueCounts]] | None = None
        self._last_depths: dict[str, QueueCounts] | None = None  # of the last refresh()
        self._failing = False  # log a failing Redis once, not at every scrape

    def __repr__(self) -> str:
        return f"Metrics(prefix={self.prefix!r})"

    # -- the observer: the hot path ----------------------------------------------------

    def enqueuing(
        self, queue: str, task: str, headers: dict[str, str]
    ) -> contextlib.AbstractContextManager[None]:
        """Count an enqueue once its write succeeded (adds no headers)."""
        return self._enqueues.get((queue, task)) or self._add(
            self._enqueues, (queue, self._label(task)), _Enqueues(self._lock)
        )

    def job_started(self, job: JobEvent) -> None:
        """One more job in flight; its wait observed."""
        stats = self._queues.get(job.queue) or self._queue(job.queue)
        stats.in_flight += 1
        waited = job.waited
        if waited is not None:
            waits = stats.waits
            waits.counts[bisect_left(waits.bounds, waited)] += 1
            waits.total += waited

    def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
        """One job fewer in flight; the attempt counted by outcome, its run time observed."""
        stats = self._queues.get(job.queue) or self._queue(job.queue)
        task = stats.tasks.get(job.task) or self._task(job.queue, job.task)
        stats.in_flight -= 1
        runs = task.runs
        runs.counts[bisect_left(runs.bounds, seconds)] += 1
        runs.total += seconds
        outcomes = task.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def _task(self, queue: str, name: str) -> _Task:
        """A (queue, task label) first seen, or a name the app does not know. Registered
        names are remembered in their queue's own map: looking up a (queue, task) key
        would build a tuple per job, and each allocation brings the next GC nearer."""
        stats = self._queue(queue)
        label = self._label(name)
        task = self._add(self._tasks, (queue, label), _Task(self._bounds))
        if label == name:
            stats.tasks[name] = task  # read by job_ended only: no lock
        return task

    def _queue(self, queue: str) -> _Queue:
        return self._queues.get(queue) or self._add(self._queues, queue, _Queue(self._bounds))

    def _add(self, table: dict[K, V], key: K, value: V) -> V:
        """A first sight (or an unregistered task): add it, under the lock, since a scrape
        may be iterating the table."""
        with self._lock:
            return table.setdefault(key, value)

    def _label(self, task: str) -> str:
        return task if self._app.find_task(task) is not None else UNREGISTERED

    async def _worker_started(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._workers.add(id(state))

    async def _worker_stopped(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._workers.discard(id(state))

    # -- queue depths ------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Read the queue depths now, for scrapes made on this loop's thread (see the
        module's docstring). Returns whether Redis answered within ``depth_timeout``;
        a failure counts as a scrape error and is never raised."""
        try:
            self._last_depths = await self._shared_read()
        except Exception as exc:
            self._read_failed(exc)
            return False
        self._failing = False
        return True

    async def _shared_read(self) -> dict[str, QueueCounts]:
        """One read per queue; a read still under way is joined. The shield: a timeout
        never cancels a redis-py call (the read ends by the client's socket timeout)."""
        task = self._reading
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = self._reading = asyncio.create_task(self._read_counts())
            task.add_done_callback(_retrieve)
        return await asyncio.wait_for(asyncio.shield(task), self.depth_timeout)

    async def _read_counts(self) -> dict[str, QueueCounts]:
        names = self._depth_queues or tuple(self._app.queue_names())
        counts = await asyncio.gather(*(self._app.queue(name).counts() for name in names))
        return dict(zip(names, counts, strict=True))

    def _scrape_depths(self) -> dict[str, QueueCounts] | None:
        """The depths for this scrape, or None."""
        loop = self._app.loop  # the app's client is bound to it; None: not connected
        if loop is None or not loop.is_running():
            return None
        with contextlib.suppress(RuntimeError):  # RuntimeError: no loop on this thread
            if asyncio.get_running_loop() is loop:  # waiting would block the loop: deadlock
                return self._last_depths
        try:
            future = asyncio.run_coroutine_threadsafe(self._shared_read(), loop)
        except RuntimeError:  # the loop closed meanwhile
            return None
        try:
            depths = future.result(self.depth_timeout)
        except Exception as exc:  # TimeoutError (a hung Redis, a busy loop), a Redis error
            future.cancel()  # only this waiter: the shielded read goes on
            self._read_failed(exc)
            return None
        self._failing = False
        return depths

    def _read_failed(self, exc: Exception) -> None:
        self._last_depths = None  # stale depths would hide the outage
        with self._lock:
            self._scrape_errors += 1
        reason = describe(exc)
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.depth_timeout}s"
        log = logger.debug if self._failing else logger.warning
        self._failing = True
        log("metrics: cannot read the queue depths: %s", reason)

    # -- the collector -----------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """The metric families without samples (the registry's name check: no Redis)."""
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        """The metric families with their samples; queue depths read now."""
        depths = self._scrape_depths() or {}  # first: a failure counts in this scrape
        with self._lock:  # no entry added meanwhile; copies of small lists
            tasks = [
                (key, dict(t.outcomes), list(t.runs.counts), t.runs.total)
                for key, t in self._tasks.items()
            ]
            queues = [
                (name, q.in_flight, list(q.waits.counts), q.waits.total)
                for name, q in self._queues.items()
            ]
            enqueued = [(key, e.count) for key, e in self._enqueues.items()]
            up, errors = bool(self._workers), self._scrape_errors
        f = self._families()
        for (queue, task), outcomes, counts, total in tasks:
            for outcome, count in outcomes.items():
                f.jobs.add_metric([queue, task, OUTCOMES.get(outcome, outcome)], count)
            f.runs.add_metric([queue, task], self._buckets(counts), total)
        for queue, running, counts, total in queues:
            f.in_flight.add_metric([queue], running)
            f.waits.add_metric([queue], self._buckets(counts), total)
        for (queue, task), count in enqueued:
            f.enqueued.add_metric([queue, task], count)
        f.worker_up.add_metric([], 1 if up else 0)
        for queue, queue_counts in depths.items():
            for state in DEPTH_STATES:
                f.depths.add_metric([queue, state], getattr(queue_counts, state))
        f.scrape_errors.add_metric([], errors)
        return list(f)

    def _families(self) -> _Families:
        p = self.prefix
        return _Families(
            CounterMetricFamily(
                f"{p}jobs_total", "Job attempts ended in this process, by outcome.",
                labels=["queue", "task", "outcome"],
            ),
            HistogramMetricFamily(
                f"{p}job_run_seconds", "How long each attempt ran in this process.",
                labels=["queue", "task"],
            ),
            HistogramMetricFamily(
                f"{p}job_wait_seconds",
                "How long jobs started here were ready before a worker took them.",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                f"{p}jobs_in_flight", "Jobs running in this process.", labels=["queue"]
            ),
            CounterMetricFamily(
                f"{p}enqueued_total", "Jobs enqueued by this process.", labels=["queue", "task"]
            ),
            GaugeMetricFamily(f"{p}worker_up", "1 while a worker of this process runs."),
            GaugeMetricFamily(
                f"{p}queue_jobs", "Jobs in each queue by state, read from Redis when scraped.",
                labels=["queue", "state"],
            ),
            CounterMetricFamily(
                f"{p}scrape_errors_total", "Scrapes that could not read the queue depths."
            ),
        )  # fmt: skip

    def _buckets(self, counts: list[int]) -> list[tuple[str, float]]:
        cumulative, running = [], 0
        for le, count in zip(self._les, counts, strict=True):
            running += count
            cumulative.append((le, float(running)))
        return cumulative


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a read's failure as seen: its waiters may all have timed out."""
    if not task.cancelled():
        task.exception()


def instrument(
    app: App,
    registry: CollectorRegistry | None = None,
    *,
    queues: Sequence[str] | None = None,
    prefix: str = "aioqueue_",
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    depth_timeout: float = 1.0,
) -> Metrics:
    """Export ``app``'s metrics: observe its enqueues and its workers' jobs (call it
    before a worker starts), and register the collector in ``registry`` (default: a new
    ``CollectorRegistry``; an embedding app passes its own, e.g. prometheus-client's
    ``REGISTRY``). Depths are read for ``queues``, default ``app.queue_names()`` (pass a
    worker's ``--queue`` list). Raises ConfigError if the app has a Metrics already."""
    if any(isinstance(observer, Metrics) for observer in app.registry.observers):
        raise ConfigError("instrument(app): this app has metrics already")
    metrics = Metrics(
        app, CollectorRegistry() if registry is None else registry, queues=queues,
        prefix=prefix, buckets=buckets, depth_timeout=depth_timeout,
    )  # fmt: skip
    metrics.registry.register(metrics)  # raises ValueError on a name taken there
    app.add_observer(metrics)
    app.on_startup(metrics._worker_started)
    app.on_shutdown(metrics._worker_stopped)
    return metrics


class MetricsServer:
    """``/metrics`` served over HTTP from a thread of its own; ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server, self._thread = server, thread
        self.host = host
        self.port: int = server.server_port  # the bound one, also when asked for 0

    @property
    def url(self) -> str:
        """Where to scrape."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (waits up to ~0.5 s for the serving loop)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def start_metrics_server(metrics: Metrics, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``metrics`` at ``http://host:port/metrics`` (port 0: a free one) from a
    daemon thread, until ``close()``. Loopback by default: in a container, pass
    ``host="0.0.0.0"`` for Prometheus to reach it. ConfigError if it cannot bind."""
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {describe(exc)}") from exc
    return MetricsServer(server, thread, host)
