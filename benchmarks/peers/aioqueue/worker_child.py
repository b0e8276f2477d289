"""One aioqueue worker process for the adapter: ``aioqueue worker bench_tasks:app`` behind a
start handshake.

    python worker_child.py --redis-url URL --queue NAME -c C [--burst] [--uvloop]

It imports everything, prints ``ready``, waits for a line on stdin, then runs aioqueue's
own CLI in this process (``aioqueue worker bench_tasks:app -q NAME -c C [--burst]
[--uvloop]``, every other option at its default). When the CLI returns (burst: the queue is
drained; else: SIGTERM) it prints one JSON line: the process's user+sys CPU seconds since
it started (``cpu_seconds``, what /proc/<pid>/stat says just before it exits) and since
``go`` (``run_cpu_seconds``), the commands it sent to Redis since ``go``, by name
(``sent``, counted as redis-py packs them), and its jobs' outcomes (``outcomes``:
``{"complete": N}``). The adapter times from spawning this process; ``ready`` tells it when
start-up ended.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from redis.asyncio.connection import AbstractConnection

if TYPE_CHECKING:
    from aioqueue import Worker


def count_client_commands() -> Counter[str]:
    """Count every command this process sends, by name (``client|setinfo`` style)."""
    sent: Counter[str] = Counter()
    pack = AbstractConnection.pack_command

    def counting_pack(self: AbstractConnection, *args: Any) -> list[bytes]:
        name = _text(args[0]).lower()
        if " " in name:  # redis-py sends some subcommands as one "CLIENT SETINFO" arg
            name = name.replace(" ", "|")
        elif name in {"client", "config", "script"} and len(args) > 1:
            name = f"{name}|{_text(args[1]).lower()}"
        sent[name] += 1
        return pack(self, *args)

    AbstractConnection.pack_command = counting_pack  # type: ignore[method-assign]
    return sent


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("-c", "--concurrency", type=int, required=True)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    os.environ["AIOQUEUE_BENCH_QUEUE"] = args.queue  # read by bench_tasks at import
    sent = count_client_commands()
    import bench_tasks  # imported now, so the CLI's import of it costs nothing

    from aioqueue.ops import cli

    workers: list[Worker] = []  # the one the CLI makes: its outcomes go in the report
    make_worker = bench_tasks.app.worker

    def worker(**options: Any) -> Worker:
        workers.append(make_worker(**options))
        return workers[-1]

    bench_tasks.app.worker = worker  # type: ignore[method-assign]

    print("ready", flush=True)
    if not sys.stdin.readline():  # the adapter went away
        return 1
    sent.clear()
    before = cpu_seconds()
    argv = ["--log-level", "warning", "worker", "bench_tasks:app", "--redis-url",
            args.redis_url, "-q", args.queue, "-c", str(args.concurrency)]  # fmt: skip
    argv += ["--burst"] if args.burst else []
    argv += ["--uvloop"] if args.uvloop else []
    code = cli.main(argv)
    after = cpu_seconds()
    outcomes: Counter[str] = Counter()
    for made in workers:
        outcomes.update(made.outcomes)
    report = {"code": code, "cpu_seconds": after, "run_cpu_seconds": after - before,
              "sent": sent, "outcomes": outcomes}  # fmt: skip
    print(json.dumps(report), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
