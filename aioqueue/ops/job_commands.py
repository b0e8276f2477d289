"""The commands about given jobs: ``job show|cancel`` and ``dead ls|show|requeue|purge``.

Given ``-q``, a command looks in that queue; without it, in every queue the app knows
(``app.queue_names()``), and says which it searched when it finds nothing. A bulk purge
(no ids) asks first, on a terminal; elsewhere it needs ``--yes``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from ..core.errors import ConfigError
from ..core.records import JobStatus
from .commands import need_url, say
from .tables import details, summary

if TYPE_CHECKING:
    import argparse

    from ..app import App
    from ..core.records import JobInfo


def _searched(app: App, queue: str | None) -> list[str]:
    return [queue] if queue else app.queue_names()


async def find(app: App, queue: str | None, job_id: str) -> list[JobInfo]:
    """The job ``job_id`` in ``queue``, or in every queue the app knows (an id may be in
    several); ConfigError naming the queues searched if it is in none."""
    names = _searched(app, queue)
    infos = await asyncio.gather(*(app.queue(name).info(job_id) for name in names))
    found = [info for info in infos if info is not None]
    if not found:
        where = f"queue {queue!r}" if queue else f"any queue of the app ({', '.join(names)})"
        raise ConfigError(f"no job {job_id!r} in {where}")
    return found


async def run_job(app: App, args: argparse.Namespace) -> int:
    """``job show ID`` (everything about one job) and ``job cancel ID``."""
    need_url(app, "job")
    found = await find(app, args.queue, args.id)
    if args.action == "show":
        say("\n\n".join(details(info) for info in found))
        return 0
    if len(found) > 1:
        names = ", ".join(info.queue for info in found)
        raise ConfigError(f"job {args.id!r} is in queues {names}: name one with -q")
    [info] = found
    if await app.queue(info.queue).cancel(args.id):
        running = info.status is JobStatus.ACTIVE
        say(
            f"abort requested for {args.id} (running: its worker cancels it)"
            if running
            else f"cancelled {args.id} ({info.status} in {info.queue}: it will not run)"
        )
        return 0
    status = await app.queue(info.queue).status(args.id)
    say(f"{args.id} is {status}: nothing to cancel")
    return 1


async def run_dead(app: App, args: argparse.Namespace) -> int:
    """``dead ls|show|requeue|purge``, in one queue (``-q``) or every one the app knows."""
    need_url(app, "dead")
    if args.action == "show":
        if len(args.ids) != 1:
            raise ConfigError("dead show takes exactly one job id")
        say("\n\n".join(details(info) for info in await find(app, args.queue, args.ids[0])))
        return 0
    chosen = await _chosen(app, args)
    if args.action == "ls":
        for info in (info for infos in chosen.values() for info in infos):
            say(summary(info, queue=not args.queue))
        if not any(chosen.values()):
            sys.stderr.write(f"(no dead jobs in {', '.join(chosen)})\n")
        return 0
    if args.action == "purge" and not args.ids and not await _confirmed(chosen, args.yes):
        say("purged nothing")
        return 1
    done = {}
    for name, infos in chosen.items():
        ids = args.ids if args.ids else [info.id for info in infos]
        queue = app.queue(name)
        act = queue.requeue_dead if args.action == "requeue" else queue.purge_dead
        done[name] = await act(ids, limit=max(args.limit, len(ids))) if ids else 0
    verb = "requeued" if args.action == "requeue" else "purged"
    say(f"{verb} {sum(done.values())} job(s){_by_queue(done)}")
    return 0


async def _chosen(app: App, args: argparse.Namespace) -> dict[str, list[JobInfo]]:
    """Per queue searched, the dead jobs a command acts on: the oldest ``--limit`` of
    ``--task`` and ``--error-type`` (none given: any), or, given ids, none looked up."""
    names = _searched(app, args.queue)
    if args.ids and args.action != "ls":
        return {name: [] for name in names}
    found = await asyncio.gather(
        *(
            app.queue(name).find_dead(task=args.task, error_type=args.error_type, limit=args.limit)
            for name in names
        )
    )
    return dict(zip(names, found, strict=True))


async def _confirmed(chosen: dict[str, list[JobInfo]], yes: bool) -> bool:
    """Whether to go on with deleting these dead jobs: ``--yes``, or the user says so."""
    total = sum(len(infos) for infos in chosen.values())
    counts = {name: len(infos) for name, infos in chosen.items()}
    if total == 0 or yes:
        return True
    what = f"delete {total} dead job(s){_by_queue(counts)}"
    if not sys.stdin.isatty():  # nobody to ask
        raise ConfigError(f"dead purge would {what}: confirm with --yes")
    return _ask(f"{what[0].upper()}{what[1:]}? This cannot be undone. [y/N] ")


def _ask(question: str) -> bool:
    """A yes from the terminal. It blocks the event loop on purpose (nothing else runs),
    and Ctrl-C raises KeyboardInterrupt here at once: asyncio.run's handler would only
    cancel the task, which waits in input() all the same."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        answer = input(question)
    except EOFError:  # Ctrl-D
        return False
    finally:
        signal.signal(signal.SIGINT, previous)
    return answer.strip().lower() in ("y", "yes")


def _by_queue(counts: dict[str, int]) -> str:
    shown = [f"{name}: {n}" for name, n in counts.items() if n]
    return f" ({', '.join(shown)})" if len(counts) > 1 and shown else ""
