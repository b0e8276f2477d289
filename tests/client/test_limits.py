"""Flow control: a queue's concurrency cap and rate limit hold across every worker, inside
the take script (on fakeredis and Redis), and in running workers: held jobs wait in ready
in order, and a dead worker's jobs count until their leases expire."""

from __future__ import annotations

import asyncio
import math
from itertools import pairwise
from typing import Any

import pytest
from fakeredis.commands_mixins import server_mixin
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import HELD_BY_CONCURRENCY
from aioqueue.core.limits import make_limits, parse_rate
from aioqueue.store import memory
from aioqueue.store.scripts import leasing
from tests.helpers import now, plain_client, wait_until
from tests.store.script_helpers import lua_constant, put, take

# -- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "interval_ms"),
    [("100/s", 10.0), ("20/m", 3000.0), ("500/h", 7200.0), ("5/10s", 2000.0), (" 4 / ms ", 0.25)],
)
def test_rates_are_read_as_the_time_between_starts(rate: str, interval_ms: float) -> None:
    assert parse_rate(rate) == interval_ms


@pytest.mark.parametrize("rate", ["", "100", "100/d", "-1/s", "0/s", "1e3/s", "2000000/s", 5])
def test_bad_rates_raise(rate: object) -> None:
    with pytest.raises(aioqueue.ConfigError, match="rate"):
        parse_rate(rate)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options", [{"concurrency": 0}, {"concurrency": 1.5}, {"concurrency": True}, {"burst": 0}]
)
def test_bad_limits_raise(options: dict[str, object]) -> None:
    with pytest.raises(aioqueue.ConfigError):
        make_limits(**options)  # type: ignore[arg-type]


# -- inside the take script --------------------------------------------------------------


async def enqueue(db: Redis, keys: QueueKeys, job_id: str) -> bytes:
    await put(db, keys, job_id)
    return job_id.encode()


async def _limit(db: Redis, keys: QueueKeys, **options: object) -> None:
    fields = make_limits(**options).to_fields()  # type: ignore[arg-type]
    await db.hset(keys.limits, mapping=fields)  # type: ignore[arg-type]


# How late a start may be and keep its place in the schedule, as the scripts say.
GCRA_LATE_US = lua_constant("gcra", "GCRA_LATE_US")


async def _take(db: Redis, keys: QueueKeys, limit: int, lease: str) -> tuple[list[bytes], int]:
    result = await leasing.take(db, keys, lease=lease, lease_ms=30_000, limit=limit)
    return [job.id for job in result.jobs], result.held


async def test_the_concurrency_cap_counts_every_lease(db: Redis, keys: QueueKeys) -> None:
    ids = [await enqueue(db, keys, f"j{n}") for n in range(5)]
    await _limit(db, keys, concurrency=2)
    assert await _take(db, keys, 10, "a:1") == (ids[:2], HELD_BY_CONCURRENCY)
    assert await _take(db, keys, 10, "b:1") == ([], HELD_BY_CONCURRENCY)  # another worker
    await db.zrem(keys.active, ids[0])  # one ended (an ack, or reclaim of a dead worker's)
    assert await _take(db, keys, 10, "b:2") == ([ids[2]], HELD_BY_CONCURRENCY)
    await db.delete(keys.limits)
    assert await _take(db, keys, 10, "b:3") == (ids[3:], 0)  # in order, nothing skipped


async def test_the_rate_allows_a_burst_then_one_start_per_interval(
    db: Redis, keys: QueueKeys
) -> None:
    ids = [await enqueue(db, keys, f"j{n}") for n in range(6)]
    await _limit(db, keys, rate="1/m", burst=3)  # (one a minute: no start falls due here)
    result = await leasing.take(db, keys, lease="a:1", lease_ms=30_000, limit=10)
    taken, held = [job.id for job in result.jobs], result.held
    assert taken == ids[:3]
    assert held == math.ceil((result.promoted.now_us + 60_000_000) / 1000)  # a minute on
    assert await _take(db, keys, 10, "b:1") == ([], held)
    assert await take(db, keys, 0) == []  # (limit 0 takes nothing and is never held)
    assert (
        await db.llen(keys.ready_lists()[0])
        + sum([await db.llen(key) for key in keys.ready_lists()[1:]])
        == 3
    )  # the rest wait in ready


@pytest.mark.parametrize(("rate", "burst"), [("3/s", 1), ("30/s", 1), ("3000/s", 1), ("7/m", 3)])
async def test_a_quiet_queue_starts_its_whole_burst_whatever_the_interval(
    db: Redis, keys: QueueKeys, rate: str, burst: int
) -> None:
    """Intervals that are not whole milliseconds (333.33 ms): in epoch ms with fractions the
    GCRA lost a few 1e-4 ms and refused every start of a "3/s" limit."""
    ids = [await enqueue(db, keys, f"j{n}") for n in range(burst + 1)]
    await _limit(db, keys, rate=rate, burst=burst)
    taken, held = await _take(db, keys, 10, "a:1")
    assert taken == ids[:burst] and held > 0


class _TimeAhead:
    """``time`` as fakeredis's TIME reads it, ``ahead`` seconds past the clock the server's
    keys expire by: as a script's TIME is when the call started late (the server sampled
    its clock for expiry at the call's start)."""

    def __init__(self, clock: Any, ahead: float) -> None:
        self.clock, self.ahead = clock, ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(self.clock, name)

    def time(self) -> float:
        return float(self.clock.time()) + self.ahead


async def test_a_call_that_started_late_keeps_the_rate(prefix: str) -> None:
    """The rate's TAT outlives a call whose TIME reads later than its start: the key went
    that much early, and the next take started a fresh burst ahead of the rate (under load,
    on the in-process server, 7 starts within 53 ms at 40/s with a burst of 4)."""
    url = f"memory://{prefix}"
    db, keys = plain_client(url), QueueKeys.for_queue(prefix, "q")
    clock = server_mixin.time  # type: ignore[attr-defined]
    try:
        ids = [await enqueue(db, keys, f"j{n}") for n in range(3)]
        await _limit(db, keys, rate="40/s")  # a start every 25 ms, no burst
        server_mixin.time = _TimeAhead(clock, 0.1)  # type: ignore[attr-defined,assignment]
        try:  # this call's TIME reads 100 ms past its start
            assert (await _take(db, keys, 10, "a:1"))[0] == ids[:1]
        finally:
            server_mixin.time = clock  # type: ignore[attr-defined]
        memory.advance_clock(url, 0.05)  # the next start is due 75 ms from here
        taken, held = await _take(db, keys, 10, "a:2")
        assert taken == [] and held > 0  # held by the rate, until when it says
    finally:
        await db.aclose()
        memory.forget(prefix)


async def test_new_limits_start_afresh(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def work() -> None: ...

    queue, redis = app.queue("q"), await app.client()
    await queue.enqueue_many(work.enqueue() for _ in range(8))
    await queue.set_limits(rate="1/h")
    assert len((await _take(redis, queue.keys, 10, "a:1"))[0]) == 1
    await queue.set_limits(rate="100/s", burst=5)  # not an hour behind the old rate
    assert len((await _take(redis, queue.keys, 10, "a:2"))[0]) == 5


async def test_a_full_cap_with_nothing_ready_holds_nothing(db: Redis, keys: QueueKeys) -> None:
    """Held means "jobs wait in ready": with none, the worker blocks for work as usual
    instead of looking again ten times a second."""
    ids = [await enqueue(db, keys, f"j{n}") for n in range(2)]
    await _limit(db, keys, concurrency=2)
    assert await _take(db, keys, 10, "a:1") == (ids, 0)
    await enqueue(db, keys, "j2")
    assert await _take(db, keys, 10, "a:2") == ([], HELD_BY_CONCURRENCY)


async def test_no_limits_cost_nothing_and_hold_nothing(db: Redis, keys: QueueKeys) -> None:
    ids = [await enqueue(db, keys, f"j{n}") for n in range(3)]
    assert await _take(db, keys, 10, "a:1") == (ids, 0)
    assert await db.exists(keys.rate) == 0


async def test_a_take_woken_for_a_held_job_says_until_when(db: Redis, keys: QueueKeys) -> None:
    """The worker's BLPOP spent the job's notify token before its take was held: the take
    still says until when (it once said nothing, so the worker waited ``idle_wait``)."""
    await _limit(db, keys, rate="5/s")
    first = await enqueue(db, keys, "j0")
    assert await db.lpop(keys.notify) is not None  # the BLPOP that woke the worker
    started = await leasing.take(db, keys, lease="a:1", lease_ms=30_000, limit=10, woken=True)
    assert [job.id for job in started.jobs] == [first]
    await enqueue(db, keys, "j1")
    assert await db.lpop(keys.notify) is not None
    held = await leasing.take(db, keys, lease="a:2", lease_ms=30_000, limit=10, woken=True)
    assert held.jobs == []
    assert held.held == math.ceil((started.promoted.now_us + 200_000) / 1000)


async def test_a_late_start_keeps_its_place_in_the_rate(db: Redis, keys: QueueKeys) -> None:
    """A start that comes a little late (a worker's timer, a round trip) does not push the
    schedule back: the next is due one interval after the late one's due time. A start
    long after its due time (a quiet queue) starts the schedule afresh."""
    ids = [await enqueue(db, keys, f"j{n}") for n in range(8)]
    await _limit(db, keys, rate="10/s")  # 100 ms apart, burst 1
    for attempt, job_id in enumerate(ids[:6]):
        seconds, micros = await db.time()
        due = int(seconds) * 1_000_000 + int(micros) - 5_000  # due 5 ms ago
        await db.set(keys.rate, str(due))
        result = await leasing.take(db, keys, lease=f"a:{attempt}", lease_ms=30_000, limit=10)
        assert [job.id for job in result.jobs] == [job_id]
        if result.promoted.now_us - due < GCRA_LATE_US:  # (else a busy machine made it late)
            break
    else:
        pytest.fail("no take came within the late window")
    assert result.held == math.ceil((due + 100_000) / 1000)
    assert int(await db.get(keys.rate) or 0) == due + 100_000  # not now + 100 ms
    await db.set(keys.rate, str(due - 1_000_000))  # a second late: afresh
    result = await leasing.take(db, keys, lease="a:late", lease_ms=30_000, limit=10)
    assert [job.id for job in result.jobs] == ids[attempt + 1 : attempt + 2]
    assert int(await db.get(keys.rate) or 0) == result.promoted.now_us + 100_000


# -- in workers -------------------------------------------------------------------------


async def test_at_most_the_cap_run_at_once_across_workers(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    running, most, done = 0, 0, 0

    @app.task(queue="capped")
    async def work() -> None:
        nonlocal running, most, done
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        done += 1

    other = aioqueue.App(redis_url=redis_url, prefix=prefix)  # a second worker
    other.task(queue="capped", name="work")(work.fn)
    queue = app.queue("capped")
    limits = await queue.set_limits(concurrency=3)
    assert await queue.limits() == limits == aioqueue.QueueLimits(concurrency=3)
    try:
        await queue.enqueue_many(work.enqueue() for _ in range(40))
        async with app.worker(concurrency=10), other.worker(concurrency=10):
            await wait_until(lambda: now(done == 40), timeout=30)
        assert most <= 3  # (both workers' jobs count: they share this process's counter)
    finally:
        await other.close()


async def test_starts_never_outrun_the_rate(app: aioqueue.App, redis_url: str, prefix: str) -> None:
    """GCRA's promise, checked on the Redis clock's start times: any k consecutive starts
    span at least (k - burst) intervals."""

    @app.task(queue="paced")
    async def tick(n: int) -> int:
        return n  # (a result keeps the record, and its start time, after the job)

    other = aioqueue.App(redis_url=redis_url, prefix=prefix)
    other.task(queue="paced", name="tick")(tick.fn)
    queue = app.queue("paced")
    await queue.set_limits(rate="40/s", burst=4)  # 25 ms apart
    try:
        jobs = await queue.enqueue_many(tick.enqueue(n) for n in range(30))
        async with app.worker(concurrency=10), other.worker(concurrency=10):
            for job in jobs:
                await job.result(timeout=30)
        infos = [await job.info() for job in jobs]
        starts = sorted(info.started_at_ms for info in infos if info and info.started_at_ms)
        assert len(starts) == 30
        for k in range(5, 31):
            spans = [b - a for a, b in zip(starts, starts[k - 1 :], strict=False)]
            assert min(spans) >= (k - 4) * 25 - 1, f"{k} starts within {min(spans)} ms"
        assert all(b >= a for a, b in pairwise(starts))
    finally:
        await other.close()


async def test_a_job_held_by_the_rate_starts_when_the_rate_allows(app: aioqueue.App) -> None:
    """Not at the worker's next idle look (``idle_wait``, a minute here)."""

    @app.task(queue="paced")
    async def tick(n: int) -> int:
        return n

    await app.queue("paced").set_limits(rate="5/s")
    first = await tick.enqueue(0)
    async with app.worker(idle_wait=60):
        assert await first.result(timeout=10) == 0
        second = await tick.enqueue(1)  # within the interval: held back, then started
        assert await second.result(timeout=10) == 1


async def test_a_dead_workers_jobs_count_until_their_leases_expire(app: aioqueue.App) -> None:
    ran: list[str] = []

    @app.task(queue="one")
    async def work(name: str) -> None:
        ran.append(name)

    queue = app.queue("one")
    await queue.set_limits(concurrency=1)
    first = await work.enqueue("lost")
    redis = await app.client()
    # A worker that took it and died: its lease (300 ms) holds the one slot until reclaim.
    taken = await leasing.take(redis, queue.keys, lease="dead:1", lease_ms=300, limit=1)
    assert [job.id for job in taken.jobs] == [first.id.encode()]
    await work.enqueue("next")
    async with app.worker(concurrency=5):
        await wait_until(lambda: now(sorted(ran) == ["lost", "next"]), timeout=15)
    assert (await queue.counts()).active == 0


async def test_lifting_the_limits(app: aioqueue.App) -> None:
    queue = app.queue("q")
    await queue.set_limits(rate="5/s", burst=2, concurrency=4)
    assert await queue.limits() == aioqueue.QueueLimits(4, 200.0, 2)
    assert (await queue.limits()).rate_per_second == 5.0
    await queue.set_limits()
    assert await queue.limits() == aioqueue.QueueLimits()


async def test_a_worker_held_back_with_takes_in_flight_waits_without_spinning(
    app: aioqueue.App,
) -> None:
    """A burst large enough that the worker pipelines its takes, then the rate holds one
    back while others are out: the fetch loop waits for them (it once spun, freezing the
    event loop, so nothing ran and the worker could not even be stopped)."""
    done = 0

    @app.task(queue="bursty")
    async def work() -> None:
        nonlocal done
        done += 1

    queue = app.queue("bursty")
    await queue.set_limits(rate="20/s", burst=120)
    await queue.enqueue_many(work.enqueue() for _ in range(300))
    async with app.worker(concurrency=200):  # (takes of 50, up to 4 at once)
        await asyncio.wait_for(wait_until(lambda: now(done >= 125), timeout=20), 30)


async def test_with_strict_queue_order_a_held_queue_lets_the_next_ones_take(
    app: aioqueue.App,
) -> None:
    """A first queue at its concurrency cap has jobs ready but may start none: the queues
    after it take meanwhile (they once waited for it to run dry, idle slots and all)."""
    release = asyncio.Event()
    ran: list[str] = []

    @app.task(queue="first")
    async def slow(n: int) -> None:
        await release.wait()

    @app.task(queue="second")
    async def quick(n: int) -> None:
        ran.append(f"second-{n}")

    await app.queue("first").set_limits(concurrency=1)
    await app.queue("first").enqueue_many(slow.enqueue(n) for n in range(3))
    await app.queue("second").enqueue_many(quick.enqueue(n) for n in range(3))
    worker = app.worker(queues=["first", "second"], queue_order="strict", concurrency=10)
    async with worker:
        await wait_until(lambda: now(len(ran) == 3), timeout=10)
        release.set()


async def test_a_task_declares_its_queues_limits(app: aioqueue.App) -> None:
    """``@app.task(rate_limit=..., burst=..., max_concurrency=...)``: the worker writes them
    as the task's queue's limits when it starts (and leaves them if Redis has them)."""

    @app.task(queue="mail", rate_limit="50/s", burst=5, max_concurrency=3)
    async def send(n: int) -> int:
        return n

    queue = app.queue("mail")
    assert await queue.limits() == aioqueue.QueueLimits()
    async with app.worker(queues=["mail"]):
        limits = await queue.limits()
        assert (limits.concurrency, limits.rate_per_second, limits.burst) == (3, 50, 5)
        assert await (await send.enqueue(1)).result(timeout=10) == 1


def test_a_limited_task_must_have_its_queue_to_itself(app: aioqueue.App) -> None:
    @app.task(queue="mail")
    async def send() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="queue of its own"):

        @app.task(queue="mail", max_concurrency=2)
        async def bulk() -> None: ...

    @app.task(queue="sms", rate_limit="1/s")
    async def text() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="queue of its own"):

        @app.task(queue="sms")
        async def other() -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": "fast"}, "rate"),
        ({"max_concurrency": 0}, "concurrency"),
        ({"rate_limit": "1/s", "burst": 0}, "burst"),
    ],
)
def test_bad_task_limits_raise_at_the_decorator(
    app: aioqueue.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(aioqueue.ConfigError, match=message):

        @app.task(queue="limited", **options)
        async def send() -> None: ...
