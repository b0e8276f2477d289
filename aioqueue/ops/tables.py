"""What ``aioqueue info``, ``aioqueue jobs``, ``job show`` and ``dead ls`` print: readable
tables (rich) and lines, built from plain values so that they can be tested without a
terminal."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.records import RecentCounts, utc_moment

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..client.messaging import ChannelInfo
    from ..client.topics import GroupInfo, TopicInfo
    from ..core.limits import QueueLimits
    from ..core.records import JobInfo, MinuteCounts, QueueCounts


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue's row of ``aioqueue info``."""

    name: str
    counts: QueueCounts
    history: Sequence[MinuteCounts]  # the last two minutes, the current one last
    workers: Sequence[dict[str, Any]]
    limits: QueueLimits | None = None

    def per_second(self, field: str, now_ms: int | None = None) -> float:
        """The rate of an outcome (complete, failed: for good, retried, cancelled) over
        the last 60 s (``RecentCounts``: the dashboard's per-minute figures, per second)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return float(getattr(RecentCounts.of(self.history, now_ms), field)) / 60.0


RATES_CAPTION = (
    "done/s, fail/s (failed for good: dead or failed) and retry/s (attempts that will run "
    "again): the last 60 s"
)


def info_table(queues: Sequence[QueueSnapshot], *, now_ms: int | None = None) -> Table:
    """Per queue: ready (by priority), scheduled, active, dead, completed, failed for good
    and retried per second over the last 60 s, live workers and the jobs they run; a paused
    or limited queue's name says so, how many of its jobs wait (for their group or
    children), and how many tenants have jobs ready (``tenants_table`` lists them)."""
    table = Table(title="aioqueue", title_justify="left", caption=RATES_CAPTION)
    table.caption_justify = "left"
    table.add_column("queue", no_wrap=True, min_width=max((len(q.name) for q in queues), default=5))
    for name in ("ready", "sched", "active", "dead", "done/s", "fail/s", "retry/s", "workers"):
        table.add_column(name, justify="right", no_wrap=True)
    for queue in queues:
        counts = queue.counts
        running = sum(int(worker.get("running", 0)) for worker in queue.workers)
        table.add_row(
            _queue_name(queue),
            _ready(counts),
            str(counts.scheduled),
            str(counts.active),
            f"[red]{counts.dead}[/red]" if counts.dead else "0",
            f"{queue.per_second('complete', now_ms):.2f}",
            f"{queue.per_second('failed', now_ms):.2f}",
            f"{queue.per_second('retried', now_ms):.2f}",
            f"{len(queue.workers)} ({running} running)" if queue.workers else "[red]none[/red]",
        )
    return table


def _queue_name(queue: QueueSnapshot) -> str:
    name = f"{queue.name} [yellow](paused)[/yellow]" if queue.counts.paused else queue.name
    limits, parts = queue.limits, []
    if limits is not None and limits.concurrency is not None:
        parts.append(f"≤{limits.concurrency} running")
    if limits is not None and limits.rate_per_second is not None:
        parts.append(f"{limits.rate_per_second:g}/s")
    if queue.counts.waiting:  # behind their groups, or for their children
        parts.append(f"{queue.counts.waiting} waiting")
    if queue.counts.tenants:
        parts.append(_tenants(queue.counts))
    return name + (f"\n[dim]{', '.join(parts)}[/dim]" if parts else "")


def _tenants(counts: QueueCounts) -> str:
    held = f" ({counts.tenants_held} held)" if counts.tenants_held else ""
    return f"{counts.tenants} tenant{'s' if counts.tenants != 1 else ''}{held}"


def tenants_table(queues: Sequence[QueueSnapshot]) -> Table | None:
    """The tenants with the most ready jobs, per queue that has tenants (None if none
    has): their ready and running jobs, and whether their limits hold them back now (how
    many tenants each queue has is under its name in ``info_table``)."""
    rows = [(queue, tenant) for queue in queues for tenant in queue.counts.top_tenants]
    if not rows:
        return None
    table = Table(title="tenants (most ready first)", title_justify="left")
    table.add_column("queue", no_wrap=True)
    table.add_column("tenant", no_wrap=True, overflow="ellipsis", max_width=40)
    for name in ("ready", "running"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    shown = None
    for queue, tenant in rows:
        table.add_row(
            "" if queue.name == shown else queue.name,
            escape(tenant.name), str(tenant.ready), str(tenant.running),
            "[yellow]held[/yellow]" if tenant.held else "",
        )  # fmt: skip
        shown = queue.name
    return table


def channels_table(channels: Sequence[tuple[str, str, ChannelInfo]]) -> Table:
    """Per mailbox and group (kind, name, info): messages kept, the last id, readers, the
    reader furthest behind and by how much, messages trimmed before all had read them."""
    table = Table(title="messaging", title_justify="left")
    table.add_column("kind", no_wrap=True)
    table.add_column("name", no_wrap=True)
    for name in ("kept", "last id", "readers", "most behind", "dropped"):
        table.add_column(name, justify="right", no_wrap=True)
    for kind, name, info in channels:
        behind = "" if kind == "mailbox" else max(info.cursors, key=info.lag, default=None)
        lag = "-" if behind is None else f"{behind or '(reader)'} {info.lag(behind)}"
        table.add_row(
            kind, name, str(info.size), str(info.last_id), str(len(info.cursors)), lag,
            f"[red]{info.dropped}[/red]" if info.dropped else "0",
        )  # fmt: skip
    return table


def topics_table(topics: Sequence[tuple[str, TopicInfo]]) -> Table:
    """Per topic and subscriber group: messages kept, dropped by the bound, dead letters;
    each group's consumers (workers), messages pending (running or waiting for a retry)
    and not yet delivered (lag)."""
    table = Table(title="topics", title_justify="left")
    table.add_column("topic", no_wrap=True)
    for name in ("kept", "dropped", "dead"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("group", no_wrap=True)
    for name in ("workers", "pending", "lag"):
        table.add_column(name, justify="right", no_wrap=True)
    for name, info in topics:
        head = [
            name, str(info.size), f"[red]{info.dropped}[/red]" if info.dropped else "0",
            f"[red]{info.dead}[/red]" if info.dead else "0",
        ]  # fmt: skip
        groups: list[GroupInfo | None] = [*info.groups.values()] or [None]
        for group in groups:
            cells = ["-", "", "", ""] if group is None else [
                group.name, str(group.consumers), str(group.pending),
                "?" if group.lag is None else str(group.lag),
            ]  # fmt: skip
            table.add_row(*head, *cells)
            head = ["", "", "", ""]
    return table


def _ready(counts: QueueCounts) -> str:
    levels = sorted(counts.ready_by_priority.items(), reverse=True)
    if len(levels) <= 1:
        return str(counts.ready)
    split = " ".join(f"p{level}:{n}" for level, n in levels)
    return f"{counts.ready} ({split})"


WHEN = {
    "ready": "enqueued", "scheduled": "due", "retrying": "due", "active": "started",
    "dead": "finished", "complete": "finished",
}  # fmt: skip
"""The time ``jobs ls`` shows for each state's jobs."""


def jobs_table(title: str, jobs: Sequence[JobInfo], *, when: str = "enqueued") -> Table:
    """A page of jobs: id, task, status, attempts, priority, a time (``when``: enqueued,
    due, started or finished), and the error."""
    table = Table(title=f"{title} jobs", title_justify="left")
    table.add_column(
        "id", no_wrap=True, min_width=min(max((len(j.id) for j in jobs), default=2), 40)
    )
    for name in ("task", "status", "tries", "prio", f"{when} (UTC)"):
        table.add_column(name, no_wrap=True)
    table.add_column("error", overflow="fold", min_width=10)
    for info in jobs:
        error = f"{info.error.type}: {info.error.message}" if info.error else ""
        attempts = (
            f"{info.attempts}/{info.max_attempts}" if info.max_attempts > 0 else str(info.attempts)
        )
        moment = {
            "due": info.due_ms, "started": info.started_at_ms, "finished": info.finished_at_ms,
        }.get(when, info.enqueued_at_ms)  # fmt: skip
        table.add_row(
            info.id, info.task or "?", str(info.status), attempts, _or_dash(info.priority),
            _short_time(moment), error,
        )  # fmt: skip
    return table


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _short_time(ms: float | None) -> str:
    if ms is None:
        return "-"
    moment = utc_moment(ms)
    return _raw_ms(ms) if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _raw_ms(ms: float) -> str:
    """A time no date can show (another program's record): the number itself."""
    return f"{ms:.0f} ms (out of range)" if math.isfinite(ms) else f"{ms} ms (out of range)"


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader went away (``| head``): the CLI stops quietly, as it does for a
        plain line (rich's own handling exits with status 1)."""
        raise BrokenPipeError


def console() -> Console:
    """stdout: as wide as the terminal, or wide enough not to wrap rows in a pipe."""
    out = _Console()
    return out if out.is_terminal else _Console(width=200, soft_wrap=True)


def iso(ms: float | None) -> str:
    """Epoch milliseconds as ISO 8601 in UTC (or "-"; the number, if no date can hold it)."""
    if ms is None:
        return "-"
    moment = utc_moment(ms)
    return _raw_ms(ms) if moment is None else moment.isoformat(timespec="milliseconds")


def summary(info: JobInfo, *, queue: bool = False) -> str:
    """A dead job on one line, tab-separated (with ``queue``: its queue first)."""
    error = f"{info.error.type}: {info.error.message}" if info.error else ""
    line = f"{info.id}\t{info.task or '?'}\tattempts={info.attempts}\t{error}"
    return f"{info.queue}\t{line}" if queue else line


NOT_KEPT = "(not kept)"


def details(info: JobInfo) -> str:
    """Everything about one job, a field a line; what a finished job did not keep reads
    "(not kept)", never a value it did not have."""
    kept = info.record_kept
    attempts = f"{info.attempts}" + (f" of {info.max_attempts}" if info.max_attempts else "")
    lines = [
        f"id:        {info.id}",
        f"queue:     {info.queue}",
        f"status:    {info.status}",
        f"task:      {_task(info)}",
        *_arguments(info),
        f"attempts:  {attempts if kept else NOT_KEPT}",
        f"priority:  {NOT_KEPT if info.priority is None else info.priority}",
    ]
    for name, ms in (("enqueued", info.enqueued_at_ms), ("started", info.started_at_ms)):
        lines.append(f"{name + ':':<10} {iso(ms) if kept else NOT_KEPT}")
    lines.append(f"finished:  {iso(info.finished_at_ms) if kept else NOT_KEPT}")
    if info.due_ms is not None:
        lines.append(f"due:       {iso(info.due_ms)}")
    lines += _links(info)
    if info.progress_raw is not None:
        lines.append(f"progress:  {_json(info.progress_raw)}")
    if info.result_raw is not None:
        lines.append(f"result:    {_json(info.result_raw)}")
    elif info.status == "complete":
        lines.append("result:    null")
    if not kept:
        lines.append(
            "kept:      only its id (a job that returns None leaves no record: "
            "App(keep_payload=True) keeps them)"
        )
    if info.error:
        lines += [f"error:     {info.error.type}: {info.error.message}", info.error.traceback]
    if info.raw is not None:
        lines.append(f"raw bytes: {info.raw!r}")
    return "\n".join(lines)


def _task(info: JobInfo) -> str:
    if info.task is not None:
        return info.task
    if info.children:
        return "(a batch)"
    if info.raw is not None:
        return "(not an aioqueue payload: raw bytes below)"
    return NOT_KEPT


def _arguments(info: JobInfo) -> list[str]:
    if not info.arguments_kept:  # a finished job's payload went (App(keep_payload=True))
        return [f"args:      {NOT_KEPT}", f"kwargs:    {NOT_KEPT}"]
    if info.raw is not None and info.task is None:
        return ["args:      -", "kwargs:    -"]
    return [f"args:      {list(info.args)!r}", f"kwargs:    {dict(info.kwargs)!r}"]


def _links(info: JobInfo) -> list[str]:
    lines = []
    if info.tenant is not None:
        lines.append(f"tenant:    {info.tenant}")
    if info.group is not None:
        lines.append(f"group:     {info.group}")
    if info.parents is not None:
        where = f" (queue {info.parent_queue})" if info.parent_queue else ""
        lines.append(f"parents:   {info.parents}{where}")
    if (children := info.children) is not None:
        lines.append(
            f"children:  {children.total} ({children.pending} pending, "
            f"{children.complete} complete, {children.failed} failed)"
        )
    return lines


def _json(raw: bytes) -> str:
    try:
        return orjson.dumps(orjson.loads(raw)).decode()
    except orjson.JSONDecodeError:
        return repr(raw)
