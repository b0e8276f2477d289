"""The command line: ``aioqueue worker module:app`` and ``aioqueue dead ls|show|requeue|purge``.

This is the only module that configures logging. With no Redis URL configured (no
``--redis-url``, none in the App, no ``AIOQUEUE_REDIS_URL``), ``worker`` starts an embedded
server on a free loopback port and says so; a configured URL always wins.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from .app import App
from .errors import AioqueueError, ConfigError
from .settings import ENV_REDIS_URL, WORKER_DEFAULTS
from .store.embedded import EmbeddedServer
from .store.heartbeats import mixed_task_sets, mixed_windows
from .store.server import eviction

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator, Sequence

    from .store.records import JobInfo
    from .worker import Worker

logger = logging.getLogger("aioqueue.cli")


def load_app(target: str) -> App:
    """Import ``module:attribute`` (the current directory is importable) and return the App."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected module:app, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(f"{target} is not an aioqueue.App (got {type(app).__name__})")
    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioqueue", description=__doc__.split("\n")[0])
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_worker_command(commands.add_parser("worker", help="run a worker process"))
    _add_check_command(
        commands.add_parser(
            "check", help="exit 1 unless every queue has a live worker (for health probes)"
        )
    )
    _add_dead_command(commands.add_parser("dead", help="inspect and requeue dead jobs"))
    reconcile = commands.add_parser(
        "reconcile", help="put back jobs whose queue entry vanished (after an eviction)"
    )
    reconcile.add_argument("target", help="module:app")
    reconcile.add_argument("--redis-url")
    reconcile.add_argument(
        "-q",
        "--queue",
        action="append",
        dest="queues",
        help="a queue to reconcile (repeatable; default: every queue of the app)",
    )
    return parser


def _add_worker_command(worker: argparse.ArgumentParser) -> None:
    add = worker.add_argument
    add("target", help="module:app, e.g. myproject.tasks:app")
    add("--redis-url", help=f"overrides the App's URL and {ENV_REDIS_URL}")
    add(
        "-q",
        "--queue",
        action="append",
        dest="queues",
        help="a queue to serve (repeatable; default: every queue of the app)",
    )
    add(
        "-c",
        "--concurrency",
        type=int,
        default=WORKER_DEFAULTS.concurrency,
        help="jobs at once per process (default: %(default)s)",
    )
    add(
        "-p",
        "--processes",
        type=int,
        default=1,
        help="worker processes to run (each with --concurrency slots)",
    )
    add(
        "--lease",
        type=float,
        default=WORKER_DEFAULTS.lease,
        help="lease seconds (default: %(default)s)",
    )
    add(
        "--grace",
        type=float,
        default=WORKER_DEFAULTS.grace,
        help="shutdown grace seconds (default: %(default)s)",
    )
    add(
        "--queue-order",
        choices=["fair", "strict"],
        default=WORKER_DEFAULTS.queue_order,
        help="strict: the order of -q is the queues' priority (default: %(default)s)",
    )
    add("--burst", action="store_true", help="exit once nothing is ready, running or due")
    add(
        "--no-wait-retries",
        dest="wait_retries",
        action="store_false",
        help="--burst: exit without waiting for the delayed retries of the jobs it ran",
    )
    add("--uvloop", action="store_true", help="run on uvloop (pip install 'aioqueue[uvloop]')")


def _add_check_command(check: argparse.ArgumentParser) -> None:
    check.add_argument("target", help="module:app")
    check.add_argument("--redis-url")
    check.add_argument(
        "-q",
        "--queue",
        action="append",
        dest="queues",
        help="a queue to check (repeatable; default: every queue of the app)",
    )


def _add_dead_command(dead: argparse.ArgumentParser) -> None:
    add = dead.add_argument
    add("action", choices=["ls", "show", "requeue", "purge"])
    add("target", help="module:app")
    add("ids", nargs="*", help="job ids (show: one; requeue/purge: none = oldest)")
    add("--redis-url")
    add("-q", "--queue", help="the queue (default: the app's default queue)")
    add("--limit", type=int, default=100, help="at most this many (oldest first)")
    add("--task", help="requeue/purge/ls: only dead jobs of this task")
    add("--error-type", help="requeue/purge/ls: only those that died of this")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        app = load_app(args.target)
        if args.redis_url:
            app.set_redis_url(args.redis_url)
        if args.command == "worker":
            return run_worker(app, args)
        if args.command == "check":
            return asyncio.run(run_check(app, args))
        if args.command == "reconcile":
            return asyncio.run(run_reconcile(app, args))
        return asyncio.run(run_dead(app, args))
    except AioqueueError as exc:
        logger.error("%s", exc)
        return 2


# -- worker ------------------------------------------------------------------------------


def run_worker(app: App, args: argparse.Namespace) -> int:
    with _redis_for(app):
        if args.processes > 1:
            return _run_processes(app, args)
        worker = app.worker(
            queues=args.queues,
            concurrency=args.concurrency,
            lease=args.lease,
            grace=args.grace,
            burst=args.burst,
            wait_retries=args.wait_retries,
            queue_order=args.queue_order,
        )
        _run_leaving_abandoned_tasks(_serve(app, worker), uvloop=args.uvloop)
    return 0


async def _serve(app: App, worker: Worker) -> None:
    try:
        await worker.run(handle_signals=True)
    finally:
        await app.close()


def _run_leaving_abandoned_tasks(main: Coroutine[Any, Any, None], *, uvloop: bool) -> None:
    """Like asyncio.run, except that it does not wait for tasks left running at the end:
    a handler that ignores cancellation must not keep the process from exiting."""
    loop = _new_loop(uvloop)
    try:
        loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _new_loop(uvloop: bool) -> asyncio.AbstractEventLoop:
    if not uvloop:
        return asyncio.new_event_loop()
    try:
        import uvloop as uv
    except ImportError as exc:
        raise ConfigError("--uvloop needs uvloop: pip install 'aioqueue[uvloop]'") from exc
    loop: asyncio.AbstractEventLoop = uv.new_event_loop()
    return loop


@contextlib.contextmanager
def _redis_for(app: App) -> Iterator[None]:
    """Use the configured server, or start an embedded one for the command's lifetime."""
    if app.redis_url:
        yield
        return
    server = EmbeddedServer()
    url = server.start()
    logger.warning(
        "no Redis URL configured (--redis-url, App(redis_url=...) or %s): "
        "started an embedded server %s at %s; its data is gone when this command exits",
        ENV_REDIS_URL,
        server.binary,
        url,
    )
    app.set_redis_url(url)
    try:
        yield
    finally:
        server.stop()


def _run_processes(app: App, args: argparse.Namespace) -> int:
    """Run N single-process workers as children, forwarding SIGTERM/SIGINT to them."""
    argv = [
        sys.executable,
        "-m",
        "aioqueue",
        "--log-level",
        args.log_level,
        "worker",
        args.target,
        "--concurrency",
        str(args.concurrency),
        "--lease",
        str(args.lease),
        "--grace",
        str(args.grace),
    ]
    for queue in args.queues or ():
        argv += ["--queue", queue]
    argv += ["--burst"] if args.burst else []
    argv += ["--queue-order", args.queue_order]
    argv += [] if args.wait_retries else ["--no-wait-retries"]
    argv += ["--uvloop"] if args.uvloop else []
    env = {**os.environ, ENV_REDIS_URL: app.redis_url or ""}
    children = [subprocess.Popen(argv, env=env) for _ in range(args.processes)]

    def forward(sig: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    codes = [child.wait() for child in children]
    return max(codes)


# -- health ------------------------------------------------------------------------------


async def run_check(app: App, args: argparse.Namespace) -> int:
    """Print the live workers per queue, and what is wrong: 1 if a queue has no live
    worker or the server may evict queue keys, else 0. Workers of one queue that serve
    different task sets are a warning (a deploy in progress looks the same)."""
    if not app.redis_url:
        raise ConfigError(f"check needs a Redis URL (--redis-url or {ENV_REDIS_URL})")
    healthy = True
    try:
        for name in args.queues or app.queue_names():
            workers = await app.queue(name).workers()
            healthy = healthy and bool(workers)
            running = sum(int(worker.get("running", 0)) for worker in workers)
            print(f"{name}: {len(workers)} live worker(s), {running} job(s) running")  # noqa: T201
            for mixed in (mixed_task_sets(workers), mixed_windows(workers)):
                if mixed is not None:
                    print(f"WARNING {name}: {mixed}")  # noqa: T201
        evicting = await eviction(await app.client())
        if (problem := evicting.problem()) is not None:
            print(f"PROBLEM: {problem}")  # noqa: T201
            healthy = healthy and not evicting.unsafe
    finally:
        await app.close()
    return 0 if healthy else 1


async def run_reconcile(app: App, args: argparse.Namespace) -> int:
    """Repair each queue's jobs whose entry vanished; print how many per queue."""
    if not app.redis_url:
        raise ConfigError(f"reconcile needs a Redis URL (--redis-url or {ENV_REDIS_URL})")
    try:
        for name in args.queues or app.queue_names():
            repaired = await app.queue(name).reconcile()
            print(f"{name}: {repaired} job(s) put back")  # noqa: T201
    finally:
        await app.close()
    return 0


# -- dead letters ------------------------------------------------------------------------


async def run_dead(app: App, args: argparse.Namespace) -> int:
    if not app.redis_url:
        raise ConfigError(f"dead-letter commands need a Redis URL (--redis-url or {ENV_REDIS_URL})")
    queue = app.queue(args.queue)
    try:
        if args.action == "ls":
            for info in await queue.dead_jobs(limit=args.limit):
                if args.task in (None, info.task) and args.error_type in (
                    None,
                    info.error.type if info.error else None,
                ):
                    print(_summary(info))  # noqa: T201 - the command's output
        elif args.action == "show":
            if len(args.ids) != 1:
                raise ConfigError("show takes exactly one job id")
            found = await queue.info(args.ids[0])
            if found is None:
                raise ConfigError(f"no job {args.ids[0]!r} in queue {queue.name!r}")
            print(_details(found))  # noqa: T201
        elif args.action == "requeue":
            count = await queue.requeue_dead(
                args.ids, task=args.task, error_type=args.error_type, limit=args.limit
            )
            print(f"requeued {count} job(s)")  # noqa: T201
        else:
            count = await queue.purge_dead(
                args.ids, task=args.task, error_type=args.error_type, limit=args.limit
            )
            print(f"purged {count} job(s)")  # noqa: T201
    finally:
        await app.close()
    return 0


def _summary(info: JobInfo) -> str:
    error = f"{info.error.type}: {info.error.message}" if info.error else ""
    return f"{info.id}\t{info.task or '?'}\tattempts={info.attempts}\t{error}"


def _details(info: JobInfo) -> str:
    lines = [
        f"id:        {info.id}",
        f"queue:     {info.queue}",
        f"status:    {info.status}",
        f"task:      {info.task}",
        f"args:      {list(info.args)!r}",
        f"kwargs:    {dict(info.kwargs)!r}",
        f"attempts:  {info.attempts}",
        f"enqueued:  {info.enqueued_at_ms}",
        f"finished:  {info.finished_at_ms}",
    ]
    if info.error:
        lines += [f"error:     {info.error.type}: {info.error.message}", info.error.traceback]
    if info.raw is not None:
        lines.append(f"raw bytes: {info.raw!r}")
    return "\n".join(lines)
