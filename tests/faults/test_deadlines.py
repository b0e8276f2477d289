"""A stalled Redis (SIGSTOP: connections stay open, nothing is answered) against one total
deadline per call. Each call used to wait ~4x its socket timeout (the retries each waited
it in full): an enqueue 20.5 s, ``aioqueue check`` 20.8 s (past a probe's 10 s), and a
worker told to stop while reaching Redis finished its attempt first (12.9 s), then said
it would try again. Now an enqueue ends at ``enqueue_timeout``, a read at
``call_timeout`` (each error names its setting), and a stop ends the attempt at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store import deadline
from tests.helpers import now, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stalled() -> AsyncIterator[EmbeddedServer]:
    """A server of this test's own, to be paused (and resumed before it stops)."""
    server = EmbeddedServer()
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        server.resume()
        await asyncio.to_thread(server.stop)


async def test_an_enqueue_to_a_stalled_server_ends_at_enqueue_timeout(
    stalled: EmbeddedServer, prefix: str
) -> None:
    app = aioqueue.App(redis_url=stalled.url, prefix=prefix, enqueue_timeout=1, socket_timeout=5)

    @app.task
    async def work(n: int) -> int:
        return n

    try:
        await work.enqueue(0)  # connected, the batcher's connection kept
        stalled.pause()
        with pytest.raises(aioqueue.EnqueueUnconfirmed, match=r"within 1s \(enqueue_timeout\)"):
            await work.enqueue(1).options(id="stalled")
        calls = [work.enqueue(n) for n in range(5)]  # batched behind one another
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(each, aioqueue.EnqueueUnconfirmed) for each in results), results
    finally:
        stalled.resume()
        await app.close()


async def test_a_read_from_a_stalled_server_ends_at_call_timeout(
    stalled: EmbeddedServer, prefix: str
) -> None:
    app = aioqueue.App(redis_url=stalled.url, prefix=prefix, call_timeout=1, socket_timeout=5)
    try:
        await app.queue().counts()
        stalled.pause()
        with pytest.raises(aioqueue.ServerUnavailable, match=r"within 1s \(call_timeout\)"):
            await app.queue().counts()
    finally:
        stalled.resume()
        await app.close()


async def test_connecting_to_a_stalled_server_ends_at_call_timeout(
    stalled: EmbeddedServer, prefix: str
) -> None:
    app = aioqueue.App(redis_url=stalled.url, prefix=prefix, call_timeout=1, socket_timeout=5)
    stalled.pause()
    try:
        with pytest.raises(aioqueue.ServerUnavailable, match=r"within 1s \(call_timeout\)"):
            await app.client()  # (its first use: the scripts are loaded then)
    finally:
        stalled.resume()
        await app.close()


async def test_check_on_a_stalled_server_exits_2_within_call_timeout(
    stalled: EmbeddedServer, prefix: str
) -> None:
    """A probe (``timeoutSeconds: 10`` in examples/deploy/k8s.yaml) sees exit code 2."""
    env = {**os.environ, "AIOQUEUE_REDIS_URL": stalled.url, "TEST_PREFIX": prefix}
    stalled.pause()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "check", "tests.apps.cli_app:app",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2, err
    assert b"call_timeout" in err  # the default, 5 s, well inside the probe's 10 s


async def test_a_worker_stopped_while_reaching_a_stalled_server_stops_at_once(
    stalled: EmbeddedServer, prefix: str
) -> None:
    env = {**os.environ, "AIOQUEUE_REDIS_URL": stalled.url, "TEST_PREFIX": prefix}
    stalled.pause()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.cli_app:app",
        cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        # Its first contact is under way once it holds a connection to the server.
        await wait_until(lambda: now(_connected_to(stalled.port)), timeout=20, interval=0.05)
        process.send_signal(signal.SIGTERM)
        # (a bound, not a speed: the attempt alone would last 4 x socket_timeout = 20 s)
        _, err = await asyncio.wait_for(process.communicate(), 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    assert process.returncode == 0, err
    log = err.decode()
    assert "stopping" in log
    assert "trying again" not in log  # nothing after "stopping" says otherwise


def _connected_to(port: int) -> bool:
    """Whether a TCP connection to loopback ``port`` is established (Linux /proc)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    return True
    return False


async def test_a_pool_connection_reconnects_after_a_deadline_cut_its_read(
    stalled: EmbeddedServer,
) -> None:
    """A read cut at the deadline drops its connection: nothing half-read is reused."""
    pool = ConnectionPool.from_url(stalled.url, retry=deadline.DeadlineRetry(NoBackoff(), 1))
    redis = Redis.from_pool(pool)
    try:
        await redis.set("k", "v")
        stalled.pause()
        with pytest.raises(RedisTimeoutError):
            async with deadline.within(0.3):
                await redis.get("k")
        stalled.resume()
        assert await redis.get("k") == b"v"  # a fresh connection, in step
    finally:
        stalled.resume()
        await redis.aclose()
