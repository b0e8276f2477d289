"""Tenants through the public API and running workers: ``.options(tenant=...)``, turns
between tenants, weights, limits held across workers, reclaim, delayed jobs, cancel,
pause, dead letters, counts and listings; bad input refused with nothing written."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.lifecycle import Settlement
from aioqueue.core.limits import TenantLimits
from aioqueue.store.scripts import admin as admin_scripts
from aioqueue.store.scripts import leasing
from tests.apps import delivery_app
from tests.helpers import now, run_until_idle, wait_until

# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "error"),
    [("", "non-empty"), ("  \t", "whitespace"), ("é" * 101, "at most 200 bytes"), (5, "str")],
)
async def test_a_bad_tenant_raises_and_writes_nothing(
    app: aioqueue.App, redis: Redis, prefix: str, tenant: Any, error: str
) -> None:
    @app.task
    async def noop() -> None:
        pass

    with pytest.raises(aioqueue.ConfigError, match=error):
        await noop.enqueue().options(tenant=tenant)
    queue = app.queue()
    with pytest.raises(aioqueue.ConfigError, match=error):
        await queue.set_weights({tenant: 2})
    with pytest.raises(aioqueue.ConfigError, match=error):
        await queue.set_tenant_limits(tenant, max_running=1)
    assert await redis.keys(f"{prefix}*") == []


async def test_a_tenant_of_200_bytes_is_taken(app: aioqueue.App) -> None:
    @app.task
    async def noop() -> None:
        pass

    job = await noop.enqueue().options(tenant="é" * 100)
    assert (await job.info()).tenant == "é" * 100


@pytest.mark.parametrize("weight", [0, -1, 1001, 1.5, True, "2"])
async def test_a_bad_weight_raises_and_writes_nothing(
    app: aioqueue.App, redis: Redis, prefix: str, weight: Any
) -> None:
    with pytest.raises(aioqueue.ConfigError, match="weight of tenant 'a' must be an int"):
        await app.queue().set_weights({"b": 2, "a": weight})
    assert await redis.keys(f"{prefix}*") == []


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_running": 0}, "max_running"),
        ({"max_running": -3}, "max_running"),
        ({"max_running": True}, "max_running"),
        ({"rate": "0/s"}, "rate"),
        ({"burst": 0, "rate": "1/s"}, "burst"),
    ],
)
async def test_bad_tenant_limits_raise_and_write_nothing(
    app: aioqueue.App, redis: Redis, prefix: str, options: dict[str, Any], error: str
) -> None:
    with pytest.raises(aioqueue.ConfigError, match=error):
        await app.queue().set_tenant_limits("a", **options)
    assert await redis.keys(f"{prefix}*") == []


async def test_a_debounced_call_cannot_have_a_tenant(app: aioqueue.App) -> None:
    @app.task
    async def noop() -> None:
        pass

    with pytest.raises(aioqueue.ConfigError, match="debounced call cannot have a tenant"):
        await noop.enqueue().options(id="k", debounce=1, tenant="a")


# -- serving ------------------------------------------------------------------------------


async def test_a_flood_from_one_tenant_does_not_starve_another(app: aioqueue.App) -> None:
    started: list[str] = []

    @app.task
    async def work(tenant: str) -> None:
        started.append(tenant)

    await app.queue().enqueue_many(work.enqueue("A").options(tenant="A") for _ in range(200))
    await app.queue().enqueue_many(work.enqueue("B").options(tenant="B") for _ in range(10))
    await run_until_idle(app, concurrency=1)

    assert Counter(started) == {"A": 200, "B": 10}
    assert started.index("B") <= 2  # B's first job did not wait for A's 200
    last_b = len(started) - started[::-1].index("B") - 1
    assert last_b <= 2 * 10 + 2  # they took turns


async def test_weights_share_a_priority_in_proportion(app: aioqueue.App) -> None:
    started: list[str] = []

    @app.task
    async def work(tenant: str) -> None:
        started.append(tenant)

    queue = app.queue()
    await queue.set_weights({"big": 3})
    assert await queue.weights() == {"big": 3}
    await queue.enqueue_many(work.enqueue("big").options(tenant="big") for _ in range(30))
    await queue.enqueue_many(work.enqueue("small").options(tenant="small") for _ in range(30))
    await run_until_idle(app, concurrency=1)

    first = Counter(started[:40])
    assert first == {"big": 30, "small": 10}  # three for one while both had jobs ready
    await queue.set_weights({"big": 1})
    assert await queue.weights() == {}


async def test_a_tenant_s_cap_holds_across_workers(app: aioqueue.App, redis: Redis) -> None:
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    sampled: list[int] = []

    @app.task
    async def work(tenant: str) -> None:
        running[tenant] += 1
        peak[tenant] = max(peak[tenant], running[tenant])
        sampled.append(int(await redis.hget(queue.keys.tenant_key("running"), tenant) or 0))
        await asyncio.sleep(0.01)
        running[tenant] -= 1

    queue = app.queue()
    assert await queue.set_tenant_limits(max_running=3) == TenantLimits(max_running=3)
    await queue.enqueue_many(work.enqueue("A").options(tenant="A") for _ in range(40))
    await queue.enqueue_many(work.enqueue("B").options(tenant="B") for _ in range(40))
    async with app.worker(concurrency=10), app.worker(concurrency=10):
        await wait_until(lambda: _done(queue), timeout=20)

    assert max(peak.values()) == 3 and set(peak) == {"A", "B"}  # (the cap, reached)
    assert max(sampled) == 3
    assert await redis.keys(queue.keys.tenant_key("running") + "*") == []


async def test_a_dead_worker_s_leases_count_until_reclaim_then_free(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def work(n: int) -> int:
        return n

    queue = app.queue()
    await queue.set_tenant_limits("A", max_running=1)
    jobs = [await work.enqueue(n).options(tenant="A") for n in range(3)]
    lost = await leasing.take(
        await app.client(), queue.keys, lease="dead:1", lease_ms=300, limit=10
    )  # a worker that took a job of A and died
    assert [job.id for job in lost.jobs] == [jobs[0].id.encode()]

    async with app.worker(lease=1, reclaim_interval=0.1):
        assert [await job.result(timeout=10) for job in jobs] == [0, 1, 2]
    assert (await jobs[0].info()).attempts == 2
    assert await redis.hget(queue.keys.tenant_key("running"), "A") is None


async def test_a_delayed_tenant_job_joins_its_tenant_when_due(app: aioqueue.App) -> None:
    started: list[str] = []

    @app.task
    async def work(tag: str) -> None:
        started.append(tag)

    queue = app.queue()
    await queue.set_tenant_limits("A", max_running=1)
    await work.enqueue("a-now").options(tenant="A")
    later = await work.enqueue("a-later").options(tenant="A", delay=0.3)
    assert (await later.info()).tenant == "A"
    assert [(t.name, t.ready) for t in (await queue.counts()).top_tenants] == [("A", 1)]
    async with app.worker(concurrency=4):
        await later.result(timeout=5)
    assert started == ["a-now", "a-later"]


async def test_cancel_pause_and_the_views_of_tenants(app: aioqueue.App) -> None:
    @app.task
    async def work(n: int) -> None:
        if n == 0:
            raise ValueError("bad")

    queue = app.queue()
    await queue.pause()
    jobs = [await work.enqueue(n).options(tenant="acme", max_attempts=1) for n in range(3)]
    await work.enqueue(9).options(tenant="zeta")
    assert await queue.cancel(jobs[1].id)

    counts = await queue.counts()
    assert (counts.ready, counts.tenants, counts.tenants_held) == (3, 2, 0)
    assert [(t.name, t.ready) for t in counts.top_tenants] == [("acme", 2), ("zeta", 1)]
    assert [t.name for t in await queue.tenants(limit=1, offset=1)] == ["zeta"]
    ready = await queue.jobs("ready")
    assert [(job.args[0], job.tenant) for job in ready] == [(0, "acme"), (9, "zeta"), (2, "acme")]
    await run_until_idle(app)  # a burst worker leaves a paused queue alone
    assert (await queue.counts()).ready == 3

    await queue.resume()
    await run_until_idle(app)
    [dead] = await queue.dead_jobs()
    assert (dead.id, dead.tenant) == (jobs[0].id, "acme")
    assert await queue.requeue_dead([dead.id]) == 1
    assert (await queue.counts()).top_tenants[0].name == "acme"


async def test_tenant_limits_read_back(app: aioqueue.App) -> None:
    queue = app.queue()
    await queue.set_tenant_limits(max_running=2, rate="10/s", burst=3)
    await queue.set_tenant_limits("vip", max_running=20)
    assert await queue.tenant_limits("vip") == TenantLimits(max_running=20)
    assert await queue.tenant_limits("other") == TenantLimits(2, 100.0, 3)
    assert (await queue.tenant_limits()).describe() == "at most 2 running, 10/s (burst 3)"
    assert await queue.all_tenant_limits() == {
        None: TenantLimits(2, 100.0, 3),
        "vip": TenantLimits(max_running=20),
    }
    await queue.set_tenant_limits("vip")
    assert await queue.all_tenant_limits() == {None: TenantLimits(2, 100.0, 3)}


async def test_a_tenant_s_rate_spaces_its_starts_and_no_one_else_s(app: aioqueue.App) -> None:
    """Checked on the Redis clock's start times; a start the rate held back comes when the
    rate allows (the promoter wakes for it), not at the worker's next idle look."""

    @app.task
    async def work(tenant: str) -> str:
        return tenant  # (a result keeps the record, and its start time, after the job)

    queue = app.queue()
    await queue.set_tenant_limits("A", rate="20/s")  # 50 ms apart
    a_jobs = await queue.enqueue_many(work.enqueue("A").options(tenant="A") for _ in range(5))
    b_jobs = await queue.enqueue_many(work.enqueue("B").options(tenant="B") for _ in range(20))
    async with app.worker(concurrency=10, idle_wait=60):
        for job in [*a_jobs, *b_jobs]:
            await job.result(timeout=10)

    starts = sorted([(await job.info()).started_at_ms or 0 for job in a_jobs])
    for k in range(2, 6):  # GCRA's promise: k starts span (k - 1) intervals, less the 20 ms
        # a late start may hand on (include/gcra.lua)
        spans = [b - a for a, b in zip(starts, starts[k - 1 :], strict=False)]
        assert min(spans) >= (k - 1) * 50 - 21, (k, starts)
    b_starts = [(await job.info()).started_at_ms or 0 for job in b_jobs]
    assert max(b_starts) < starts[-1]  # B was not held back behind A's rate


async def _done(queue: aioqueue.Queue) -> bool:
    counts = await queue.counts()
    return counts.ready == 0 and counts.active == 0


async def test_a_burst_worker_waits_without_spinning_while_only_held_tenants_have_jobs(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker holds the one job tenant A may run: a burst worker finds A's other
    jobs ready but may take none. It looks again now and then until they may start (it
    once took, promoted and counted back to back: hundreds of round trips a second)."""
    gate = asyncio.Event()
    takes = 0
    take = leasing.take

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal takes
        takes += 1
        return await take(*args, **kwargs)

    @app.task
    async def work(n: int) -> int:
        if n == 0:
            await gate.wait()
        return n

    queue = app.queue()
    await queue.set_tenant_limits("A", max_running=1)
    jobs = [await work.enqueue(n).options(tenant="A") for n in range(3)]
    async with app.worker(concurrency=1):
        await wait_until(lambda: _running(queue))
        monkeypatch.setattr(leasing, "take", counted)
        burst = asyncio.create_task(run_until_idle(app, concurrency=5))
        await wait_until(lambda: now(takes >= 1))
        await asyncio.sleep(0.3)  # (a window to count its looks in, not a wait for a result)
        assert takes < 100
        gate.set()
        await burst
        assert [await job.result(timeout=10) for job in jobs] == [0, 1, 2]


async def _running(queue: aioqueue.Queue) -> bool:
    return (await queue.counts()).active == 1


@pytest.mark.real_redis("a worker process of its own")
async def test_a_sigkilled_worker_s_lease_counts_against_its_tenant_until_reclaimed(
    redis_url: str, prefix: str, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", redis_url)  # the task's own Redis connection
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    queue = app.queue()
    await queue.set_tenant_limits("A", max_running=1)
    first = await queue.enqueue("hang_first_time", prefix).options(tenant="A")
    second = await queue.enqueue("hang_first_time", prefix).options(tenant="A")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.delivery_app:app", "--lease", "1",
        env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await wait_until(lambda: _has(redis, f"delivery-test:started:{prefix}"), timeout=15)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    running = queue.keys.tenant_key("running")
    assert await redis.hget(running, "A") == b"1"  # the dead worker's lease still counts
    assert await second.status() is aioqueue.JobStatus.QUEUED

    worker_app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    worker_app.task(retries=3, name="hang_first_time")(delivery_app.hang_first_time.fn)
    try:
        async with worker_app.worker(lease=1, reclaim_interval=0.1):
            assert await first.result(timeout=15) == f"done {prefix} on run 2"  # (first again)
            assert await second.result(timeout=15) == f"done {prefix} on run 3"
    finally:
        await worker_app.close()
        await app.close()
    assert await redis.hget(running, "A") is None


async def _has(redis: Redis, key: str) -> bool:
    return bool(await redis.llen(key))


async def test_a_workflow_s_jobs_may_name_tenants(app: aioqueue.App, redis: Redis) -> None:
    """A parent released by its last child (ack.lua, through include/links.lua) joins its
    tenant's queue, as its children joined theirs."""

    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    children = [leaf.enqueue(x).options(tenant=f"t{x % 2}") for x in range(4)]
    workflow = await aioqueue.chord(children, total.callback().options(tenant="t-parent"))
    queue = app.queue()
    assert sorted((t.name, t.ready) for t in (await queue.counts()).top_tenants) == [
        ("t0", 2),
        ("t1", 2),
    ]  # (the parent waits for them, out of every queue)
    client = await app.client()
    taken = await leasing.take(client, queue.keys, lease="by-hand", lease_ms=30_000, limit=10)
    settled = [
        Settlement(job.id, job.lease, "complete", b"%d" % n) for n, job in enumerate(taken.jobs)
    ]
    await leasing.ack(client, queue.keys, settled, result_ttl_ms=60_000)

    parent_list = queue.keys.tenant_key("jobs", 5, "t-parent")
    assert await redis.lrange(parent_list, 0, -1) == [workflow.id.encode()]
    async with app.worker():
        assert await workflow.result(timeout=10) == 6
    assert (await queue.job(workflow.id).info()).tenant == "t-parent"


async def test_reconcile_recounts_a_tenant_s_leases_after_a_record_vanished(
    app: aioqueue.App, redis: Redis
) -> None:
    """A leased job whose record vanished (an evicting server) is dropped by reclaim with
    no record to say whose it was: its tenant kept it counted, and at its cap of 1 never
    started again. reconcile() recounts the leases and lets the tenant go on."""

    @app.task
    async def work(n: int) -> int:
        return n

    queue = app.queue()
    await queue.set_tenant_limits("A", max_running=1)
    first = await work.enqueue(1).options(tenant="A")
    second = await work.enqueue(2).options(tenant="A")
    client = await app.client()
    taken = await leasing.take(client, queue.keys, lease="gone:1", lease_ms=60_000, limit=10)
    assert [job.job_id for job in taken.jobs] == [first.id]  # (the cap holds the second)
    await redis.delete(f"{queue.keys.job_prefix}{first.id}")  # evicted...
    await redis.zrem(queue.keys.active, first.id)  # ...and its lease dropped
    running = queue.keys.tenant_key("running")
    assert await redis.hget(running, "A") == b"1"  # counted for good
    assert await admin_scripts.recount_tenants(client, queue.keys, "B") == 0  # (A's left be)
    assert await redis.hget(running, "A") == b"1"
    assert await queue.reconcile() == 1
    assert await redis.hget(running, "A") is None
    assert await queue.reconcile() == 0  # nothing left to repair
    async with app.worker():
        assert await second.result(timeout=10) == 2
