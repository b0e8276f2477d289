"""``python -m examples.fastapi_app``: the API and a worker on one machine, one command.

A convenience for trying the example: it uses AIOQUEUE_REDIS_URL, or starts a private
Redis server when none is set; runs ``aioqueue worker examples.fastapi_app.tasks:app`` as
a child process; and serves the API with uvicorn on http://127.0.0.1:8000 (``--port``)
until Ctrl-C or SIGTERM, then stops the worker gracefully. In production the two run as
separate services: see web.py and examples/deploy/.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys

import uvicorn

from aioqueue.ops.embedded import EmbeddedServer

from . import tasks

WORKER = [sys.executable, "-m", "aioqueue", "worker", "examples.fastapi_app.tasks:app"]
GRACE = 10.0  # the worker's --grace; we wait a little longer than that for it to exit


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM once (a second signal would skip the grace), wait, then SIGKILL."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=GRACE + 5)
    except subprocess.TimeoutExpired:
        worker.kill()  # its jobs come back to the queue when their lease expires
        worker.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.fastapi_app")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again: make that
    # a KeyboardInterrupt, as for Ctrl-C, so that the cleanup below runs either way.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.ExitStack() as stack:
        url = tasks.app.redis_url
        if url is None:
            server = stack.enter_context(EmbeddedServer())
            url = server.url
            tasks.app.set_redis_url(url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {url}")
        # A session of its own: a terminal's Ctrl-C reaches the whole foreground group,
        # and the worker must get exactly one signal, from stop_worker().
        worker = subprocess.Popen(
            [*WORKER, "--grace", str(GRACE)],
            env={**os.environ, "AIOQUEUE_REDIS_URL": url},
            start_new_session=True,
        )
        stack.callback(stop_worker, worker)
        print(f"worker pid {worker.pid}; API on http://127.0.0.1:{args.port}/docs", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            uvicorn.run("examples.fastapi_app.web:api", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
