"""The chaos matrix, one-server row: a producer and two workers (``chaos.Chaos``) on a
server of the test's own, and one fault each: the server SIGKILLed and restarted (with
its append-only file, fsync always: a restart without persistence loses everything by
design), CLIENT PAUSE, a network cut (connections black-holed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from aioqueue.ops.embedded import EmbeddedServer
from tests.faults.chaos import Chaos, slow
from tests.faults.test_network_cut import BlackHoleProxy

pytestmark = pytest.mark.timeout(180)
OUTAGE = 1.0  # seconds the killed server stays down
PAUSE_MS = 3000  # CLIENT PAUSE's length: longer than the clients' socket timeout (2 s)
OPTIONS = {"socket_timeout": 2.0}


@pytest.fixture
async def persistent() -> AsyncIterator[EmbeddedServer]:
    server = EmbeddedServer(appendonly=True)
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@slow
async def test_a_killed_and_restarted_server_loses_nothing(
    persistent: EmbeddedServer, prefix: str
) -> None:
    chaos = Chaos(persistent.url, prefix, options=OPTIONS)
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        await asyncio.to_thread(persistent.kill)
        await asyncio.sleep(OUTAGE)  # the outage itself
        await asyncio.to_thread(persistent.start)
        back_at = time.monotonic()
        await chaos.confirmed_after(back_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report(
        "one server SIGKILL + restart (AOF)", fault_at, in_flight,
        f"down {back_at - fault_at:.2f}s, enqueues confirmed again "
        f"{chaos.ledger.first_after(back_at):.2f}s after the restart",
    )  # fmt: skip
    chaos.check(in_flight)


async def test_client_pause_loses_nothing(persistent: EmbeddedServer, prefix: str) -> None:
    """``CLIENT PAUSE 3000 WRITE``: every script waits (past the clients' socket timeout,
    so reads time out and calls go again, which the scripts make safe)."""
    chaos = Chaos(persistent.url, prefix, options=OPTIONS)
    admin = Redis.from_url(persistent.url)
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        await admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")  # type: ignore[no-untyped-call]
        await chaos.confirmed_after(fault_at + PAUSE_MS / 1000, 300)
        await chaos.finish()
    finally:
        await chaos.close()
        await admin.aclose()
    chaos.report(f"one server CLIENT PAUSE {PAUSE_MS} ms", fault_at, in_flight)
    chaos.check(in_flight)


@slow
async def test_a_network_cut_loses_nothing(persistent: EmbeddedServer, prefix: str) -> None:
    """Every connection black-holed at once (no FIN, no RST): each call notices within
    its socket timeout and goes again on a new connection."""
    proxy = BlackHoleProxy(persistent.port)
    url = await proxy.start()
    chaos = Chaos(url, prefix, options=OPTIONS)
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        cut = proxy.cut()
        await chaos.confirmed_after(fault_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
        await proxy.close()
    chaos.report("one server network cut", fault_at, in_flight, f"{cut} connections cut")
    chaos.check(in_flight)
