"""store/slots.py on a real local Redis Cluster: a queue's MULTI/EXEC goes on the node of
its slot (no thread per command, as redis-py's cluster transactions start), follows its
slot to another master, and waits out a migration."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.crc import key_slot

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.core.limits import QueueLimits
from aioqueue.ops.embedded_cluster import EmbeddedCluster
from aioqueue.store import stored_limits
from aioqueue.store.routing import lines_for
from tests.faults.test_cluster import migrate_slot, owner, queues_on_every_master
from tests.helpers import now, wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.real_redis("a Redis Cluster")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3) as started:
        yield started


@pytest.fixture
async def app(cluster: EmbeddedCluster) -> AsyncIterator[aioqueue.App]:
    application = aioqueue.App(redis_url=cluster.url, prefix=f"s{uuid.uuid4().hex[:10]}")
    try:
        yield application
    finally:
        await application.close()


async def fill(app: aioqueue.App, queue: str, jobs: int) -> None:
    @app.task(queue=queue, name=f"noop_{queue}")
    async def noop(n: int) -> None:
        return None

    await app.queue(queue).enqueue_many(noop.enqueue(n) for n in range(jobs))


async def test_counts_on_a_cluster_start_no_thread(
    app: aioqueue.App, cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = queues_on_every_master(cluster, app.settings.prefix)
    for jobs, name in enumerate(names, start=3):
        await fill(app, name, jobs)
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for jobs, name in enumerate(names, start=3):
        assert (await app.queue(name).counts()).ready == jobs
    await app.queue(names[0]).set_limits(concurrency=5)
    assert (await app.queue(names[0]).limits()).concurrency == 5
    assert started == []


async def test_a_queue_transaction_follows_its_slot_to_another_master(
    app: aioqueue.App, cluster: EmbeddedCluster
) -> None:
    name = queues_on_every_master(cluster, app.settings.prefix)[1]  # (its own slot here)
    await fill(app, name, 7)
    assert (await app.queue(name).counts()).ready == 7  # (its node's client made here)
    slot = key_slot(QueueKeys.for_queue(app.settings.prefix, name).base.encode())
    target = await asyncio.to_thread(migrate_slot, cluster, slot)
    redis = await app.internal_client()
    assert (await app.queue(name).counts()).ready == 7  # MOVED: the slot map read again
    keys = QueueKeys.for_queue(app.settings.prefix, name)
    await stored_limits.write(redis, keys, QueueLimits(concurrency=3))
    check: Any = SyncRedis(port=target.port)
    with check:
        assert check.hget(keys.limits, "c") == b"3"


async def test_counts_wait_out_a_migration(app: aioqueue.App, cluster: EmbeddedCluster) -> None:
    """While its slot is half moved, a queue's keys are on two nodes: no one snapshot
    exists, so its counts wait for the move to end (ASK followed by a pause), then read
    the new owner."""
    name = queues_on_every_master(cluster, app.settings.prefix)[2]  # (its own slot here)
    await fill(app, name, 4)
    slot = key_slot(QueueKeys.for_queue(app.settings.prefix, name).base.encode())
    source = owner(cluster, slot)
    target = cluster.masters[(cluster.masters.index(source) + 1) % len(cluster.masters)]
    src: Any = SyncRedis(port=source.port)
    dst: Any = SyncRedis(port=target.port)
    with src, dst:
        src_id, dst_id = src.execute_command("CLUSTER MYID"), dst.execute_command("CLUSTER MYID")
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        redirects = lines_for(await app.client()).redirects
        asked = redirects["AskError"]
        counting = asyncio.ensure_future(app.queue(name).counts())
        # (the counts read keys absent from the source: ASK)
        await wait_until(lambda: now(redirects["AskError"] > asked))
        assert not counting.done()
        keys = await asyncio.to_thread(src.execute_command, "CLUSTER GETKEYSINSLOT", slot, 100)
        await asyncio.to_thread(
            src.execute_command, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys
        )
        assert not counting.done()
        for master in cluster.masters:
            with SyncRedis(port=master.port) as client:
                client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    assert (await asyncio.wait_for(counting, 10)).ready == 4
