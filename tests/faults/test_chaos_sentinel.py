"""The chaos matrix, Sentinel row: a master, two replicas and three Sentinels (started by
the suite), a producer and two workers (``chaos.Chaos``), and one fault each: the master
SIGKILLed, a planned failover (``SENTINEL FAILOVER``, with and without ``replicas=``),
CLIENT PAUSE on the master, a network cut."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.exceptions import ResponseError

from aioqueue.ops.embedded_sentinel import EmbeddedSentinel
from tests.faults.chaos import Chaos, SentinelEvents, slow, writes
from tests.faults.test_network_cut import BlackHoleProxy

pytestmark = pytest.mark.timeout(180)


# After a failover, the other replica resyncs in full from the new master (it had
# replicated the old master's last pings, which the promoted one had not); Redis delays a
# diskless full sync by repl-diskless-sync-delay (5 s by default) to wait for more
# replicas, and an enqueue with replicas= waits for that one. The launcher sets it to 0
# ("Running at scale" says to).


@pytest.fixture
def sentinel_set() -> Iterator[EmbeddedSentinel]:
    # Two replicas: after a failover, the new master still has one to WAIT for.
    with EmbeddedSentinel(replicas=2, sentinels=3) as started:
        yield started


def sentinel_command(sentinel_set: EmbeddedSentinel, *args: Any) -> Any:
    return _command(sentinel_set.sentinels[0].port, *args)


def one_sentinel_url(sentinel_set: EmbeddedSentinel) -> str:
    """A URL naming only the last Sentinel (not the one asked to fail over)."""
    return f"redis+sentinel://127.0.0.1:{sentinel_set.sentinels[-1].port}/{sentinel_set.service}"


@pytest.mark.parametrize(
    ("replicas", "listed"),
    [
        pytest.param(0, "all", id="no-wait"),
        pytest.param(1, "all", id="replicas=1", marks=slow),
        pytest.param(0, "one", id="one-sentinel-in-the-url", marks=slow),
    ],
)
async def test_a_planned_failover_loses_nothing_and_writes_nothing_to_the_old_master(
    sentinel_set: EmbeddedSentinel,
    prefix: str,
    replicas: int,
    listed: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``SENTINEL FAILOVER`` while two workers drain and a producer enqueues. The old
    master stays up and writable ~10 s after a replica was promoted: writes wait from the
    failover's first step to the switch, then everything moves to the new master, so the
    old master runs no write from the promotion on, and nothing confirmed is lost. The
    failover's first step is announced by its leader only: with one other Sentinel in
    the URL, aioqueue hears it from the leader it found by asking that one. Each worker
    whose calls the failover cut short says so once, at INFO (each of its loops logged a
    warning per break, then an INFO line each: a burst at every failover)."""
    caplog.set_level(logging.INFO, logger="aioqueue.worker")
    old = sentinel_set.master_port()
    events = await SentinelEvents([s.port for s in sentinel_set.sentinels]).start()
    options = {"replicas": replicas, "socket_timeout": 2.0}
    url = sentinel_set.url if listed == "all" else one_sentinel_url(sentinel_set)
    chaos = Chaos(url, prefix, options=options)
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        await asyncio.to_thread(sentinel_command, sentinel_set, "SENTINEL FAILOVER", "aioqueue")
        await events.wait("+failover-state-send-slaveof-noone")  # the promotion is next
        before = await asyncio.to_thread(writes, old)
        switched_at = await events.wait("+switch-master")
        await chaos.confirmed_after(switched_at, 300)
        after = await asyncio.to_thread(writes, old)  # (still a master: demoted ~10 s later)
        await chaos.finish()  # (a job written only to the old master is not on the new one)
    finally:
        await chaos.close()
        await events.close()
    chaos.report(
        f"sentinel planned failover ({'replicas=1' if replicas else 'no WAIT'}, "
        f"{listed} Sentinel(s) in the URL)",
        fault_at, in_flight,
        f"switch {switched_at - fault_at:.2f}s after SENTINEL FAILOVER, enqueues confirmed "
        f"again {chaos.ledger.first_after(switched_at):.2f}s after it; writes to the old "
        f"master after the promotion: {after - before}",
    )  # fmt: skip
    chaos.check(in_flight)
    assert after == before
    worker_lines = [r for r in caplog.records if r.name.startswith("aioqueue.worker.")]
    assert not [r.getMessage() for r in worker_lines if r.levelno >= logging.WARNING]
    told = Counter(r.getMessage() for r in worker_lines if "failover" in r.getMessage())
    assert told, "the workers say what cut their calls short"
    # once per worker (two), twice at most if a call it cut short ended after others went on
    assert sum(told.values()) <= 4, told


@slow
async def test_a_killed_master_loses_nothing(sentinel_set: EmbeddedSentinel, prefix: str) -> None:
    """The master SIGKILLed: the Sentinels promote a replica (down-after 1 s); enqueues
    wait through it (within ``enqueue_timeout``) and go on at the new master."""
    events = await SentinelEvents([s.port for s in sentinel_set.sentinels]).start()
    chaos = Chaos(sentinel_set.url, prefix, options={"replicas": 1, "socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        sentinel_set.master.kill()
        switched_at = await events.wait("+switch-master")
        await chaos.confirmed_after(switched_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
        await events.close()
    chaos.report(
        "sentinel master SIGKILL", fault_at, in_flight,
        f"switch {switched_at - fault_at:.2f}s after the kill, enqueues confirmed again "
        f"{chaos.ledger.first_after(switched_at):.2f}s after it",
    )  # fmt: skip
    chaos.check(in_flight)


@pytest.fixture
def patient_set() -> Iterator[EmbeddedSentinel]:
    """A set whose Sentinels call a master down after 5 s of silence (not 1 s)."""
    with EmbeddedSentinel(replicas=2, sentinels=3, down_after_ms=5000) as started:
        yield started


@slow
async def test_client_pause_on_the_master_loses_nothing(
    patient_set: EmbeddedSentinel, prefix: str
) -> None:
    """``CLIENT PAUSE 3000 WRITE`` on the master: scripts wait, reads time out and go
    again. (The Sentinels' PINGs wait too, behind their postponed hello PUBLISH: a pause
    longer than down-after-milliseconds starts a failover, which loses nothing either:
    a reply that comes back across a failover's start counts as unconfirmed.)"""
    sentinel_set = patient_set
    chaos = Chaos(sentinel_set.url, prefix, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        port = sentinel_set.master_port()
        await asyncio.to_thread(_command, port, "CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        await chaos.confirmed_after(fault_at + PAUSE_MS / 1000, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report(f"sentinel CLIENT PAUSE {PAUSE_MS} ms", fault_at, in_flight)
    chaos.check(in_flight)


PAUSE_MS = 3000


async def test_a_pause_that_starts_a_failover_loses_nothing(
    sentinel_set: EmbeddedSentinel, prefix: str
) -> None:
    """``CLIENT PAUSE 3000 WRITE`` on a master whose Sentinels call it down after 1 s (or
    are asked to fail over): they fail over while the enqueues sent before it wait inside
    the paused master,
    which runs them when the pause ends, after the promotion: written there only, they
    were lost (one confirmed job in each run). A reply that comes back across a
    failover's start is unconfirmed now: the enqueue goes again, to the new master."""
    events = await SentinelEvents([s.port for s in sentinel_set.sentinels]).start()
    chaos = Chaos(sentinel_set.url, prefix, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        port = sentinel_set.master_port()
        await asyncio.to_thread(_command, port, "CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        # The Sentinels call the paused master down by themselves (it answers PING, but
        # not their hello PUBLISHes), or not, as load decides: an operator's failover
        # within the pause makes the case the same every run.
        await asyncio.to_thread(_fail_over_unless_under_way, sentinel_set)
        switched_at = await events.wait("+switch-master")
        await chaos.confirmed_after(max(switched_at, fault_at + PAUSE_MS / 1000), 300)
        await chaos.finish()
    finally:
        await chaos.close()
        await events.close()
    chaos.report(
        f"sentinel CLIENT PAUSE {PAUSE_MS} ms, failed over", fault_at, in_flight,
        f"switch {switched_at - fault_at:.2f}s after the pause began",
    )  # fmt: skip
    chaos.check(in_flight)


def _fail_over_unless_under_way(sentinel_set: EmbeddedSentinel) -> None:
    try:
        sentinel_command(sentinel_set, "SENTINEL", "FAILOVER", sentinel_set.service)
    except ResponseError as exc:  # INPROG: the Sentinels started one themselves
        if "INPROG" not in str(exc):
            raise


def _command(port: int, *args: Any) -> Any:
    with SyncRedis(port=port) as client:
        return client.execute_command(*args)


@pytest.fixture
async def proxied_set() -> AsyncIterator[tuple[EmbeddedSentinel, list[BlackHoleProxy]]]:
    """A Sentinel set whose servers are known by the ports of proxies in front of them:
    the application reaches them through the proxies (as the Sentinels do)."""
    started = EmbeddedSentinel(replicas=2, sentinels=3)
    proxies = [BlackHoleProxy(server.port) for server in started.servers]
    for proxy in proxies:
        await proxy.start()
    started.announce({s.port: p.port for s, p in zip(started.servers, proxies, strict=True)})
    await asyncio.to_thread(started.start)
    try:
        yield started, proxies
    finally:
        await asyncio.to_thread(started.stop)
        for proxy in proxies:
            await proxy.close()


@slow
async def test_a_network_cut_loses_nothing(
    proxied_set: tuple[EmbeddedSentinel, list[BlackHoleProxy]], prefix: str
) -> None:
    """The application's connections to the servers black-holed (the Sentinels' are not:
    no failover): each call notices within its socket timeout, and its new connection,
    resolved through the Sentinels, reaches the same master."""
    sentinel_set, proxies = proxied_set
    chaos = Chaos(sentinel_set.url, prefix, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        cut = sum(proxy.cut(only_marked=True) for proxy in proxies)
        await chaos.confirmed_after(fault_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report("sentinel network cut", fault_at, in_flight, f"{cut} connections cut")
    chaos.check(in_flight)
