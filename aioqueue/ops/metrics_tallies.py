"""What ``ops/metrics.py`` counts, and the Prometheus families a scrape fills from it.

The job callbacks bump plain ints in these objects (no lock, no allocation once a queue
and task have been seen); ``families`` and ``cumulative`` turn a scrape's copies of them
into prometheus-client's metric families, with the names and help of the table in
``ops/metrics.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

if TYPE_CHECKING:
    import threading
    from collections.abc import Sequence


class Histogram:
    """Observations by bucket (not cumulative; the last is +Inf), and their sum. The job
    callbacks add to it inline: ``counts[bisect_left(bounds, value)] += 1`` (bisect_left:
    a bucket's ``le`` is inclusive), ``total += value``."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0


class QueueTally:
    """One queue, in this process: its jobs running, and the waits of those started."""

    __slots__ = ("in_flight", "tasks", "waits")

    def __init__(self, bounds: list[float]) -> None:
        self.in_flight = 0
        self.waits = Histogram(bounds)
        self.tasks: dict[str, TaskTally] = {}  # by registered name, for job_ended


class TaskTally:
    """One (queue, task label): attempts by settlement, and their run times."""

    __slots__ = ("outcomes", "runs")

    def __init__(self, bounds: list[float]) -> None:
        self.outcomes: dict[str, int] = {}
        self.runs = Histogram(bounds)


class EnqueueTally:
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


class Families(NamedTuple):
    jobs: CounterMetricFamily
    runs: HistogramMetricFamily
    waits: HistogramMetricFamily
    in_flight: GaugeMetricFamily
    enqueued: CounterMetricFamily
    worker_up: GaugeMetricFamily
    depths: GaugeMetricFamily
    scrape_errors: CounterMetricFamily
    tenants: GaugeMetricFamily
    tenant_jobs: GaugeMetricFamily


def families(p: str) -> Families:
    """Every family, empty, its names under the prefix ``p``."""
    return Families(
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
        GaugeMetricFamily(
            f"{p}queue_tenants", "Tenants with jobs ready in each queue, read when scraped.",
            labels=["queue"],
        ),
        GaugeMetricFamily(
            f"{p}tenant_jobs",
            "Jobs ready and running of the tenants with the most ready (opt-in: instrument's "
            "tenants=N), read when scraped.",
            labels=["queue", "tenant", "state"],
        ),
    )  # fmt: skip


def cumulative(les: Sequence[str], counts: Sequence[int]) -> list[tuple[str, float]]:
    """A histogram's buckets as Prometheus wants them: each ``le`` with the count at or
    below it."""
    buckets, running = [], 0
    for le, count in zip(les, counts, strict=True):
        running += count
        buckets.append((le, float(running)))
    return buckets
