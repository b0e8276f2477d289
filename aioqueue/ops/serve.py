"""``aioqueue worker``: run a worker process (or several), on the configured Redis or on an
embedded server started for the command's lifetime.

Everything the user typed is checked before anything starts (no server is started for a
worker that cannot run). The embedded server lives in a session of its own, so that a
terminal's Ctrl-C (which signals the whole foreground process group) stops the worker
first: the worker releases its jobs, then the server is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..settings import ENV_REDIS_URL, WorkerSettings
from ..store.embedded import EmbeddedServer

if TYPE_CHECKING:
    import argparse
    from collections.abc import Coroutine, Iterator

    from ..app import App
    from ..worker import Worker

logger = logging.getLogger(__name__)


def worker_settings(app: App, args: argparse.Namespace) -> WorkerSettings:
    """The worker's settings from the command line, checked (raises ConfigError)."""
    if args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    return WorkerSettings(
        queues=tuple(args.queues or app.queue_names()),
        concurrency=args.concurrency,
        lease=args.lease,
        grace=args.grace,
        burst=args.burst,
        wait_retries=args.wait_retries,
        queue_order=args.queue_order,
    )


def run_worker(app: App, args: argparse.Namespace) -> int:
    settings = worker_settings(app, args)
    loop = _new_loop(args.uvloop)  # checked before a server starts, like the rest
    with _redis_for(app):
        if args.processes > 1:
            loop.close()
            return _run_processes(app, args)
        worker = app.worker(
            queues=settings.queues, concurrency=settings.concurrency, lease=settings.lease,
            grace=settings.grace, burst=settings.burst, wait_retries=settings.wait_retries,
            queue_order=settings.queue_order,
        )  # fmt: skip
        _run_leaving_abandoned_tasks(loop, _serve(app, worker))
    return 0


async def _serve(app: App, worker: Worker) -> None:
    try:
        await worker.run(handle_signals=True)
    finally:
        await app.close()


def _run_leaving_abandoned_tasks(
    loop: asyncio.AbstractEventLoop, main: Coroutine[Any, Any, None]
) -> None:
    """Like asyncio.run, except that it does not wait for tasks left running at the end:
    a handler that ignores cancellation must not keep the process from exiting."""
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
        "no Redis URL configured (--redis-url, App(redis_url=...) or %s): started an "
        "embedded server %s at %s; its data is gone when this command exits",
        ENV_REDIS_URL, server.binary, url,
    )  # fmt: skip
    app.set_redis_url(url)
    try:
        yield
    finally:
        server.stop()


def _run_processes(app: App, args: argparse.Namespace) -> int:
    """Run N single-process workers as children, forwarding SIGTERM/SIGINT to them."""
    argv = [sys.executable, "-m", "aioqueue", "worker", args.target,
            "--log-level", args.log_level, "--log-format", args.log_format,
            "--concurrency", str(args.concurrency), "--lease", str(args.lease),
            "--grace", str(args.grace), "--queue-order", args.queue_order]  # fmt: skip
    for queue in args.queues or ():
        argv += ["--queue", queue]
    argv += ["--burst"] if args.burst else []
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
    return max(child.wait() for child in children)
