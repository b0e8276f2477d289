"""Edges of offers (an idle consumer is handed new jobs by enqueue.lua) and of done slots
by millisecond, from two reviews of both. The first five tests failed on the code as it
first landed (a lost reply or a failed withdrawal stranded a job on a live worker until
its lease expired; a withdrawn job was overtaken by the take after it; a job cancelled
after it was handed ran; sparse jobs grew the consumer's forget list without bound), and
so did the four at the end, from the second review (a job handed to a worker whose slots
filled meanwhile waited 2 s; a stop was held by a failing withdrawal; zero-padded 20-digit
ids all went to one done hash); the others confirm behaviour that holds.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import aioqueue
from aioqueue.client.enqueue import new_job_id
from aioqueue.core import lifecycle
from aioqueue.core.ids import done_slot
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import admin, enqueues, leasing
from aioqueue.worker.consumer import QueueConsumer
from tests.helpers import drain, in_done_set, redis_ms, wait_until
from tests.store.script_helpers import put, redis_now_ms, take

LEASE_MS = 30_000
HOLD_MS = 60_000


def _consumer(worker: aioqueue.Worker, queue: str = "default") -> QueueConsumer:
    consumers = cast("list[Any]", worker._consumers)
    return next(c for c in consumers if isinstance(c, QueueConsumer) and c.keys.name == queue)


# -- offers: a live worker must not strand a job -----------------------------------------


async def test_forget_list_stays_bounded_while_every_job_is_handed(app: aioqueue.App) -> None:
    """A handed job's token goes on the consumer's list of tokens to forget, which only a take
    emptied; a worker that keeps up with its traffic is handed every job and never
    takes, so the list (and the ``take:<token>`` lists in Redis) grew without bound, and
    the next take carried them all in one script call. Each offer now forgets them."""

    @app.task
    async def noop(n: int) -> None:
        return None

    redis = await app.client()
    keys = app.queue().keys
    async with app.worker(concurrency=4, idle_wait=60) as worker:

        async def offered() -> bool:
            return await redis.zcard(keys.idle) == 1

        for n in range(40):
            await wait_until(offered)
            job = await noop.enqueue(n)
            await job.result(timeout=5)
        await wait_until(offered)
        forget = _consumer(worker)._tokens.unforgotten
        lingering = len(await redis.keys(f"{keys.taken_prefix}*"))
    assert forget <= 4, f"{forget} lease tokens kept to forget after 40 handed jobs"
    assert lingering <= 4, f"{lingering} take:<token> lists left in Redis"


async def test_an_offer_whose_reply_was_lost_does_not_strand_a_job(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offer's idle.lua call runs but its reply is lost (a ConnectionError after Redis
    ran it): the offer is in the idle ZSET. The consumer withdraws it (it may have been
    made), so the next job is not handed to a token nobody listens to (it stayed leased
    until its lease expired, here 30 s)."""
    real_idle = leasing.idle
    lost = asyncio.Event()

    async def idle(redis: Redis, keys: QueueKeys, token: str, **kw: Any) -> list[Any]:
        handed = await real_idle(redis, keys, token, **kw)
        if kw["hold_ms"] > 0 and not lost.is_set():
            lost.set()
            raise RedisConnectionError("the reply was lost")
        return handed

    monkeypatch.setattr(leasing, "idle", idle)

    @app.task
    async def echo(value: int) -> int:
        return value

    async with app.worker(lease=30):
        await asyncio.wait_for(lost.wait(), 5)
        job = await echo.enqueue(7)
        assert await job.result(timeout=8) == 7


async def test_a_failed_withdrawal_does_not_strand_a_job(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A withdrawal that fails (here: the connection drops before it is sent) is retried
    (it is safe to resend): else the offer stayed out until it lapsed, and a job enqueued
    meanwhile sat leased to this live worker until its lease expired."""
    real_idle = leasing.idle
    failed = asyncio.Event()

    async def idle(redis: Redis, keys: QueueKeys, token: str, **kw: Any) -> list[Any]:
        if kw["hold_ms"] == 0 and not failed.is_set():
            failed.set()
            raise RedisConnectionError("connection dropped")
        return await real_idle(redis, keys, token, **kw)

    monkeypatch.setattr(leasing, "idle", idle)

    @app.task
    async def echo(value: int) -> int:
        return value

    async with app.worker(lease=30, idle_wait=1):  # the first BLPOP times out: a withdrawal
        await asyncio.wait_for(failed.wait(), 5)
        job = await echo.enqueue(8)
        assert await job.result(timeout=8) == 8


async def test_a_withdrawal_flags_a_job_whose_abort_was_requested(
    db: Redis, keys: QueueKeys
) -> None:
    """A handed job that its consumer has not popped yet is 'active', so cancel() only
    marks it for abort (ab=1) and publishes its id, which no worker holds yet. The
    withdrawal returns it flagged, and the consumer ends it as cancelled without starting
    it (it started it, and the abort landed only at the next lease renewal)."""
    await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=HOLD_MS)
    await put(db, keys, "a")
    outcome, _ = await admin.cancel(db, keys, "a", result_ttl_ms=60_000)
    assert outcome == "aborting"
    handed = await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=0)
    assert [(job.id, aborted) for job, aborted in handed] == [(b"a", True)]


async def test_a_handed_job_flagged_aborted_ends_cancelled_without_running(
    app: aioqueue.App,
) -> None:
    ran: list[int] = []

    @app.task
    async def record(n: int) -> None:
        ran.append(n)

    redis = await app.client()
    keys = app.queue().keys
    async with app.worker(concurrency=2) as worker:
        consumer = _consumer(worker)

        async def offered() -> bool:
            return await redis.zcard(keys.idle) == 1

        await wait_until(offered)
        token = "o:test"  # an offer of our own, lapsing before the worker's: taken first
        await leasing.idle(redis, keys, token, lease_ms=LEASE_MS, hold_ms=1_000)
        job = await record.enqueue(1)  # handed to our offer ...
        assert await redis.hget(keys.job(job.id), "w") == token.encode()
        await admin.cancel(redis, keys, job.id, result_ttl_ms=60_000)  # ... then cancelled
        handed = await leasing.idle(redis, keys, token, lease_ms=LEASE_MS, hold_ms=0)
        consumer._idle.admit_handed(handed)  # what the consumer's withdrawal does with them
        with pytest.raises(aioqueue.JobCancelled):
            await job.result(timeout=5)
    assert ran == []


async def test_a_withdrawn_job_is_not_overtaken_by_the_take_after_it(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job a is handed to the offer, job b (enqueued after it) goes to ready with a notify
    token, and the consumer sends its BLPOP only then. It pops a first (the direct list is
    its first key), and a withdrawal that lands late cannot let a take overtake it (it is
    awaited before the take). Both failed: the BLPOP found the notify token first, the
    withdrawal ran in the background and the take's reply landed first (b ran before a)."""
    real_idle = leasing.idle
    offer_out, go_on = asyncio.Event(), asyncio.Event()

    async def idle(redis: Redis, keys: QueueKeys, token: str, **kw: Any) -> list[Any]:
        handed = await real_idle(redis, keys, token, **kw)
        if kw["hold_ms"] > 0 and not offer_out.is_set():
            offer_out.set()
            await go_on.wait()  # the consumer is slow to send its BLPOP
        elif kw["hold_ms"] == 0:
            await asyncio.sleep(0.3)  # the withdrawal's reply is slow
        return handed

    monkeypatch.setattr(leasing, "idle", idle)
    ran: list[str] = []

    @app.task
    async def record(name: str) -> None:
        ran.append(name)

    async with app.worker(concurrency=1):
        await asyncio.wait_for(offer_out.wait(), 5)
        a = await record.enqueue("a")  # handed: onto the offer's direct list
        b = await record.enqueue("b")  # no offer out now: ready, a notify token
        go_on.set()
        await a.result(timeout=5)
        await b.result(timeout=5)
    assert ran == ["a", "b"]


# -- offers: behaviour that holds ---------------------------------------------------------


async def test_a_batch_of_two_priorities_is_not_handed(db: Redis, keys: QueueKeys) -> None:
    await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=HOLD_MS)
    jobs = [lifecycle.NewJob("lo", b"{}", 0), lifecycle.NewJob("hi", b"{}", 9)]
    await enqueues.enqueue_many(db, keys, jobs)
    assert await db.exists(keys.direct("o:1")) == 0
    assert await take(db, keys, 2) == [b"hi", b"lo"]  # strict priority holds


async def test_an_explicit_id_handed_then_enqueued_again_is_not_duplicated(
    db: Redis, keys: QueueKeys
) -> None:
    """An id handed to an offer is 'active': a later enqueue of it (a retry by the caller,
    or a resend) writes nothing, hands nothing and pushes no notify token."""
    await leasing.idle(db, keys, "o:1", lease_ms=LEASE_MS, hold_ms=HOLD_MS)
    await leasing.idle(db, keys, "o:2", lease_ms=LEASE_MS, hold_ms=HOLD_MS + 1)
    await put(db, keys, "a")
    again = await put(db, keys, "a", check_created=False)
    assert again == lifecycle.Enqueued(False, "active")
    assert await db.exists(keys.direct("o:2")) == 0 and await db.zcard(keys.idle) == 1
    assert await db.llen(keys.notify) == 0


async def test_stopping_with_an_offer_out_leaves_no_offer_and_no_stranded_job(
    app: aioqueue.App,
) -> None:
    ran: list[int] = []

    @app.task
    async def record(n: int) -> None:
        ran.append(n)

    redis = await app.client()
    keys = app.queue().keys
    worker = app.worker(concurrency=1)
    async with worker:

        async def offered() -> bool:
            return await redis.zcard(keys.idle) == 1

        await wait_until(offered)
        job = await record.enqueue(1)  # handed; the stop races its pop
    status = await job.status()
    assert status in (aioqueue.JobStatus.COMPLETE, aioqueue.JobStatus.QUEUED), status
    assert await redis.zcard(keys.idle) == 0
    assert await redis.zcard(keys.active) == 0
    assert await redis.keys(f"{keys.direct_prefix}*") == []


# -- done slots -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_id",
    [
        b"0" + b"\xff" * 19,  # generated shape in length and first byte, not UTF-8
        b"0abcde\x80\x81" + b"x" * 12,  # bytes outside the alphabet where the ms is read
        b"\xff" + b"0" * 19,  # 20 bytes, not starting with '0'
        b"0" * 20,
        b"0Q8S_r~z" + b"y" * 12,
        b"0" * 19,
    ],
)
async def test_a_completed_id_of_any_shape_is_found_in_its_done_slot(
    db: Redis, keys: QueueKeys, job_id: bytes
) -> None:
    await enqueues.enqueue(
        db, keys, job_id=cast("str", job_id), payload=b"{}", priority=0, max_attempts=0,
        delay_ms=0, due_ms=0,
    )  # fmt: skip
    taken = await leasing.take(db, keys, lease="w:1", lease_ms=LEASE_MS, limit=1)
    [job] = taken.jobs
    assert job.id == job_id
    now = await redis_now_ms(db)
    settlement = lifecycle.Settlement(job.id, job.lease, "complete", b"null", 0)
    assert await leasing.ack(db, keys, [settlement], result_ttl_ms=60_000, kept_ms=60_000) == [True]
    found = [
        g for g in (now // 60_000, now // 60_000 + 1)
        if await in_done_set(db, keys.done(60_000, g, done_slot(job_id)), job_id)
    ]  # fmt: skip
    assert found, "not in the done set Python computes"
    again = await enqueues.enqueue(
        db, keys, job_id=cast("str", job_id), payload=b"{}", priority=0, max_attempts=0,
        delay_ms=0, due_ms=0, span_ms=60_000,
    )  # fmt: skip
    assert again == lifecycle.Enqueued(False, "complete")


@pytest.mark.parametrize("explicit", [None, "0abcdefghijklmnopqrs", "0Q8S_r\u00e9" + "z" * 12])
async def test_a_completed_id_is_found_across_a_generation(
    redis_url: str, prefix: str, explicit: str | None
) -> None:
    """Completed with no result: its status stays 'complete' and a new enqueue of it is
    refused, in the next generation of its window too (window 2 s)."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, idempotency_ttl=2)
    try:

        @app.task
        async def noop() -> None:
            return None

        redis = await app.client()
        call = noop.enqueue() if explicit is None else noop.enqueue().options(id=explicit)
        job = await call
        async with app.worker():
            await job.result(timeout=5)  # None: its id goes to a done set
        # Its generation, from the set that holds it (the Redis clock read after the
        # result may already be in the next one, on a busy machine).
        keys, slot, now_ms = app.queue().keys, done_slot(job.id.encode()), await redis_ms(redis)
        [generation] = [
            g for g in (now_ms // 2000 - 1, now_ms // 2000)
            if await in_done_set(redis, keys.done(2000, g, slot), job.id)
        ]  # fmt: skip

        async def next_generation() -> bool:
            return await redis_ms(redis) // 2000 > generation

        await wait_until(next_generation, timeout=3)
        assert await job.status() == aioqueue.JobStatus.COMPLETE
        again = await noop.enqueue().options(id=job.id)
        assert not again.created
        assert await app.queue().counts() == aioqueue.QueueCounts(
            ready=0, scheduled=0, active=0, dead=0
        )
    finally:
        await app.close()


async def test_generated_ids_of_one_millisecond_share_a_done_slot() -> None:
    ids = [new_job_id() for _ in range(50)]
    by_ms: dict[str, set[int]] = {}
    for job_id in ids:
        by_ms.setdefault(job_id[:8], set()).add(done_slot(job_id.encode()))
    assert all(len(slots) == 1 for slots in by_ms.values())
    assert all(len(job_id) == 20 and job_id[0] == "0" for job_id in ids)


# -- a second review -------------------------------------------------------------------


async def test_an_offer_made_with_room_is_not_handed_a_job_once_the_worker_is_full(
    app: aioqueue.App,
) -> None:
    """An offer is made while the worker has a free slot and stays out until the BLPOP
    returns (up to idle_wait). Another queue of the same worker fills that slot meanwhile;
    the offer is still the longest-waiting one, so the next job is leased to this full
    worker, waits there MAX_WAIT (2 s) for a slot, and only then goes back to ready, while
    a second worker with a free slot (and an offer of its own) sat idle."""
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    started: dict[str, float] = {}

    @app.task(queue="slow")
    async def slow() -> None:
        started["slow"] = loop.time()
        await release.wait()

    @app.task(queue="fast")
    async def fast() -> None:
        started["fast"] = loop.time()

    redis = await app.client()
    fast_idle = app.queue("fast").keys.idle

    def offers(n: int) -> Any:
        async def out() -> bool:
            return await redis.zcard(fast_idle) == n

        return out

    busy = app.worker(queues=["slow", "fast"], concurrency=1, idle_wait=30)
    spare = app.worker(queues=["fast"], concurrency=1, idle_wait=30)
    try:
        async with busy:
            await wait_until(offers(1))  # the busy worker's offer on "fast" is the older
            async with spare:
                await wait_until(offers(2))
                await slow.enqueue()

                async def slow_started() -> bool:
                    return "slow" in started

                await wait_until(slow_started)
                sent = loop.time()
                job = await fast.enqueue()
                await job.result(timeout=10)
                waited = started["fast"] - sent
                release.set()
    finally:
        release.set()
    assert waited < 0.5, f"the job waited {waited:.2f}s with a worker idle"


async def test_stop_is_not_held_by_a_withdrawal_retried_for_idle_wait(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A withdrawal retries for idle_wait + OFFER_MARGIN measured from its first attempt, and
    does not look at ``stopping``: with Redis failing the withdrawal, Worker.stop() waits
    that long (62 s at idle_wait=60). Here idle_wait=6: the stop took ~8 s."""
    real_idle = leasing.idle

    async def idle(redis: Redis, keys: QueueKeys, token: str, **kw: Any) -> list[Any]:
        if kw["hold_ms"] == 0:
            raise RedisConnectionError("Redis went away")
        return await real_idle(redis, keys, token, **kw)

    monkeypatch.setattr(leasing, "idle", idle)

    @app.task
    async def noop() -> None:
        return None

    redis = await app.client()
    keys = app.queue().keys
    worker = app.worker(idle_wait=6)
    await worker.start()

    async def offered() -> bool:
        return await redis.zcard(keys.idle) == 1

    await wait_until(offered)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await worker.stop()
    took = loop.time() - began
    assert took < 3, f"stop took {took:.1f}s"


def test_zero_padded_20_digit_ids_spread_over_the_done_slots() -> None:
    """A 20-character id starting with '0' is taken for a generated one, and its slot is
    read from characters 7 and 8: every zero-padded 64-bit number (f"{n:020d}", n < 10**12)
    lands in slot 0. Before the change they spread by a hash of their last six bytes."""
    slots = {done_slot(f"{n:020d}".encode()) for n in range(1000)}
    assert len(slots) > 100, f"1000 ids in {len(slots)} done slot(s)"


async def test_zero_padded_ids_keep_their_done_sets_small(app: aioqueue.App) -> None:
    """The same in Redis: 300 completed jobs with zero-padded ids (returning None) all
    landed in one done set, past the entries that keep it compact (an intset: 8 B a job;
    a hashtable entry costs several times that, and the set grows without bound for the
    whole idempotency window: one key deleted, blocking, when it expires)."""

    @app.task
    async def noop(n: int) -> None:
        return None

    for n in range(300):
        await noop.enqueue(n).options(id=f"{n:020d}")
    outcomes = await drain(app, concurrency=50)
    assert outcomes["complete"] == 300
    redis = await app.client()
    keys = app.queue().keys
    sets = [key async for key in redis.scan_iter(match=f"{keys.done_prefix}*")]
    sizes = [await redis.scard(key) for key in sets]
    assert sum(sizes) == 300
    assert max(sizes) <= 128, f"{len(sets)} done set(s), the largest {max(sizes)} ids"
