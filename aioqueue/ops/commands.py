"""The one-shot commands: ``check``, ``reconcile``, ``info``, ``jobs ls``, ``job
show|cancel`` and ``dead ls|show|requeue|purge``.

Each needs a configured Redis URL (they never start an embedded server: there would be
nothing in it), prints its result on stdout, and returns the exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import orjson
from rich.console import Group
from rich.live import Live

from ..core.errors import ConfigError, ServerUnavailable
from ..core.settings import ENV_REDIS_URL, mask_url
from .tables import (
    QueueSnapshot,
    channels_table,
    console,
    info_table,
    iso,
    jobs_table,
    topics_table,
)

if TYPE_CHECKING:
    import argparse

    from rich.console import RenderableType

    from ..app import App
    from ..client.messaging import ChannelInfo
    from ..client.queue import Queue
    from ..core.records import JobInfo


def _say(line: str) -> None:
    print(line)  # noqa: T201 - the commands' output


def need_url(app: App, command: str) -> None:
    if not app.redis_url:
        raise ConfigError(f"{command} needs a Redis URL (--redis-url or {ENV_REDIS_URL})")


async def run_check(app: App, args: argparse.Namespace) -> int:
    """Print the live workers per queue, and what is wrong: 1 if a queue has no live
    worker or the server may evict queue keys, else 0. Workers of one queue that serve
    different task sets are a warning (a deploy in progress looks the same). All of it
    within the app's ``call_timeout`` (a probe's timeout must see exit code 2)."""
    need_url(app, "check")
    limit = app.settings.call_timeout
    try:  # (a second more: a call's own deadline, which names the cause, comes first)
        async with asyncio.timeout(limit + 1):
            return await _check(app, args)
    except TimeoutError:
        where = mask_url(app.redis_url or "")
        raise ServerUnavailable(
            f"cannot reach Redis at {where}: no answer within {limit:g}s (call_timeout)"
        ) from None


async def _check(app: App, args: argparse.Namespace) -> int:
    healthy = True
    names = args.queues or app.queue_names()
    for name in names:
        queue = app.queue(name)
        workers = await queue.workers()
        healthy = healthy and bool(workers)
        running = sum(int(worker.get("running", 0)) for worker in workers)
        _say(f"{name}: {len(workers)} live worker(s), {running} job(s) running")
        for warning in queue.worker_warnings(workers):
            _say(f"WARNING {name}: {warning}")
    evicting = await app.queue(names[0]).eviction()  # the server's, read once
    if (problem := evicting.problem()) is not None:
        _say(f"PROBLEM: {problem}")
        healthy = healthy and not evicting.unsafe
    return 0 if healthy else 1


async def run_reconcile(app: App, args: argparse.Namespace) -> int:
    """Repair each queue's jobs whose entry vanished; print how many per queue."""
    need_url(app, "reconcile")
    for name in args.queues or app.queue_names():
        repaired = await app.queue(name).reconcile()
        _say(f"{name}: {repaired} job(s) put back")
    return 0


async def run_info(app: App, args: argparse.Namespace) -> int:
    """A table of the queues (counts, rates over the last minute, live workers) and one of
    the mailboxes and groups, if any; with ``--watch``, redrawn every few seconds until
    Ctrl-C."""
    need_url(app, "info")
    names = args.queues or app.queue_names()
    out = console()
    if args.watch is None:
        out.print(await _info(app, names))
        return 0
    with contextlib.suppress(asyncio.CancelledError):  # Ctrl-C: asyncio.run cancels this
        if not out.is_terminal:  # a pipe or a log: one view after another
            while True:
                out.print(await _info(app, names))
                await asyncio.sleep(args.watch)
        with Live(await _info(app, names), console=out, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(args.watch)
                live.update(await _info(app, names), refresh=True)
    return 0


async def _info(app: App, names: list[str]) -> RenderableType:
    tables: list[RenderableType] = [info_table(await _snapshots(app, names))]
    if channels := await _channels(app):
        tables.append(channels_table(channels))
    if topics := await app.topics():
        infos = await asyncio.gather(*(topic.info() for topic in topics))
        tables.append(topics_table([(t.name, i) for t, i in zip(topics, infos, strict=True)]))
    return Group(*tables) if len(tables) > 1 else tables[0]


async def _channels(app: App) -> list[tuple[str, str, ChannelInfo]]:
    found = await app.channels()
    infos = await asyncio.gather(*(channel.info() for channel in found))
    return [
        (channel.keys.kind, channel.name, info) for channel, info in zip(found, infos, strict=True)
    ]


async def _snapshots(app: App, names: list[str]) -> list[QueueSnapshot]:
    async def one(name: str) -> QueueSnapshot:
        queue = app.queue(name)
        counts, history, workers, limits = await asyncio.gather(
            queue.counts(), queue.history(minutes=2), queue.workers(), queue.limits()
        )
        return QueueSnapshot(name, counts, history, workers, limits)

    return list(await asyncio.gather(*(one(name) for name in names)))


async def run_jobs(app: App, args: argparse.Namespace) -> int:
    """``jobs ls``: a page of a queue's jobs in one state."""
    need_url(app, "jobs")
    queue = app.queue(args.queue)
    jobs = await queue.jobs(args.state, limit=args.limit, offset=args.offset)
    due = None
    if args.state == "scheduled":
        scheduled = await queue.scheduled(limit=args.limit, offset=args.offset)
        due = {entry.id: entry.due_ms for entry in scheduled}
    console().print(jobs_table(f"{queue.name}: {args.state}", jobs, due))
    return 0


async def run_job(app: App, args: argparse.Namespace) -> int:
    """``job show ID`` (everything about one job) and ``job cancel ID``."""
    need_url(app, "job")
    queue = app.queue(args.queue)
    if args.action == "show":
        await _show(queue, [args.id])
        return 0
    if await queue.cancel(args.id):
        _say(f"cancelled {args.id} (a running job is aborted)")
        return 0
    status = await queue.status(args.id)
    if status is None:
        raise ConfigError(f"no job {args.id!r} in queue {queue.name!r}")
    _say(f"{args.id} is {status}: nothing to cancel")
    return 1


async def run_queue(app: App, args: argparse.Namespace) -> int:
    """``queue pause|resume|limit|limits``."""
    need_url(app, "queue")
    queue = app.queue(args.queue)
    if args.action == "pause":
        changed = await queue.pause()
        _say(f"{queue.name}: paused" if changed else f"{queue.name} was paused already")
    elif args.action == "resume":
        changed = await queue.resume()
        _say(f"{queue.name}: resumed" if changed else f"{queue.name} was not paused")
    elif args.action == "limit":  # (no options: lifts every limit)
        limits = await queue.set_limits(
            rate=args.rate, burst=args.burst, concurrency=args.concurrency
        )
        _say(f"{queue.name}: {limits.describe()}")
    else:
        _say(f"{queue.name}: {(await queue.limits()).describe()}")
    return 0


async def run_dead(app: App, args: argparse.Namespace) -> int:
    need_url(app, "dead")
    queue = app.queue(args.queue)
    if args.action == "ls":
        for info in await queue.find_dead(
            task=args.task, error_type=args.error_type, limit=args.limit
        ):
            _say(summary(info))
    elif args.action == "show":
        await _show(queue, args.ids)
    elif args.action == "requeue":
        count = await queue.requeue_dead(
            args.ids, task=args.task, error_type=args.error_type, limit=args.limit
        )
        _say(f"requeued {count} job(s)")
    else:
        count = await queue.purge_dead(
            args.ids, task=args.task, error_type=args.error_type, limit=args.limit
        )
        _say(f"purged {count} job(s)")
    return 0


async def _show(queue: Queue, ids: list[str]) -> None:
    if len(ids) != 1:
        raise ConfigError("show takes exactly one job id")
    found = await queue.info(ids[0])
    if found is None:
        raise ConfigError(f"no job {ids[0]!r} in queue {queue.name!r}")
    _say(details(found))


def summary(info: JobInfo) -> str:
    error = f"{info.error.type}: {info.error.message}" if info.error else ""
    return f"{info.id}\t{info.task or '?'}\tattempts={info.attempts}\t{error}"


def details(info: JobInfo) -> str:
    lines = [
        f"id:        {info.id}",
        f"queue:     {info.queue}",
        f"status:    {info.status}",
        f"task:      {info.task or ('(a batch)' if info.children else None)}",
        f"args:      {list(info.args)!r}",
        f"kwargs:    {dict(info.kwargs)!r}",
        f"attempts:  {info.attempts}" + (f" of {info.max_attempts}" if info.max_attempts else ""),
        f"priority:  {info.priority}",
        f"enqueued:  {iso(info.enqueued_at_ms)}",
        f"started:   {iso(info.started_at_ms)}",
        f"finished:  {iso(info.finished_at_ms)}",
    ]
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
    if info.progress_raw is not None:
        lines.append(f"progress:  {_json(info.progress_raw)}")
    if info.result_raw is not None:
        lines.append(f"result:    {_json(info.result_raw)}")
    if info.error:
        lines += [f"error:     {info.error.type}: {info.error.message}", info.error.traceback]
    if info.raw is not None:
        lines.append(f"raw bytes: {info.raw!r}")
    return "\n".join(lines)


def _json(raw: bytes) -> str:
    try:
        return orjson.dumps(orjson.loads(raw)).decode()
    except orjson.JSONDecodeError:
        return repr(raw)
