"""The command line: ``aioqueue <command> module:app [options]``.

This is the only module that configures logging. An error a user can fix (a bad option,
a module that does not import, a URL that does not parse, a Redis that cannot be reached)
is one line on stderr and exit code 2; tracebacks are for bugs. Options go anywhere after
the command (``aioqueue dead show APP -q QUEUE ID`` and ``aioqueue dead show -q QUEUE APP
ID`` are the same), ``--log-level`` and ``--log-format`` before it or after.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

from redis.exceptions import AuthenticationError, NoPermissionError, RedisError, ResponseError

from ..app import App
from ..core import __version__
from ..core.errors import AioqueueError, ConfigError, describe
from ..core.settings import ENV_REDIS_URL, WORKER_DEFAULTS, mask_url
from . import logs
from .commands import refuse_in_process, run_check, run_info, run_jobs, run_queue, run_reconcile
from .job_commands import run_dead, run_job
from .serve import run_dashboard, run_worker

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence
    from typing import Any

logger = logging.getLogger("aioqueue.cli")

COMMANDS = {
    "worker": "run a worker process (or -p of them) for the app's queues",
    "check": "exit 1 unless every queue has a live worker and Redis keeps its keys",
    "info": "a table of the queues: counts, rates, workers (--watch to follow it)",
    "jobs": "list a queue's ready, scheduled, active or dead jobs",
    "job": "show or cancel one job",
    "queue": "pause or resume a queue, or limit its rate and concurrency (for every worker)",
    "dead": "list, show, requeue or purge dead jobs",
    "reconcile": "put back jobs whose queue entry vanished (after an eviction)",
    "dashboard": "serve the web dashboard (pip install 'aioqueue[web]')",
}

ACTIONS = {
    "dead": ["ls", "show", "requeue", "purge"], "jobs": ["ls"], "job": ["show", "cancel"],
    "queue": ["pause", "resume", "limit", "limits"],
}  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints its usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} -h)\n")


def load_app(target: str) -> App:
    """Import ``module:attribute`` (the current directory is importable) and return the App."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"expected module:app, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        logger.debug("importing %s failed", module_name, exc_info=exc)
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(f"{target} is not an aioqueue.App (got {type(app).__name__})")
    return app


def build_parser() -> argparse.ArgumentParser:
    """The top level: global options and the command; the command's own parser takes
    the rest (see ``command_parser``)."""
    listing = "\n".join(f"  {name:<10} {text}" for name, text in COMMANDS.items())
    parser = _Parser(
        prog="aioqueue",
        description="An asyncio task queue on Redis.",
        epilog=f"commands:\n{listing}\n\n'aioqueue COMMAND -h' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aioqueue {__version__}")
    _log_options(parser, argparse.SUPPRESS)
    parser.add_argument(
        "command", nargs="?", choices=COMMANDS, metavar="COMMAND", help="one of those below"
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _log_options(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--log-level", type=str.lower, choices=logs.LEVELS, default=default,
        help="debug, info, warning or error (default: info)",
    )  # fmt: skip
    parser.add_argument(
        "--log-format", choices=["text", "json"], default=default,
        help="text, or one JSON object per line (default: text)",
    )  # fmt: skip


def command_parser(command: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"aioqueue {command}", description=COMMANDS[command])
    if command in ACTIONS:  # e.g. aioqueue dead ACTION APP [IDS]
        parser.add_argument("action", choices=ACTIONS[command])
    parser.add_argument("target", help="module:app, e.g. myproject.tasks:app")
    parser.add_argument("--redis-url", help=f"overrides the App's URL and {ENV_REDIS_URL}")
    _log_options(parser, argparse.SUPPRESS)
    {"worker": _worker_options, "check": _queues_option, "dead": _dead_options,
     "reconcile": _queues_option, "info": _info_options, "jobs": _jobs_options,
     "job": _job_options, "dashboard": _dashboard_options,
     "queue": _queue_options}[command](parser)  # fmt: skip
    return parser


def _info_options(parser: argparse.ArgumentParser) -> None:
    _queues_option(parser)
    parser.add_argument(
        "--watch", type=_positive, nargs="?", const=2.0, metavar="SECONDS",
        help="redraw every SECONDS (default 2) until Ctrl-C",
    )  # fmt: skip


def _jobs_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("-q", "--queue", help="the queue (default: the app's default queue)")
    add(
        "--state", default="ready",
        choices=["ready", "scheduled", "active", "dead", "complete", "retrying"],
        help="which jobs (default: %(default)s; complete: the newest that kept a result; "
        "retrying: scheduled again after a failed attempt)",
    )  # fmt: skip
    add("--task", help="only the jobs of this task")
    add("--limit", type=_count, default=50, help="at most this many (default: %(default)s)")
    add("--offset", type=_count, default=0, help="skip this many first (default: %(default)s)")


def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the job id")
    parser.add_argument("-q", "--queue", help="the queue (default: every queue the app knows)")


def _queue_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("-q", "--queue", help="the queue (default: the app's default queue)")
    add("--rate", help="limit: starts at most, e.g. 100/s, 20/m, 500/h, 5/10s (default: none)")
    add("--burst", type=_at_least_one, default=1, help="limit: starts at once (default: 1)")
    add("--concurrency", type=_at_least_one, help="limit: running at once (default: none)")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def _dashboard_options(parser: argparse.ArgumentParser) -> None:
    _queues_option(parser)
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    add("--port", type=_port, default=8080, help="the port (default: %(default)s)")
    add(
        "--actions", action="store_true",
        help="show the cancel, requeue and purge buttons (default: read-only)",
    )  # fmt: skip
    add("--root-path", default="", help="the path prefix a reverse proxy serves it under")


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, not {text}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return value


def _queues_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q", "--queue", action="append", dest="queues",
        help="a queue (repeatable; default: every queue of the app)",
    )  # fmt: skip


def _worker_options(parser: argparse.ArgumentParser) -> None:
    _queues_option(parser)
    add, defaults = parser.add_argument, WORKER_DEFAULTS
    add(
        "-c",
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        help="jobs at once per process (default: %(default)s)",
    )
    add(
        "-p",
        "--processes",
        type=int,
        default=1,
        help="worker processes, each with --concurrency slots (default: %(default)s)",
    )
    add(
        "--lease",
        type=float,
        default=defaults.lease,
        help="lease seconds, renewed while a job runs (default: %(default)s)",
    )
    add(
        "--grace",
        type=float,
        default=defaults.grace,
        help="seconds running jobs get at shutdown (default: %(default)s)",
    )
    add(
        "--queue-order",
        choices=["fair", "strict"],
        default=defaults.queue_order,
        help="strict: the order of -q is the queues' priority (default: %(default)s)",
    )
    add("--burst", action="store_true", help="exit once nothing is ready, running or due")
    add("--log-jobs", action="store_true", help="log a line per finished job (outcome, time)")
    add(
        "--no-wait-retries",
        dest="wait_retries",
        action="store_false",
        help="with --burst: exit without waiting for the delayed retries of jobs it ran",
    )
    add("--uvloop", action="store_true", help="run on uvloop (pip install aioqueue[uvloop])")
    _metrics_options(parser)


def _metrics_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--metrics-port", type=_port, metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics; with -p N, the "
        "processes take PORT, PORT+1, ... (pip install 'aioqueue[metrics]'; default: off)",
    )  # fmt: skip
    add(
        "--metrics-host", default="127.0.0.1",
        help="the address the metrics are served on (default: %(default)s)",
    )  # fmt: skip


def _dead_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "ids", nargs="*", default=[], metavar="ID",
        help="job ids, optional (show: one; requeue, purge: none = the oldest --limit)",
    )  # fmt: skip
    add("-q", "--queue", help="the queue (default: every queue the app knows)")
    add(
        "--limit", type=_at_least_one, default=100,
        help="at most this many per queue, oldest first (default: 100)",
    )  # fmt: skip
    add("--task", help="ls, requeue, purge: only dead jobs of this task")
    add("--error-type", help="ls, requeue, purge: only those that died of this error type")
    add("--yes", action="store_true", help="purge without ids: do not ask first")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare ``aioqueue``: what it can do, not an error about it
        parser.print_help(sys.stderr)
        parser.exit(2)
    command_parser(args.command).parse_intermixed_args(args.rest, namespace=args)
    args.log_level = getattr(args, "log_level", "info")
    args.log_format = getattr(args, "log_format", "text")
    return args


ONE_SHOT: dict[str, Callable[[App, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "check": run_check,
    "info": run_info,
    "jobs": run_jobs,
    "job": run_job,
    "queue": run_queue,
    "dead": run_dead,
    "reconcile": run_reconcile,
    "dashboard": run_dashboard,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        code = _run(args)
        sys.stdout.flush()  # a reader gone (``| head -1``) shows here, not at exit
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:  # Ctrl-C at a question (workers and --watch handle theirs)
        sys.stderr.write("\n")
        return 128 + signal.SIGINT
    return code


def _run(args: argparse.Namespace) -> int:
    app: App | None = None
    try:
        app = load_app(args.target)
        if args.redis_url:
            app.set_redis_url(args.redis_url)
        refuse_in_process(app)
        if args.command == "worker":
            return run_worker(app, args)
        return asyncio.run(_one_shot(app, args))
    except BrokenPipeError:
        raise  # stdout's reader went away: not Redis's doing
    except AioqueueError as exc:
        logger.error("%s", exc)
    except (AuthenticationError, NoPermissionError) as exc:
        logger.error("Redis at %s refused: %s", _url(app), describe(exc))
    except ResponseError as exc:
        logger.error("%s", _answered(app, exc))
    except (RedisError, OSError) as exc:
        logger.error("cannot reach Redis at %s: %s", _url(app), describe(exc))
    return 2


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``| head -1``): stop without a word, as Unix tools
    do (their status: killed by SIGPIPE), and let nothing write to it again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _answered(app: App | None, exc: ResponseError) -> str:
    """Redis answered with an error (it was reached): say what it said."""
    if "DB index is out of range" in str(exc) and app is not None:
        db = urlsplit(app.redis_url or "").path.strip("/") or "0"
        return (
            f"Redis at {_url(app)} has no db {db} (DB index is out of range: the server's "
            "`databases` setting is lower)"
        )
    return f"Redis at {_url(app)} answered: {describe(exc)}"


def _url(app: App | None) -> str:
    return mask_url(app.redis_url or "") if app is not None else "?"


async def _one_shot(app: App, args: argparse.Namespace) -> int:
    try:
        return await ONE_SHOT[args.command](app, args)
    finally:
        await app.close()
