"""The chaos matrix, Cluster row: three masters with a replica each (started by the suite),
a producer and two workers on a queue of one master (``chaos.Chaos``), and one fault
each: that master SIGKILLed, a manual failover (``CLUSTER FAILOVER`` on its replica),
its slot migrated fast and slowly, CLIENT PAUSE on it, a network cut."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.crc import key_slot

from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.embedded_cluster import EmbeddedCluster
from aioqueue.store.routing import lines_for
from tests.faults.chaos import Chaos, role, slow
from tests.faults.test_cluster import migrate_slot, owner
from tests.faults.test_network_cut import BlackHoleProxy
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)
QUEUE = "chaos"


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3, replicas=1) as started:
        yield started


def queue_slot(prefix: str) -> int:
    return key_slot(QueueKeys.for_queue(prefix, QUEUE).base.encode())


def replica_of(cluster: EmbeddedCluster, master: EmbeddedServer) -> EmbeddedServer:
    return cluster.replicas[cluster.masters.index(master)]  # (one replica per master)


def command(port: int, *args: Any) -> Any:
    with SyncRedis(port=port) as client:
        return client.execute_command(*args)


@slow
async def test_a_manual_failover_loses_nothing(cluster: EmbeddedCluster, prefix: str) -> None:
    """``CLUSTER FAILOVER`` on the replica of the queue's master: the master stops its
    clients while the replica catches up, then answers MOVED; calls follow it."""
    master = owner(cluster, queue_slot(prefix))
    replica = replica_of(cluster, master)
    chaos = Chaos(cluster.url, prefix, queue=QUEUE, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        await manual_failover(replica)
        switched_at = time.monotonic()
        await chaos.confirmed_after(switched_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report(
        "cluster manual failover", fault_at, in_flight,
        f"replica promoted {switched_at - fault_at:.2f}s after CLUSTER FAILOVER",
    )  # fmt: skip
    chaos.check(in_flight)


async def manual_failover(replica: EmbeddedServer, tries: int = 3) -> None:
    """``CLUSTER FAILOVER`` on ``replica`` until it is the master: a manual failover that
    does not complete within Redis's own 5 s (a loaded machine) is abandoned by Redis,
    and an operator asks again."""
    for attempt in range(tries):
        await asyncio.to_thread(command, replica.port, "CLUSTER FAILOVER")
        try:
            await wait_until(lambda: _role_is(replica.port, "master"), timeout=10, interval=0.05)
        except AssertionError:
            if attempt + 1 == tries:
                raise
        else:
            return


async def _role_is(port: int, wanted: str) -> bool:
    return await asyncio.to_thread(role, port) == wanted


@pytest.mark.parametrize(
    "seconds", [pytest.param(0.0, id="fast", marks=slow), pytest.param(6.0, id="slow")]
)
async def test_a_slot_migration_loses_nothing_and_enqueues_wait_for_it(
    cluster: EmbeddedCluster, prefix: str, seconds: float
) -> None:
    """The queue's slot moves to another master while it is busy (MIGRATE in batches of 20
    keys, paced to last ``seconds``): enqueues wait for the move within their deadline
    (``enqueue_timeout``, set above the move's length), takes back off meanwhile."""
    slot = queue_slot(prefix)
    options = {"socket_timeout": 2.0, "enqueue_timeout": 40.0}
    chaos = Chaos(cluster.url, prefix, queue=QUEUE, options=options)
    try:
        await chaos.start()
        source = owner(cluster, slot)
        keys = await asyncio.to_thread(command, source.port, "CLUSTER COUNTKEYSINSLOT", slot)
        pause = seconds / max(1, int(keys) // 20)
        in_flight = await chaos.in_flight()
        lines = [lines_for(await app.internal_client()) for app in chaos.apps]
        fault_at = time.monotonic()
        target = await asyncio.to_thread(migrate_slot, cluster, slot, pause)
        moved_at = time.monotonic()
        await chaos.confirmed_after(moved_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    producer, *workers = (line.redirects for line in lines)
    chaos.report(
        f"cluster slot migration ({'slow' if seconds else 'fast'})", fault_at, in_flight,
        f"{keys} keys moved to :{target.port} in {moved_at - fault_at:.2f}s; redirections "
        f"followed: producer {dict(producer)}, workers {[dict(each) for each in workers]}",
    )  # fmt: skip
    chaos.check(in_flight)
    assert chaos.ledger.unconfirmed == 0  # every enqueue waited for the move


@slow
async def test_a_killed_master_loses_nothing(cluster: EmbeddedCluster, prefix: str) -> None:
    """The queue's master SIGKILLed: its replica is promoted after the node timeout (2 s);
    enqueues wait for it within ``enqueue_timeout``."""
    master = owner(cluster, queue_slot(prefix))
    replica = replica_of(cluster, master)
    chaos = Chaos(cluster.url, prefix, queue=QUEUE, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        master.kill()
        await wait_until(lambda: _role_is(replica.port, "master"), timeout=30, interval=0.05)
        promoted_at = time.monotonic()
        await chaos.confirmed_after(promoted_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report(
        "cluster master SIGKILL", fault_at, in_flight,
        f"replica promoted {promoted_at - fault_at:.2f}s after the kill",
    )  # fmt: skip
    chaos.check(in_flight)


PAUSE_MS = 3000


@slow
async def test_client_pause_on_a_master_loses_nothing(
    cluster: EmbeddedCluster, prefix: str
) -> None:
    """``CLIENT PAUSE 3000 WRITE`` on the queue's master (the cluster bus goes on: no
    failover): scripts wait, reads time out and go again."""
    master = owner(cluster, queue_slot(prefix))
    chaos = Chaos(cluster.url, prefix, queue=QUEUE, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        await asyncio.to_thread(command, master.port, "CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        await chaos.confirmed_after(fault_at + PAUSE_MS / 1000, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report(f"cluster CLIENT PAUSE {PAUSE_MS} ms", fault_at, in_flight)
    chaos.check(in_flight)


@pytest.fixture
async def proxied_cluster() -> AsyncIterator[tuple[EmbeddedCluster, list[BlackHoleProxy]]]:
    """A cluster whose nodes announce the ports of proxies in front of them: clients
    (and replicas) reach them through the proxies; the cluster bus is direct."""
    started = EmbeddedCluster(masters=3, replicas=1)
    proxies = [BlackHoleProxy(node.port) for node in started.nodes]
    for proxy in proxies:
        await proxy.start()
    started.announce({n.port: p.port for n, p in zip(started.nodes, proxies, strict=True)})
    await asyncio.to_thread(started.start)
    try:
        yield started, proxies
    finally:
        await asyncio.to_thread(started.stop)
        for proxy in proxies:
            await proxy.close()


@slow
async def test_a_network_cut_loses_nothing(
    proxied_cluster: tuple[EmbeddedCluster, list[BlackHoleProxy]], prefix: str
) -> None:
    """The application's connections to every node black-holed (not the replicas' nor
    the cluster bus: no failover): each call notices within its socket timeout and goes
    again on a new connection."""
    cluster, proxies = proxied_cluster
    chaos = Chaos(cluster.url, prefix, queue=QUEUE, options={"socket_timeout": 2.0})
    try:
        await chaos.start()
        in_flight = await chaos.in_flight()
        fault_at = time.monotonic()
        cut = sum(proxy.cut(only_marked=True) for proxy in proxies)
        await chaos.confirmed_after(fault_at, 300)
        await chaos.finish()
    finally:
        await chaos.close()
    chaos.report("cluster network cut", fault_at, in_flight, f"{cut} connections cut")
    chaos.check(in_flight)
