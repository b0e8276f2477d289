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
queue_tenants           gauge      queue                 tenants with jobs ready, likewise
tenant_jobs             gauge      queue, tenant, state  opt-in (``tenants=N``): the N
                                                         tenants with the most jobs ready
scrape_errors_total     counter                          depth reads that failed
======================  =========  ====================  ==================================

``outcome``: complete, retry, dead (buried in the dead-letter set), failed (final failure
of a task made with ``dead_letter=False``), cancelled, released (handed back by a stopping
worker; it runs again). ``state``: ready, scheduled, active, dead, as ``queue.counts()``.
``task`` is a task registered in the app, else ``(unregistered)``: names come from job
payloads, which anyone with access to Redis writes, and must not grow the label set; for
the same reason no metric has a ``tenant`` label unless asked (``instrument(app,
tenants=N)``: at most N tenants per queue, ``state`` ready or running).

Cost: prometheus-client's own metric objects take a lock per value and scan buckets
linearly: ~10 µs a job, where a worker spends 50-70 µs on a no-op job. Here the job
callbacks bump plain counters (~1 µs a job), and samples are built only when scraped
(``benchmarks/observer_overhead.py`` measures the difference a worker sees).

Queue depths are read at scrape time, on the event loop the app's Redis client belongs
to, within ``depth_timeout`` (``ops/metrics_depths.py`` says how, and when to call
``await metrics.refresh()``). What the job callbacks count, and the families a scrape
fills, are in ``ops/metrics_tallies.py``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.errors import ConfigError, describe
from ..core.observers import Observer

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.utils import floatToGoString

    from .metrics_depths import QueueDepths
    from .metrics_tallies import EnqueueTally, QueueTally, TaskTally, cumulative, families
except ImportError as exc:  # a ModuleNotFoundError: the CLI's one-line error names it
    raise ModuleNotFoundError(
        "aioqueue metrics need prometheus-client: pip install 'aioqueue[metrics]'",
        name=exc.name,
    ) from exc

if TYPE_CHECKING:
    import contextlib
    import threading
    from collections.abc import Callable, Iterable, Sequence
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from ..app import App
    from ..core.observers import JobEvent

__all__ = ["Metrics", "MetricsServer", "instrument", "start_metrics_server"]

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


class Metrics(QueueDepths, Observer):
    """The Prometheus view of one app: an ``Observer`` of its jobs, and a collector whose
    scrapes also read the queue depths from Redis (its base, ``QueueDepths``, with
    ``refresh()``). Made and wired by ``instrument()``."""

    def __init__(
        self,
        app: App,
        registry: CollectorRegistry,
        *,
        queues: Sequence[str] | None,
        prefix: str,
        buckets: Sequence[float],
        depth_timeout: float,
        tenants: int = 0,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if not _NAME.match(prefix or "_"):
            raise ConfigError(f"metric prefix {prefix!r} is not a valid Prometheus name start")
        if not bounds or len(set(bounds)) != len(bounds) or bounds[-1] == float("inf"):
            raise ConfigError("buckets must be distinct finite bounds (+Inf is implied)")
        if depth_timeout <= 0:
            raise ConfigError("depth_timeout must be > 0")
        if isinstance(tenants, bool) or not isinstance(tenants, int) or tenants < 0:
            raise ConfigError(f"tenants must be an int >= 0 (tenants labelled), not {tenants!r}")
        super().__init__(app, queues, depth_timeout, tenants)
        self.registry = registry
        self.prefix = prefix
        self._bounds = bounds
        self._les = [*map(_go_float, bounds), "+Inf"]
        # The job callbacks run on the worker's loop, one thread: they bump ints without a
        # lock, and a scrape's copies (whole ints, C-level list and dict copies) are atomic
        # under the GIL. Enqueues may come from several threads, and new entries change the
        # dicts a scrape iterates: those take the lock (``QueueDepths``'s).
        self._queues: dict[str, QueueTally] = {}
        self._tasks: dict[tuple[str, str], TaskTally] = {}
        self._enqueues: dict[tuple[str, str], EnqueueTally] = {}
        self._workers: set[int] = set()  # id() of the state of each worker running here

    def __repr__(self) -> str:
        return f"Metrics(prefix={self.prefix!r})"

    # -- the observer: the hot path ----------------------------------------------------

    def enqueuing(
        self, queue: str, task: str, headers: dict[str, str]
    ) -> contextlib.AbstractContextManager[None]:
        """Count an enqueue once its write succeeded (adds no headers)."""
        return self._enqueues.get((queue, task)) or self._add(
            self._enqueues, (queue, self._label(task)), EnqueueTally(self._lock)
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

    def _task(self, queue: str, name: str) -> TaskTally:
        """A (queue, task label) first seen, or a name the app does not know. Registered
        names are remembered in their queue's own map: looking up a (queue, task) key
        would build a tuple per job, and each allocation brings the next GC nearer."""
        stats = self._queue(queue)
        label = self._label(name)
        task = self._add(self._tasks, (queue, label), TaskTally(self._bounds))
        if label == name:
            stats.tasks[name] = task  # read by job_ended only: no lock
        return task

    def _queue(self, queue: str) -> QueueTally:
        return self._queues.get(queue) or self._add(self._queues, queue, QueueTally(self._bounds))

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

    # -- the collector -----------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """The metric families without samples (the registry's name check: no Redis)."""
        return list(families(self.prefix))

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
        f = families(self.prefix)
        for (queue, task), outcomes, counts, total in tasks:
            for outcome, count in outcomes.items():
                f.jobs.add_metric([queue, task, OUTCOMES.get(outcome, outcome)], count)
            f.runs.add_metric([queue, task], cumulative(self._les, counts), total)
        for queue, running, counts, total in queues:
            f.in_flight.add_metric([queue], running)
            f.waits.add_metric([queue], cumulative(self._les, counts), total)
        for (queue, task), count in enqueued:
            f.enqueued.add_metric([queue, task], count)
        f.worker_up.add_metric([], 1 if up else 0)
        for queue, queue_counts in depths.items():
            for state in DEPTH_STATES:
                f.depths.add_metric([queue, state], getattr(queue_counts, state))
            f.tenants.add_metric([queue], queue_counts.tenants)
            for tenant in queue_counts.top_tenants[: self.tenants]:
                f.tenant_jobs.add_metric([queue, tenant.name, "ready"], tenant.ready)
                f.tenant_jobs.add_metric([queue, tenant.name, "running"], tenant.running)
        f.scrape_errors.add_metric([], errors)
        return list(f)


def instrument(
    app: App,
    registry: CollectorRegistry | None = None,
    *,
    queues: Sequence[str] | None = None,
    prefix: str = "aioqueue_",
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    depth_timeout: float = 1.0,
    tenants: int = 0,
) -> Metrics:
    """Export ``app``'s metrics: observe its enqueues and its workers' jobs (call it
    before a worker starts), and register the collector in ``registry`` (default: a new
    ``CollectorRegistry``; an embedding app passes its own, e.g. prometheus-client's
    ``REGISTRY``). Depths are read for ``queues``, default ``app.queue_names()`` (pass a
    worker's ``--queue`` list). ``tenants``: export ``tenant_jobs`` for the ``tenants``
    tenants of each queue with the most jobs ready (none by default: a label per tenant
    may be many). Raises ConfigError if the app has a Metrics already."""
    if any(isinstance(observer, Metrics) for observer in app.registry.observers):
        raise ConfigError("instrument(app): this app has metrics already")
    metrics = Metrics(
        app, CollectorRegistry() if registry is None else registry, queues=queues,
        prefix=prefix, buckets=buckets, depth_timeout=depth_timeout, tenants=tenants,
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
