"""A running worker told to stop while Redis does not answer: the server SIGSTOPped
(connections stay open, nothing is answered) or killed.

Each of the worker's loops waited in a call to the server, and each step of its stop
retried against it (wake-up tokens, the last acks for 30 s, the heartbeat, hand-offs): a
worker running three jobs exited 108.6 s after SIGINT with the server stalled (``--grace
3``), 34.7 s with it killed, logging "... subscribing again" after "stopping". Now each
stop step that touches Redis has a bound (the last acks: ``call_timeout``), a loop still
in a call then is left behind, never cancelled, and nothing is lost: what the worker
could not ack stays leased in Redis and comes back when its lease expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from tests.helpers import now, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)

# How long the tests give a stop: a bound, not a speed. Before, the stops below took
# 35-110 s; now grace (1 s) + call_timeout (1 s) + a second per phase, and the exit.
STOPPED_WITHIN = 20.0


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    """A server of this test's own, to be paused or killed (its data survives a restart)."""
    started = EmbeddedServer(appendonly=True)
    await asyncio.to_thread(started.start)
    try:
        yield started
    finally:
        started.resume()
        await asyncio.to_thread(started.stop)


def _app(server: EmbeddedServer, prefix: str) -> tuple[aioqueue.App, asyncio.Event]:
    """An app whose ``hold`` jobs run until the event is set (``call_timeout=1``: how long
    a stopping worker tries to land its last acks)."""
    app = aioqueue.App(redis_url=server.url, prefix=prefix, call_timeout=1)
    release = asyncio.Event()

    @app.task(name="hold", timeout=None)
    async def hold(n: int) -> int:
        await release.wait()
        return n

    return app, release


async def _others_done() -> bool:
    """Whether every task but this test's has ended (what a stop left behind included)."""
    current = asyncio.current_task()
    return all(task.done() for task in asyncio.all_tasks() if task is not current)


@pytest.mark.parametrize("fault", ["stalled", "killed"])
async def test_a_worker_whose_acks_cannot_land_stops_within_its_bound(
    server: EmbeddedServer, prefix: str, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Three jobs finish while Redis does not answer, and the worker is told to stop: the
    last acks are tried for ``call_timeout``, then given up, naming the jobs; the worker
    returns, and the jobs, still leased in Redis, run again elsewhere once their leases
    expire (or, the server resumed, the late acks land): none is lost."""
    app, release = _app(server, prefix)
    queue = app.queue()
    jobs = [await queue.enqueue("hold", n) for n in range(3)]
    worker = app.worker(lease=2, grace=1)
    running = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: now(worker.running == 3), timeout=10)
        if fault == "stalled":
            server.pause()
        else:
            await asyncio.to_thread(server.kill)
        release.set()  # they finish: their acks cannot land
        with caplog.at_level(logging.DEBUG, logger="aioqueue"):
            worker.request_stop()
            await wait_until(lambda: now(running.done()), timeout=STOPPED_WITHIN)
        running.result()
        gave_up = [r.getMessage() for r in caplog.records if "giving up acking" in r.message]
        assert len(gave_up) == 1, caplog.text
        assert "giving up acking 3 job(s)" in gave_up[0]
        assert all(job.id in gave_up[0] for job in jobs)

        if fault == "stalled":
            server.resume()
        else:
            await asyncio.to_thread(server.start)
        await wait_until(_others_done, timeout=30)  # what was left behind ends by itself
        assert {await job.status() for job in jobs} <= {
            aioqueue.JobStatus.ACTIVE,  # leased until their leases expire
            aioqueue.JobStatus.COMPLETE,  # (or a late ack landed when the server resumed)
        }
        async with app.worker(lease=2, reclaim_interval=0.2):
            assert [await job.result(timeout=30) for job in jobs] == [0, 1, 2]
    finally:
        release.set()
        worker.request_stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, 30)
        server.resume()
        await app.close()


@pytest.mark.parametrize("fault", ["stalled", "killed"])
async def test_the_worker_command_stops_within_its_bound_and_says_nothing_more(
    server: EmbeddedServer, prefix: str, fault: str
) -> None:
    """``aioqueue worker`` with three jobs running, Redis stalled or killed, then SIGTERM:
    it exits with the jobs put back or leased (none lost), and nothing it logs after
    "stopping" says it goes on ("trying again", "subscribing again")."""
    env = {**os.environ, "AIOQUEUE_REDIS_URL": server.url, "TEST_PREFIX": prefix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.cli_app:app",
        "--grace", "1", "--lease", "2", cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    app = aioqueue.App(redis_url=server.url, prefix=prefix, call_timeout=1)

    @app.task(name="nap")  # (here a nap is short: the jobs run again, at once)
    async def nap(seconds: float) -> str:
        return "rested"

    queue = app.queue()
    try:
        jobs = [await queue.enqueue("nap", 60) for _ in range(3)]
        await wait_until(lambda: _active(queue, 3), timeout=20, interval=0.05)
        if fault == "stalled":
            server.pause()
        else:
            await asyncio.to_thread(server.kill)
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), STOPPED_WITHIN)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        server.resume()
    try:
        assert process.returncode == 0, err
        log = err.decode()
        after = log[log.index("stopping") :]
        assert "trying again" not in after, log
        assert "subscribing again" not in after, log
        assert "cannot reach Redis" not in after, log  # ("... go on when it answers")
        assert "looking at the server failed" not in after, log  # (the heartbeat stops last)
        assert "heartbeat failed" not in after, log
        assert "stopped" in after, log

        if fault == "killed":
            await asyncio.to_thread(server.start)
        assert {await job.status() for job in jobs} <= {
            aioqueue.JobStatus.ACTIVE,  # leased until their leases expire
            aioqueue.JobStatus.QUEUED,  # (or a late release landed when the server resumed)
        }
        async with app.worker(lease=2, reclaim_interval=0.2):
            assert [await job.result(timeout=30) for job in jobs] == ["rested"] * 3
    finally:
        await app.close()


async def _active(queue: aioqueue.Queue, count: int) -> bool:
    return (await queue.counts()).active == count


async def test_closing_an_app_whose_result_listener_waits_on_a_stalled_server(
    server: EmbeddedServer, prefix: str
) -> None:
    """The App's listener for finished jobs (``Job.result``) is woken at close by a
    message on its own channel: with the server stalled, that message was retried (four
    socket timeouts) and then waited for. Now it is not waited for (the listener looks at
    least every second by itself), and the close returns."""
    app, _ = _app(server, prefix)
    plain = Redis.from_url(server.url)
    job = await app.queue().enqueue("hold", 0)  # (no worker: it stays queued)
    waiter = asyncio.create_task(job.result(timeout=60))
    try:
        await wait_until(lambda: _subscribed(plain), timeout=10)
        waiter.cancel()
        server.pause()
        closing = asyncio.create_task(app.close())
        await wait_until(lambda: now(closing.done()), timeout=10)  # (before: 25 s)
        closing.result()
    finally:
        waiter.cancel()
        server.resume()
        await app.close()
        await plain.aclose()


async def _subscribed(plain: Redis) -> bool:
    return bool(await plain.pubsub_channels())
