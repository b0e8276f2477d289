"""aioqueue on a real local Redis Cluster (three masters, started by the suite): queues on
every master, results, delayed jobs, cancellation, messaging, and a slot resharded to
another master in the middle of a drain (0 lost, 0 run twice)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.crc import key_slot

import aioqueue
from aioqueue import chord
from aioqueue.core.keys import QueueKeys
from aioqueue.core.settings import check_redis_url, cluster_nodes, mask_url
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.embedded_cluster import EmbeddedCluster
from aioqueue.store import pubsub
from aioqueue.store.routing import lines_for
from tests.helpers import collect_leaked_sockets, leaks_outside, now, produce_confirmed, wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.real_redis("a Redis Cluster")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3) as started:
        yield started


@pytest.fixture
def prefix() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def app(cluster: EmbeddedCluster, prefix: str) -> AsyncIterator[aioqueue.App]:
    application = aioqueue.App(redis_url=cluster.url, prefix=prefix)
    try:
        yield application
    finally:
        await application.close()


def owner(cluster: EmbeddedCluster, slot: int) -> EmbeddedServer:
    """The master serving ``slot`` (the slots are split evenly, in the masters' order)."""
    share = 16384 // len(cluster.masters)
    return cluster.masters[min(slot // share, len(cluster.masters) - 1)]


def queues_on_every_master(cluster: EmbeddedCluster, prefix: str) -> list[str]:
    """One queue name per master, each hashing to a slot that master serves."""
    found: dict[int, str] = {}
    for n in range(1000):
        name = f"q{n}"
        slot = key_slot(QueueKeys.for_queue(prefix, name).base.encode())
        found.setdefault(owner(cluster, slot).port, name)
        if len(found) == len(cluster.masters):
            return list(found.values())
    raise AssertionError("no queue name for some master")


async def test_a_drain_across_queues_on_every_master(
    app: aioqueue.App, cluster: EmbeddedCluster, prefix: str
) -> None:
    names = queues_on_every_master(cluster, prefix)
    runs: Counter[str] = Counter()
    tasks = {}
    for name in names:

        @app.task(queue=name, name=f"work_{name}")
        async def work(key: str) -> str:
            runs[key] += 1
            return key

        tasks[name] = work
    jobs = []
    for name in names:
        jobs += await app.queue(name).enqueue_many(
            tasks[name].enqueue(f"{name}-{n}") for n in range(300)
        )
        jobs += await asyncio.gather(*(tasks[name].enqueue(f"{name}-s{n}") for n in range(50)))
    worker = app.worker(burst=True, concurrency=50)
    await asyncio.wait_for(worker.run_until_idle(), 60)
    expected = {f"{name}-{n}" for name in names for n in range(300)}
    expected |= {f"{name}-s{n}" for name in names for n in range(50)}
    print(  # noqa: T201 - the scenario's numbers, for the report (pytest -s)
        f"\n[cluster drain] {len(expected)} jobs over {len(names)} masters: "
        f"lost {len(expected - set(runs))}, ran twice {sum(1 for c in runs.values() if c > 1)}"
    )
    assert set(runs) == expected and set(runs.values()) == {1}
    assert worker.outcomes["complete"] == len(expected)
    assert await jobs[0].result(timeout=5) == f"{names[0]}-0"
    for name in names:
        assert (await app.queue(name).counts()).ready == 0


async def test_results_delays_and_cancellation_on_a_cluster(app: aioqueue.App) -> None:
    release = asyncio.Event()

    @app.task(queue="a")
    async def echo(value: int) -> int:
        return value

    @app.task(queue="b")
    async def gated() -> None:
        await release.wait()

    async with app.worker(concurrency=5):
        assert await (await echo.enqueue(7)).result(timeout=5) == 7  # woken by pub/sub
        started = time.monotonic()
        delayed = await echo.enqueue(8).options(delay=0.3)
        assert await delayed.result(timeout=5) == 8
        assert time.monotonic() - started >= 0.3
        running = await gated.enqueue()

        async def is_running() -> bool:
            info = await running.info()
            return info is not None and info.status is aioqueue.JobStatus.ACTIVE

        await wait_until(is_running)
        await app.queue("b").cancel(running.id)
        with pytest.raises(aioqueue.JobCancelled):
            await running.result(timeout=5)


async def test_workflows_groups_and_batches_across_masters(
    app: aioqueue.App, cluster: EmbeddedCluster, prefix: str
) -> None:
    """A chain whose chord runs on one master and whose last step on another: each
    outcome crosses slots by hand-off, never in a script. Groups and a batch as well."""
    leaves_queue, merge_queue, report_queue = queues_on_every_master(cluster, prefix)
    order: list[int] = []

    @app.task(queue=leaves_queue)
    async def leaf(x: int) -> int:
        return x

    @app.task(queue=merge_queue)
    async def merge(results: list[int]) -> int:
        return sum(results)

    @app.task(queue=report_queue)
    async def report(total: int, label: str) -> str:
        return f"{label}={total}"

    @app.task(queue=leaves_queue)
    async def step(n: int) -> None:
        order.append(n)

    header = [leaf.enqueue(x) for x in range(30)]
    workflow = await aioqueue.chain(chord(header, merge.callback()), report.callback("sum"))
    grouped = [await step.enqueue(n).options(group="customer-1") for n in range(10)]
    async with app.batch(queue=leaves_queue) as batch:
        for x in range(10):
            batch.add(leaf.enqueue(x))
    async with app.worker(concurrency=10, queues=[leaves_queue, merge_queue, report_queue]):
        assert await workflow.result(timeout=30) == f"sum={sum(range(30))}"
        assert await batch.wait(timeout=30) == aioqueue.BatchSummary(10, 10, 0)
        await grouped[-1].result(timeout=30)
    assert order == list(range(10))


async def test_tenants_on_every_master(
    app: aioqueue.App, cluster: EmbeddedCluster, prefix: str
) -> None:
    """A queue's tenants live in its slot: turns, weights, a cap, a delayed tenant job, a
    cancel and the views, on queues served by every master."""
    names = queues_on_every_master(cluster, prefix)
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    tasks = {}
    for name in names:

        @app.task(queue=name, name=f"tenant_work_{name}")
        async def work(tenant: str) -> str:
            running[tenant] += 1
            peak[tenant] = max(peak[tenant], running[tenant])
            await asyncio.sleep(0.002)
            running[tenant] -= 1
            return tenant

        tasks[name] = work
    jobs = []
    for name in names:
        queue = app.queue(name)
        await queue.set_tenant_limits(max_running=2)
        await queue.set_weights({f"{name}-big": 3})
        for tenant in (f"{name}-big", f"{name}-small"):
            jobs += await queue.enqueue_many(
                tasks[name].enqueue(tenant).options(tenant=tenant) for _ in range(30)
            )
        jobs.append(
            await tasks[name].enqueue(f"{name}-small").options(tenant=f"{name}-small", delay=0.2)
        )
        cancelled = await tasks[name].enqueue("gone").options(tenant="gone")
        assert await queue.cancel(cancelled.id)
        counts = await queue.counts()
        assert (counts.ready, counts.tenants) == (60, 2)
        assert [job.tenant for job in await queue.jobs("ready", limit=5)] == [
            *[f"{name}-big"] * 3,
            f"{name}-small",
            f"{name}-big",
        ]  # its turns: three jobs, then one
    async with app.worker(concurrency=20, queues=names):
        results = [await job.result(timeout=30) for job in jobs]
    assert len(results) == 3 * 61
    assert max(peak.values()) == 2
    for name in names:
        assert (await app.queue(name).counts()).tenants == 0


async def test_aborts_and_results_travel_by_sharded_pub_sub(
    app: aioqueue.App, cluster: EmbeddedCluster, prefix: str
) -> None:
    """One queue on each master: each result and each abort is heard on the node of its
    queue (SSUBSCRIBE there, SPUBLISH by the scripts); no message crosses the cluster bus
    by a plain PUBLISH. The safety nets are out of reach: results would be looked at
    again after 60 s, aborts found at a lease renewal after 20 s."""
    names = queues_on_every_master(cluster, prefix)
    release = asyncio.Event()
    gated, echoes = {}, {}
    for name in names:

        @app.task(queue=name, name=f"gated_{name}")
        async def gated_task() -> None:
            await release.wait()

        @app.task(queue=name, name=f"echo_{name}")
        async def echo(value: str) -> str:
            return value

        gated[name], echoes[name] = gated_task, echo
    for node in cluster.masters:
        await asyncio.to_thread(_reset_stats, node.port)
    async with app.worker(concurrency=10, lease=60):
        for name in names:
            assert await (await echoes[name].enqueue(name)).result(5, poll_interval=60) == name
        running = {name: await gated[name].enqueue() for name in names}

        async def all_running() -> bool:
            infos = [await job.info() for job in running.values()]
            return all(i is not None and i.status is aioqueue.JobStatus.ACTIVE for i in infos)

        await wait_until(all_running)
        for name, job in running.items():
            await app.queue(name).cancel(job.id)
        for job in running.values():
            with pytest.raises(aioqueue.JobCancelled):
                await job.result(timeout=10, poll_interval=60)
    stats = [await asyncio.to_thread(_command_calls, node.port) for node in cluster.masters]
    assert all(calls.get("spublish", 0) >= 2 for calls in stats)  # a result and an abort
    assert sum(calls.get("publish", 0) for calls in stats) == 0


async def test_a_stopping_worker_wakes_its_abort_listener_on_every_master(
    app: aioqueue.App,
    cluster: EmbeddedCluster,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its sharded listening has a connection per master: the stop sends a token to each
    (on a wake channel of a queue there), rather than leave the listener to its poll
    (made seconds here: the stop would leave it behind, with a warning)."""
    monkeypatch.setattr(pubsub, "PING_AFTER", 60.0)
    monkeypatch.setattr(pubsub, "SHARDED_POLL", 60.0)
    names = queues_on_every_master(cluster, prefix)
    for name in names:

        @app.task(queue=name, name=f"echo_{name}")
        async def echo(value: int) -> int:
            return value

    async with app.worker(queues=names, idle_wait=4) as worker:
        assert await (await echo.enqueue(1)).result(timeout=5) == 1
    assert worker.outcomes["complete"] == 1
    assert "stopping without waiting" not in caplog.text


def _reset_stats(port: int) -> None:
    with SyncRedis(port=port) as client:
        client.config_resetstat()


def _command_calls(port: int) -> dict[str, int]:
    with SyncRedis(port=port) as client:
        info = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in info.items()}


async def test_messaging_on_a_cluster(app: aioqueue.App) -> None:
    room = app.group("room")
    await room.join("alice")
    await room.join("bob")
    await room.send("alice", {"text": "hi"})
    assert [m.body for m in await room.fetch("bob")] == [{"text": "hi"}]
    assert await app.unread("bob") == {"room": 1}  # the member's groups: another slot
    got: list[int] = []

    @app.subscriber("logs", group="g", batch=10)
    async def take(bodies: list[int]) -> None:
        got.extend(bodies)

    await app.topic("logs").publish_many(range(100))
    worker = app.worker(burst=True, queues=["idle"])
    await asyncio.wait_for(worker.run_until_idle(), 30)
    assert sorted(got) == list(range(100))


def migrate_slot(cluster: EmbeddedCluster, slot: int, pause: float = 0.02) -> EmbeddedServer:
    """Move ``slot`` to the next master as ``redis-cli --cluster reshard`` does: IMPORTING
    and MIGRATING, MIGRATE its keys in small batches (while clients keep using them), then
    SETSLOT NODE on every master. Returns the new owner."""
    source = owner(cluster, slot)
    target = cluster.masters[(cluster.masters.index(source) + 1) % len(cluster.masters)]
    src: Any = SyncRedis(port=source.port)  # (redis-py's sync execute_command is untyped)
    dst: Any = SyncRedis(port=target.port)
    try:
        src_id = _text(src.execute_command("CLUSTER MYID"))
        dst_id = _text(dst.execute_command("CLUSTER MYID"))
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 20):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            time.sleep(pause)  # (in a thread: paces the move so clients work through it)
        for master in cluster.masters:
            client: Any = SyncRedis(port=master.port)
            with client:
                client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    finally:
        src.close()
        dst.close()
    return target


async def test_a_slot_resharded_mid_drain_loses_nothing(
    app: aioqueue.App, cluster: EmbeddedCluster, prefix: str
) -> None:
    """A busy queue's slot moves to another master while a worker drains it and a
    producer enqueues into it: MOVED, ASK and TRYAGAIN all happen; every job runs once,
    and the queue's sharded channels are heard on the new master."""
    name = queues_on_every_master(cluster, prefix)[0]
    slot = key_slot(QueueKeys.for_queue(prefix, name).base.encode())
    runs: Counter[str] = Counter()

    @app.task(queue=name)
    async def work(key: str) -> None:
        runs[key] += 1
        await asyncio.sleep(0.002)

    @app.task(queue=name)
    async def echo(value: str) -> str:
        return value

    first = [f"a{n}" for n in range(1500)]
    await app.queue(name).enqueue_many(work.enqueue(key).options(id=key) for key in first)
    later = [f"b{n}" for n in range(300)]

    async def produce() -> None:  # single enqueues through the batcher, during the move
        for key in later:
            await work.enqueue(key).options(id=key)
            await asyncio.sleep(0.002)

    async with app.worker(concurrency=20, lease=5):
        # Subscribed to the queue's settled channel on its first master (before the move)...
        assert await (await echo.enqueue("before")).result(timeout=5) == "before"
        await wait_until(lambda: now(len(runs) > 100), timeout=30)
        producing = asyncio.ensure_future(produce())
        target = await asyncio.to_thread(migrate_slot, cluster, slot)
        await producing

        async def drained() -> bool:
            counts = await app.queue(name).counts()
            return counts.ready == counts.active == counts.scheduled == 0

        await wait_until(drained, timeout=60, interval=0.1)
        # ...and on the new one after it (the old one said SUNSUBSCRIBE): a result is
        # heard at once, not at the next look (60 s away).
        assert await (await echo.enqueue("after")).result(10, poll_interval=60) == "after"
    expected = set(first) | set(later)
    lost, twice = expected - set(runs), [key for key, count in runs.items() if count > 1]
    followed = lines_for(await app.internal_client()).redirects
    print(  # noqa: T201 - the scenario's numbers, for the report (pytest -s)
        f"\n[cluster reshard] slot {slot} moved to :{target.port}: "
        f"{len(expected)} jobs, lost {len(lost)}, ran twice {len(twice)}; "
        f"redirections followed by packed calls: {dict(followed)}"
    )
    assert sum(followed.values()) > 0  # the move was seen (TRYAGAIN, ASK or MOVED), followed
    assert lost == set() and twice == []
    check: Any = SyncRedis(port=target.port)
    with check:
        assert check.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_cluster_urls_are_checked_and_masked() -> None:
    url = "redis+cluster://user:secret@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002?ssl_ca_certs=x"
    assert check_redis_url(url) == url
    assert cluster_nodes(url) == [("127.0.0.1", 7000), ("127.0.0.1", 7001), ("::1", 7002)]
    assert "secret" not in mask_url(url) and "7001" in mask_url(url)
    assert check_redis_url("rediss+cluster://h:1")
    for bad in ("redis+cluster://a:b:c", "redis+cluster://h:1,h", "redis+cluster://h:99999"):
        with pytest.raises(aioqueue.ConfigError, match="not host:port"):
            check_redis_url(bad)


async def test_an_unreachable_cluster_is_one_clear_error(prefix: str) -> None:
    app = aioqueue.App(redis_url="redis+cluster://u:secret@127.0.0.1:1", prefix=prefix)
    with pytest.raises(aioqueue.ServerUnavailable, match=r"u:\*\*\*@127.0.0.1:1") as raised:
        await app.client()
    assert "secret" not in str(raised.value)
    await app.close()


async def test_a_client_handed_to_the_app_works_on_a_cluster(
    cluster: EmbeddedCluster, prefix: str
) -> None:
    from redis.asyncio import RedisCluster

    client = RedisCluster(host="127.0.0.1", port=cluster.masters[0].port)
    app = aioqueue.App(client=client, prefix=prefix)

    @app.task(queue="given")
    async def echo(value: str) -> str:
        return value

    job = await echo.enqueue("hi")
    async with app.worker():
        assert await job.result(timeout=5) == "hi"
    assert app.redis_url is not None and app.redis_url.startswith("redis+cluster://")
    await app.close()
    await client.aclose()


async def test_a_master_killed_mid_drain_loses_no_confirmed_job(prefix: str) -> None:
    """Three masters with two replicas each; the master of a busy queue is SIGKILLed while
    a producer enqueues (confirmed by a replica: ``replicas=1``) and a worker drains. A
    replica is promoted (and still has one to confirm writes); producer and worker follow
    it without a restart."""
    with EmbeddedCluster(masters=3, replicas=2) as cluster:
        app = aioqueue.App(redis_url=cluster.url, prefix=prefix, replicas=1)
        name = queues_on_every_master(cluster, prefix)[1]
        runs: Counter[str] = Counter()
        first_run: dict[str, float] = {}  # job id -> when it first started
        confirmed: dict[str, float] = {}

        @app.task(queue=name)
        async def work(key: str) -> None:
            runs[key] += 1
            first_run.setdefault(key, time.monotonic())
            await asyncio.sleep(0.005)

        def enqueue(key: str) -> Any:  # an unconfirmed one is retried with its id
            return work.enqueue(key).options(id=key)

        victim = owner(cluster, key_slot(QueueKeys.for_queue(prefix, name).base.encode()))
        try:
            async with app.worker(concurrency=20, lease=3):
                producing = asyncio.ensure_future(produce_confirmed(enqueue, 1500, confirmed))
                await wait_until(lambda: now(len(runs) > 300), timeout=30)
                killed_at = time.monotonic()
                victim.kill()
                unconfirmed = await asyncio.wait_for(producing, 90)

                await wait_until(lambda: now(set(confirmed) <= set(runs)), timeout=60, interval=0.1)
            resumed = [at for at in confirmed.values() if at > killed_at]
            lost = set(confirmed) - set(runs)
            twice = sum(1 for count in runs.values() if count > 1)
            print(  # noqa: T201 - the scenario's numbers, for the report (pytest -s)
                f"\n[cluster failover] first confirmed enqueue {min(resumed) - killed_at:.1f}s "
                f"after the kill; {len(confirmed)} confirmed, lost {len(lost)}, ran twice "
                f"{twice}, unconfirmed tries {unconfirmed}"
            )
            assert lost == set()
            assert resumed
            # Only jobs that ran around the kill run again: running or unacked then, or acked
            # on the old master within its replicas' lag (acks do not wait for replicas).
            early = [
                key for key, count in runs.items() if count > 1 and first_run[key] < killed_at - 2
            ]
            assert early == [], f"{len(early)} job(s) done 2 s before the kill ran again"
        finally:
            await app.close()
        # redis-py may drop a killed server's connections without closing them (they
        # are dead anyway); any other connection left open is a leak.
        assert leaks_outside(collect_leaked_sockets(), {victim.port}) == []
