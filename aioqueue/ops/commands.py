"""The one-shot commands about queues: ``check``, ``reconcile``, ``info``, ``jobs ls``
and ``queue pause|resume|limit|limits`` (those about given jobs: ``job_commands``).

Each needs a configured Redis URL (they never start an embedded server: there would be
nothing in it), prints its result on stdout, and returns the exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING

from rich.console import Group
from rich.live import Live

from ..core.errors import ConfigError, ServerUnavailable
from ..core.settings import ENV_REDIS_URL, mask_url
from .tables import (
    WHEN,
    QueueSnapshot,
    channels_table,
    console,
    info_table,
    jobs_table,
    tenants_table,
    topics_table,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from rich.console import RenderableType

    from ..app import App
    from ..client.messaging import ChannelInfo


def say(line: str) -> None:
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
        say(f"{name}: {len(workers)} live worker(s), {running} job(s) running")
        for warning in queue.worker_warnings(workers):
            say(f"WARNING {name}: {warning}")
    evicting = await app.queue(names[0]).eviction()  # the server's, read once
    if (problem := evicting.problem()) is not None:
        say(f"PROBLEM: {problem}")
        healthy = healthy and not (evicting.unsafe or evicting.full)
    return 0 if healthy else 1


async def run_reconcile(app: App, args: argparse.Namespace) -> int:
    """Repair each queue's jobs whose entry vanished; print how many per queue."""
    need_url(app, "reconcile")
    for name in args.queues or app.queue_names():
        repaired = await app.queue(name).reconcile()
        say(f"{name}: {repaired} job(s) put back")
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
    with _until_interrupted() as stop:
        if not out.is_terminal:  # a pipe or a log: one view after another
            while not stop.is_set():
                out.print(await _info(app, names))
                await _pause(stop, args.watch)
            return 0
        with Live(await _info(app, names), console=out, auto_refresh=False) as live:
            while not await _pause(stop, args.watch):
                live.update(await _info(app, names), refresh=True)
    return 0


@contextlib.contextmanager
def _until_interrupted() -> Iterator[asyncio.Event]:
    """An event set by Ctrl-C or SIGTERM: the watch ends after the redraw under way (a call
    cancelled inside redis-py can hang its client for seconds; call_timeout bounds a redraw)."""
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop``; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def _info(app: App, names: list[str]) -> RenderableType:
    snapshots = await _snapshots(app, names)
    tables: list[RenderableType] = [info_table(snapshots)]
    if tenants := tenants_table(snapshots):
        tables.append(tenants)
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
    """``jobs ls``: a page of a queue's jobs in one state (of one task, with ``--task``)."""
    need_url(app, "jobs")
    queue = app.queue(args.queue)
    page = await queue.find_jobs(args.state, task=args.task, limit=args.limit, offset=args.offset)
    title = f"{queue.name}: {args.state}" + (f", task {args.task}" if args.task else "")
    console().print(jobs_table(title, page.jobs, when=WHEN[args.state]))
    if not page.exhausted and len(page.jobs) < args.limit:
        say(f"(looked at the first {page.scanned} entries of the list)")
    return 0


async def run_queue(app: App, args: argparse.Namespace) -> int:
    """``queue pause|resume|limit|limits``."""
    need_url(app, "queue")
    queue = app.queue(args.queue)
    if args.action == "pause":
        changed = await queue.pause()
        say(f"{queue.name}: paused" if changed else f"{queue.name} was paused already")
    elif args.action == "resume":
        changed = await queue.resume()
        say(f"{queue.name}: resumed" if changed else f"{queue.name} was not paused")
    elif args.action == "limit":  # (no options: lifts every limit)
        limits = await queue.set_limits(
            rate=args.rate, burst=args.burst, concurrency=args.concurrency
        )
        say(f"{queue.name}: {limits.describe()}")
    else:
        say(f"{queue.name}: {(await queue.limits()).describe()}")
    return 0
