"""What each page shows, read through the public Queue API only (never Redis itself).

Each function gathers one page's reads concurrently and returns plain values for its
template; the handlers in ``dashboard`` only choose the page and render it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..core.limits import QueueLimits, TenantLimits
from ..core.records import RecentCounts
from .chart import Chart, merge, throughput

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..app import App
    from ..client.queue import Queue
    from ..core.periodic import Periodic
    from ..core.records import JobInfo, JobPage, MinuteCounts, QueueCounts

State = Literal["ready", "scheduled", "retrying", "active", "dead", "complete"]
STATES: tuple[State, ...] = ("ready", "scheduled", "retrying", "active", "dead", "complete")
"""The queue page's tabs, in their order."""
COUNTED = frozenset({"ready", "scheduled", "active", "dead", "complete"})  # counts() has them
HISTORY_MINUTES = 60
SCAN = 2_000  # entries a filtered page reads at most (the page refreshes every 2 s)


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue on the overview: its counts, its last hour, its live workers, and what
    ended in the last 60 s (``RecentCounts``: what ``aioqueue info`` shows per second)."""

    name: str
    counts: QueueCounts
    history: Sequence[MinuteCounts]
    workers: Sequence[dict[str, Any]]
    recent: RecentCounts

    @property
    def hour_complete(self) -> int:
        return sum(minute.complete for minute in self.history)

    @property
    def hour_failed(self) -> int:
        """Failed for good in the last hour (retries are counted apart)."""
        return sum(minute.failed_for_good for minute in self.history)

    @property
    def hour_retried(self) -> int:
        return sum(minute.retried for minute in self.history)


@dataclass(frozen=True, slots=True)
class Overview:
    queues: Sequence[QueueSummary]
    workers: Sequence[dict[str, Any]]
    chart: Chart
    problem: str | None = None  # what is wrong with the server (full, evicting), if anything

    def total(self, state: State) -> int:
        return sum(getattr(summary.counts, state) for summary in self.queues)


async def summarize(queue: Queue) -> QueueSummary:
    counts, history, workers = await asyncio.gather(
        queue.counts(), queue.history(minutes=HISTORY_MINUTES), queue.workers()
    )
    recent = RecentCounts.of(history, int(time.time() * 1000))
    return QueueSummary(queue.name, counts, history, workers, recent)


async def overview(app: App, names: Sequence[str]) -> Overview:
    """Every queue's counts and last hour, the combined chart, the live workers (a worker
    serving several queues is listed once), and what is wrong with the server, if anything
    (full, or evicting: ``Queue.eviction``)."""
    eviction = app.queue(names[0] if names else None).eviction()
    summaries, server = await asyncio.gather(
        asyncio.gather(*(summarize(app.queue(name)) for name in names)), eviction
    )
    workers: dict[str, dict[str, Any]] = {}
    for summary in summaries:
        for beat in summary.workers:
            workers.setdefault(str(beat.get("id")), beat)
    listed = sorted(workers.values(), key=lambda b: (str(b.get("host")), str(b.get("id"))))
    chart = throughput(merge(summary.history for summary in summaries))
    return Overview(summaries, listed, chart, server.problem())


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of a queue's jobs in one state (of one task, if ``task``)."""

    queue: str
    state: State
    counts: QueueCounts
    page: JobPage
    number: int  # 1-based
    page_size: int
    chart: Chart
    limits: QueueLimits = field(default_factory=QueueLimits)  # the queue's set_limits
    task: str | None = None
    tasks: Sequence[str] = ()  # the app's tasks of this queue, for the filter
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)  # every tenant's
    weights: Mapping[str, int] = field(default_factory=dict)  # the tenants' not 1

    @property
    def jobs(self) -> Sequence[JobInfo]:
        return self.page.jobs

    @property
    def first(self) -> int:
        """1-based position of the first row shown."""
        return (self.number - 1) * self.page_size + 1

    @property
    def total(self) -> int | None:
        """How many jobs the list holds; None when only a walk can tell (a task's, the
        retrying ones)."""
        if self.task is not None or self.state not in COUNTED:
            return None
        return int(getattr(self.counts, self.state))

    @property
    def has_next(self) -> bool:
        if self.total is not None:
            return self.first + len(self.jobs) - 1 < self.total
        return len(self.jobs) == self.page_size

    @property
    def searched_part(self) -> bool:
        """A filtered page that stopped at SCAN entries before its list ended: say so."""
        return not self.page.exhausted and len(self.jobs) < self.page_size


async def listing(
    queue: Queue, state: State, number: int, page_size: int, *, task: str | None = None,
    tasks: Sequence[str] = (),
) -> Listing:  # fmt: skip
    """A page of jobs (scheduled ones with when each is due), with the counts of every
    state for the tabs and the queue's chart."""
    offset = (number - 1) * page_size
    counts, page, history, limits = await asyncio.gather(
        queue.counts(),
        queue.find_jobs(state, task=task, limit=page_size, offset=offset, scan=SCAN),
        queue.history(minutes=HISTORY_MINUTES),
        queue.limits(),
    )
    tenant_limits, weights = TenantLimits(), {}
    if counts.tenants:
        tenant_limits, weights = await asyncio.gather(queue.tenant_limits(), queue.weights())
    return Listing(
        queue.name, state, counts, page, number, page_size, throughput(history), limits,
        task, tasks, tenant_limits, weights,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Found:
    """What a search found: jobs with that id (in any queue shown), and tasks whose name
    holds the text, each with the queue it runs on."""

    query: str
    jobs: Sequence[JobInfo]
    tasks: Sequence[tuple[str, str]]  # (task, queue)


async def search(app: App, names: Sequence[str], query: str) -> Found:
    """Jobs whose id is ``query`` in the queues ``names``; the app's tasks whose name
    holds it (any case), on those queues."""
    infos = await asyncio.gather(*(app.queue(name).info(query) for name in names))
    needle = query.casefold()
    tasks = sorted(
        (name, task.options.queue)
        for name, task in app.tasks.items()
        if needle in name.casefold() and task.options.queue in names
    )
    return Found(query, [info for info in infos if info is not None], tasks)


@dataclass(frozen=True, slots=True)
class PeriodicRow:
    spec: Periodic
    next_ms: int
    stored: bool  # False: declared in code, not yet written by a worker

    @property
    def schedule(self) -> str:
        if self.spec.cron is not None:
            return f"{self.spec.cron} ({self.spec.tz})"
        every = self.spec.every or 0.0
        for unit, seconds in (("d", 86400), ("h", 3600), ("min", 60)):
            if every >= seconds and every % seconds == 0:
                return f"every {every / seconds:g} {unit}"
        return f"every {every:g} s"


async def periodic(app: App, names: Sequence[str], now_ms: int) -> list[PeriodicRow]:
    """The periodic specs of these queues as the workers see them, each with its next
    tick after ``now_ms``; specs declared in code that no worker has stored yet too."""
    stored = await asyncio.gather(*(app.queue(name).periodic_specs() for name in names))
    rows: list[PeriodicRow] = []
    for name, specs in zip(names, stored, strict=True):
        known = {spec.name for spec in specs}
        pending = [spec for spec in app.declared_periodic(name) if spec.name not in known]
        rows += [PeriodicRow(spec, spec.next_tick(now_ms), True) for spec in specs]
        rows += [PeriodicRow(spec, spec.next_tick(now_ms), False) for spec in pending]
    return sorted(rows, key=lambda row: (row.next_ms, row.spec.name))
