"""``aioqueue worker``: run a worker process (or several), on the configured Redis or on an
embedded server started for the command's lifetime; and ``aioqueue dashboard``.

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

from ..core.errors import ConfigError
from ..core.settings import ENV_REDIS_URL, WorkerSettings
from .garbage import tune_for_worker

if TYPE_CHECKING:
    import argparse
    from collections.abc import Coroutine, Iterator

    from ..app import App
    from ..worker import Worker

logger = logging.getLogger(__name__)

LEFTOVER_WAIT = 1.0  # seconds the exit waits for the tasks it cancels (see _cancel_leftovers)
CLOSE_WAIT = 1.0  # seconds the exit waits for the app's connections to close (see _close)


def worker_settings(app: App, args: argparse.Namespace) -> WorkerSettings:
    """The worker's settings from the command line, checked (raises ConfigError)."""
    if args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    if args.metrics_port is not None and args.metrics_port + args.processes > 65536:
        raise ConfigError(f"--metrics-port {args.metrics_port} leaves no port for each process")
    return WorkerSettings(
        queues=tuple(args.queues or app.queue_names()),
        concurrency=args.concurrency,
        lease=args.lease,
        grace=args.grace,
        burst=args.burst,
        wait_retries=args.wait_retries,
        queue_order=args.queue_order,
        log_jobs=args.log_jobs,
    )


def run_worker(app: App, args: argparse.Namespace) -> int:
    settings = worker_settings(app, args)
    loop = _new_loop(args.uvloop)  # checked before a server starts, like the rest
    if args.processes > 1:
        loop.close()
        with _redis_for(app):
            return _run_processes(app, args)
    with _metrics_for(app, settings, args), _redis_for(app):
        tune_for_worker()  # the process is the worker's; imports and the app are built
        worker = app.worker(
            queues=settings.queues, concurrency=settings.concurrency, lease=settings.lease,
            grace=settings.grace, burst=settings.burst, wait_retries=settings.wait_retries,
            queue_order=settings.queue_order, log_jobs=settings.log_jobs,
        )  # fmt: skip
        _run_leaving_abandoned_tasks(loop, _serve(app, worker))
    return 0


@contextlib.contextmanager
def _metrics_for(app: App, settings: WorkerSettings, args: argparse.Namespace) -> Iterator[None]:
    """Serve the worker's Prometheus metrics while it runs, if asked (the port is bound
    before anything else starts, so a taken port is the first error, not the last)."""
    if args.metrics_port is None:
        yield
        return
    try:
        from .metrics import instrument, start_metrics_server
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"--metrics-port needs {exc.name}: pip install 'aioqueue[metrics]'"
        ) from exc
    metrics = instrument(app, queues=settings.queues)
    with start_metrics_server(metrics, args.metrics_port, args.metrics_host) as server:
        logger.info("Prometheus metrics on %s", server.url)
        yield


async def run_dashboard(app: App, args: argparse.Namespace) -> int:
    """``aioqueue dashboard``: serve the web dashboard until Ctrl-C or SIGTERM."""
    if not app.redis_url:
        raise ConfigError(f"dashboard needs a Redis URL (--redis-url or {ENV_REDIS_URL})")
    try:
        from ..web import serve
    except ModuleNotFoundError as exc:
        raise ConfigError(f"dashboard needs {exc.name}: pip install 'aioqueue[web]'") from exc
    await serve(
        app, host=args.host, port=args.port, actions=args.actions, queues=args.queues,
        root_path=args.root_path, log_level=args.log_level,
    )  # fmt: skip
    return 0


async def _serve(app: App, worker: Worker) -> None:
    try:
        await worker.run(handle_signals=True)
    finally:
        _ignore_stop_signals()
        await _close(app)
        await _cancel_leftovers()


async def _close(app: App) -> None:
    """Close the app's connections, waiting CLOSE_WAIT at most: a connection that Redis
    holds up (it does not answer) closes with the process, a moment later."""
    closing = asyncio.ensure_future(app.close())
    done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT)
    if done:
        closing.result()  # (what it raised, as before)


def _ignore_stop_signals() -> None:
    """The worker has stopped and the rest of the exit is short: another Ctrl-C (or
    SIGTERM) must not break into it with a KeyboardInterrupt traceback."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


async def _cancel_leftovers() -> None:
    """Cancel what the worker left running, as asyncio.run would, but waiting a bounded
    time: jobs whose handlers run on in threads (they cannot be stopped: the process ends
    them, and their leases, no longer renewed, expire) end their waits at once, so the loop
    closes without "Task was destroyed but it is pending" for each."""
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current]
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=LEFTOVER_WAIT)


def _run_leaving_abandoned_tasks(
    loop: asyncio.AbstractEventLoop, main: Coroutine[Any, Any, None]
) -> None:
    """Like asyncio.run, except that it does not wait for tasks left running at the end:
    a handler that ignores cancellation must not keep the process from exiting."""
    try:
        loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        left = asyncio.all_tasks(loop)
        loop.close()
        _discard(left)


def _discard(tasks: set[asyncio.Task[Any]]) -> None:
    """Close quietly the tasks the exit left running (their cancellation did not end them:
    a call to a stalled server). Collected as they are, each would print "Task was
    destroyed but it is pending", and the traceback of its coroutine's clean-up, which
    finds no loop to run in (redis-py's disconnect asks for the current task)."""
    for task in tasks:
        task._log_destroy_pending = False  # type: ignore[attr-defined]  # (asyncio's own flag)
        with contextlib.suppress(Exception):  # what the clean-up raises, with no loop
            task.get_coro().close()


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
    from .embedded import EmbeddedServer  # (here: it loads ctypes, which a worker never needs)

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
    argv += ["--log-jobs"] if args.log_jobs else []
    argv += ["--metrics-host", args.metrics_host]
    env = {**os.environ, ENV_REDIS_URL: app.redis_url or ""}
    # Each child in a session of its own: a terminal's Ctrl-C (sent to the whole group)
    # reaches it once, forwarded by this process, not twice (a second signal skips the
    # grace). It still dies with this process (PDEATHSIG), even after a kill -9 here.
    from .embedded import die_with_parent

    die = die_with_parent if sys.platform == "linux" else None
    children = [
        subprocess.Popen(
            argv + _metrics_port(args, index), env=env, start_new_session=True, preexec_fn=die
        )
        for index in range(args.processes)
    ]

    def forward(sig: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    return max(child.wait() for child in children)


def _metrics_port(args: argparse.Namespace, index: int) -> list[str]:
    return [] if args.metrics_port is None else ["--metrics-port", str(args.metrics_port + index)]
