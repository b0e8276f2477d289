"""Offers: a consumer with nothing to do is handed a new job by the enqueue itself.

idle.lua makes and withdraws offers; enqueue.lua leases a new job to the longest-waiting
offer and pushes it onto that offer's direct list (see its header), only while nothing else
is ready and the queue is neither paused nor limited. The script tests run on fakeredis and
on the real server; the worker tests check what a user sees: handed jobs run, the order of a
queue holds, and neither a stop nor a killed worker strands a job.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import enqueues, leasing
from tests.helpers import wait_until
from tests.store.script_helpers import put, redis_now_ms, take

LEASE_MS = 30_000
HOLD_MS = 60_000
ROOT = Path(__file__).resolve().parents[2]


async def offer(db: Redis, keys: QueueKeys, token: str, hold_ms: int = HOLD_MS) -> None:
    assert await leasing.idle(db, keys, token, lease_ms=LEASE_MS, hold_ms=hold_ms) == []


async def test_a_new_job_goes_to_the_offer_leased_as_a_take_would(
    db: Redis, keys: QueueKeys
) -> None:
    await offer(db, keys, "o:7")
    before = await redis_now_ms(db)
    assert await put(db, keys, "a", max_attempts=4) == lifecycle.Enqueued(True, "queued")
    after = await redis_now_ms(db)

    record = await db.hgetall(keys.job("a"))
    assert (record[b"s"], record[b"w"], record[b"n"]) == (b"active", b"o:7", b"1")
    assert before <= int(record[b"st"]) <= after
    deadline = await db.zscore(keys.active, "a")
    assert deadline is not None and before + LEASE_MS <= deadline <= after + LEASE_MS
    assert await db.llen(keys.ready(0)) == 0 and await db.llen(keys.notify) == 0
    [item] = await db.lrange(keys.direct("o:7"), 0, -1)
    handed = leasing.handed_job(cast("bytes", item), "o:7")
    assert handed == lifecycle.Taken(b"a", b'{"t":"a"}', 1, 4, "o:7", 0)
    assert 0 < await db.pttl(keys.direct("o:7")) <= LEASE_MS
    assert await db.zcard(keys.idle) == 0  # an offer takes one job


async def test_one_job_per_offer_the_longest_waiting_first_the_rest_to_ready(
    db: Redis, keys: QueueKeys
) -> None:
    await offer(db, keys, "o:1", hold_ms=HOLD_MS)
    await offer(db, keys, "o:2", hold_ms=HOLD_MS + 1_000)
    jobs = [lifecycle.NewJob(f"j{n}", b'{"t":"x"}', 5) for n in range(4)]
    await enqueues.enqueue_many(db, keys, jobs)

    assert await db.lrange(keys.direct("o:1"), 0, -1) == [b"0 2 j0" + b'{"t":"x"}']
    assert await db.lrange(keys.direct("o:2"), 0, -1) == [b"0 2 j1" + b'{"t":"x"}']
    assert await db.lrange(keys.ready(5), 0, -1) == [b"j2", b"j3"]
    assert await db.llen(keys.notify) == 2  # a token per job left in ready
    assert await take(db, keys, 10) == [b"j2", b"j3"]


@pytest.mark.parametrize("blocker", ["ready", "paused", "limits", "lapsed"])
async def test_no_job_is_handed_past_a_ready_one_a_pause_a_limit_or_a_lapsed_offer(
    db: Redis, keys: QueueKeys, blocker: str
) -> None:
    if blocker == "ready":
        await put(db, keys, "older", priority=9)
    elif blocker == "paused":
        await db.set(keys.paused, 1)
    elif blocker == "limits":
        await db.hset(keys.limits, "c", 5)
    offered_at = await redis_now_ms(db)
    await offer(db, keys, "o:1", hold_ms=1 if blocker == "lapsed" else HOLD_MS)
    if blocker == "lapsed":

        async def lapsed() -> bool:
            return await redis_now_ms(db) > offered_at + 5

        await wait_until(lapsed)
    await put(db, keys, "new", priority=0)

    assert await db.exists(keys.direct("o:1")) == 0
    assert await db.hget(keys.job("new"), "s") == b"queued"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"new"]
    assert await db.zcard(keys.idle) == (0 if blocker == "lapsed" else 1)


async def test_a_withdrawal_returns_what_was_handed_and_ends_the_offer(
    db: Redis, keys: QueueKeys
) -> None:
    await offer(db, keys, "o:1")
    await put(db, keys, "a")  # handed before the consumer popped it
    handed = await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=0)
    assert [job.id for job, _ in handed] == [b"a"] and handed[0][0].lease == "o:1"
    assert handed == [(leasing.handed_job(b'0 1 a{"t":"a"}', "o:1"), False)]
    assert await db.exists(keys.direct("o:1")) == 0 and await db.zcard(keys.idle) == 0
    again = await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=0)
    assert again == handed  # a resent withdrawal
    await put(db, keys, "b")  # no offer out: to ready
    assert await take(db, keys) == [b"b"]


async def test_a_job_popped_but_lost_comes_back_with_the_withdrawal_until_reclaimed(
    db: Redis, keys: QueueKeys
) -> None:
    """The consumer's BLPOP popped the job but its reply was lost: the withdrawal finds it
    by the token's taken list, while it is still leased to the token."""
    await offer(db, keys, "o:1")
    await put(db, keys, "a")
    assert await db.lpop(keys.direct("o:1")) is not None  # the lost reply
    [(handed, aborted)] = await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=0)
    assert (handed.id, handed.lease, handed.attempts, aborted) == (b"a", "o:1", 1, False)
    await db.hset(keys.job("a"), "w", "o:2")  # reclaimed and leased again meanwhile
    assert await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=0) == []


async def test_a_resent_enqueue_of_a_handed_job_writes_nothing(db: Redis, keys: QueueKeys) -> None:
    await offer(db, keys, "o:1")
    await put(db, keys, "a")
    again = await put(db, keys, "a", check_created=False)
    assert again == lifecycle.Enqueued(False, "active")
    assert await db.llen(keys.direct("o:1")) == 1 and await db.llen(keys.ready(0)) == 0


# -- workers ---------------------------------------------------------------------------


async def test_an_idle_worker_is_handed_new_jobs_and_runs_them_in_order(
    app: aioqueue.App,
) -> None:
    ran: list[int] = []

    @app.task
    async def record(n: int) -> None:
        ran.append(n)

    redis = await app.client()
    keys = app.queue().keys
    async with app.worker(concurrency=4):

        async def offered() -> bool:
            return await redis.zcard(keys.idle) == 1

        for n in range(20):  # one at a time: each to the worker's offer
            await wait_until(offered)
            job = await record.enqueue(n)
            await job.result(timeout=5)
        await wait_until(offered)
        # each offer forgets the taken list of the one before (its job is in hand)
        assert len(await redis.keys(f"{keys.taken_prefix}*")) <= 1
        jobs = await app.queue().enqueue_many(record.enqueue(n) for n in range(20, 60))
        for job in jobs:
            await job.result(timeout=5)
    assert ran[:20] == list(range(20)) and sorted(ran) == list(range(60))
    assert await redis.zcard(keys.idle) == 0  # the stop withdrew its offer
    assert await redis.keys(f"{keys.direct_prefix}*") == []


async def test_a_handed_job_waits_for_a_slot_another_queue_filled(app: aioqueue.App) -> None:
    """No slot is held for an offer: a worker of concurrency 1 serving two queues runs the
    other queue's jobs meanwhile, and the handed job once that slot frees."""
    release = asyncio.Event()
    ran: list[str] = []

    @app.task(queue="slow")
    async def slow() -> None:
        ran.append("slow")
        await release.wait()

    @app.task(queue="fast")
    async def fast() -> None:
        ran.append("fast")

    redis = await app.client()
    async with app.worker(queues=["fast", "slow"], concurrency=1):

        async def offered() -> bool:
            return await redis.zcard(app.queue("fast").keys.idle) == 1

        await wait_until(offered)
        await slow.enqueue()

        async def slow_started() -> bool:
            return ran == ["slow"]

        await wait_until(slow_started)
        job = await fast.enqueue()
        await asyncio.sleep(0)
        release.set()
        await job.result(timeout=5)
    assert ran == ["slow", "fast"]


@pytest.mark.real_redis("a worker process, SIGKILLed")
async def test_a_job_handed_to_a_killed_worker_runs_once_its_lease_expires(
    redis_url: str, prefix: str
) -> None:
    """SIGKILL a worker process while its offer is out: the next job is leased to it, and
    another worker runs it once that lease expires (at-least-once holds)."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)

    @app.task
    async def echo(value: int) -> int:  # the task of tests/apps/offers_app.py
        return value

    keys = app.queue().keys
    redis = await app.client()
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "AIOQUEUE_PREFIX": prefix}
    child = subprocess.Popen(  # noqa: ASYNC220 - a worker process to kill
        [sys.executable, "-m", "aioqueue", "worker", "tests.apps.offers_app:app", "--lease", "1"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:

        async def offered() -> bool:
            return await redis.zcard(keys.idle) == 1

        await wait_until(offered, timeout=20)
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.wait, 10)
        job = await echo.enqueue(42)
        assert await job.status() == aioqueue.JobStatus.ACTIVE  # leased to the dead worker
        async with app.worker(reclaim_interval=0.1):
            assert await job.result(timeout=20) == 42
        info = await job.info()
        assert info is not None and info.attempts == 2
    finally:
        if child.poll() is None:
            child.kill()
        await app.close()
