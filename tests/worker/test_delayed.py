"""Delayed jobs: exact wake-ups, rescheduling, listing, many pollers, and clock skew."""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import sys
from collections import Counter
from collections.abc import Sized
from datetime import UTC, datetime, timedelta

import pytest

import aioqueue
from tests.helpers import wait_until


async def test_reschedule_earlier_wakes_the_poller(app: aioqueue.App) -> None:
    @app.task
    async def later() -> str:
        return "ran"

    job = await later.enqueue().options(delay=3600)
    async with app.worker():
        assert await job.status() is aioqueue.JobStatus.SCHEDULED
        assert await job.reschedule(delay=0.05) is True
        assert await job.result(timeout=5) == "ran"  # not an hour later
    assert await job.reschedule(delay=10) is False  # finished: nothing to move
    assert await app.queue().reschedule("no-such-job", delay=1) is False


async def test_reschedule_to_a_time_and_list_in_due_order(app: aioqueue.App) -> None:
    @app.task
    async def later(n: int) -> None: ...

    now = datetime.now(UTC)
    first = await later.enqueue(1).options(at=now + timedelta(hours=3))
    second = await later.enqueue(2).options(at=now + timedelta(hours=2))
    queued = await later.enqueue(3)
    assert await first.reschedule(at=now + timedelta(hours=1)) is True
    assert await queued.reschedule(delay=5) is False  # queued, not scheduled

    listed = await app.queue().scheduled()
    assert [job.id for job in listed] == [first.id, second.id]
    due = int((now + timedelta(hours=1)).timestamp() * 1000)
    assert listed[0].due_ms == due
    assert [job.id for job in await app.queue().scheduled(limit=1, offset=1)] == [second.id]


async def test_jobs_due_at_the_same_time_run_in_the_order_they_were_scheduled(
    app: aioqueue.App,
) -> None:
    """FIFO within a priority holds for promoted jobs too: ties on the due time (ms) keep
    the order in which the jobs were scheduled, whatever their ids."""
    ran: list[int] = []

    @app.task
    async def record(n: int) -> None:
        ran.append(n)

    at = datetime.now(UTC) + timedelta(seconds=0.3)
    for n in range(10):  # random ids: ordered by id, they would run shuffled
        await record.enqueue(n).options(at=at)
    same_ms = {job.due_ms for job in await app.queue().scheduled()}
    assert len(same_ms) == 1
    async with app.worker(concurrency=1):
        await wait_until(lambda: _ran(ran, 10))
    assert ran == list(range(10))


async def test_ties_stay_fifo_after_reschedule(app: aioqueue.App) -> None:
    ran: list[str] = []
    at = datetime.now(UTC) + timedelta(seconds=0.3)

    @app.task
    async def record(name: str) -> None:
        ran.append(name)

    names = "abcdefgh"
    jobs = [await record.enqueue(name).options(at=at + timedelta(hours=1)) for name in names]
    for job in reversed(jobs):  # moved in the order h .. a: that is their order now
        assert await job.reschedule(at=at) is True
    async with app.worker(concurrency=1):
        await wait_until(lambda: _ran(ran, len(names)))
    assert "".join(ran) == names[::-1]


async def _ran(ran: Sized, count: int) -> bool:
    return len(ran) >= count


async def test_many_pollers_promote_each_job_once(app: aioqueue.App) -> None:
    runs: Counter[int] = Counter()

    @app.task
    async def tick(n: int) -> None:
        runs[n] += 1

    for n in range(200):
        await tick.enqueue(n).options(delay=0.2 + n / 1000)
    workers = [app.worker(concurrency=20) for _ in range(3)]  # three pollers race
    for worker in workers:
        await worker.start()
    try:
        await wait_until(lambda: _total(runs, 200), timeout=10)
    finally:
        for worker in workers:
            await worker.stop()
    assert set(runs.values()) == {1}
    assert (await app.queue().counts()).scheduled == 0


def _libfaketime() -> str | None:
    """Debian's libfaketime; preloaded directly (the faketime wrapper does not pass on
    signals, so SIGTERM would orphan the worker)."""
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob(
        "/usr/lib/faketime/libfaketime.so.1"
    )
    return found[0] if found else None


@pytest.mark.real_redis("a worker process under faketime")
@pytest.mark.skipif(_libfaketime() is None, reason="needs Debian's faketime")
@pytest.mark.parametrize("skew", ["+1h", "-1h"])
async def test_a_skewed_worker_clock_neither_starts_jobs_early_nor_strands_them(
    redis_url: str, prefix: str, skew: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Due times and promotion use the Redis clock, so a worker host an hour off runs a
    delayed job on time: not early (clock ahead) and not an hour late (clock behind)."""
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", redis_url)
    env = {
        **os.environ, "TEST_PREFIX": prefix, "LD_PRELOAD": _libfaketime() or "",
        "FAKETIME": skew,
    }  # fmt: skip
    producer = aioqueue.App(redis_url=redis_url, prefix=prefix)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.clock_app:app",
        env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        job = await producer.queue().enqueue("stamp", "x").options(delay=1.0)
        info = await job.info()
        assert info.enqueued_at_ms is not None
        due_ms = info.enqueued_at_ms + 1000
        clocks = await job.result(timeout=20)  # an hour late would time out
    finally:
        worker.send_signal(signal.SIGTERM)
        assert await worker.wait() == 0
        await producer.close()
    offset_hours = (clocks["local_ms"] - clocks["redis_ms"]) / 3_600_000
    assert round(offset_hours) == (1 if skew == "+1h" else -1), "faketime was in force"
    assert clocks["redis_ms"] >= due_ms, "started before its due time"


async def _total(runs: Counter[int], count: int) -> bool:
    return sum(runs.values()) >= count


@pytest.mark.parametrize("due_first", [True, False])
async def test_due_delayed_jobs_can_go_ahead_of_the_backlog(
    redis_url: str, prefix: str, due_first: bool
) -> None:
    """With ``App(due_first=...)`` a delayed job that falls due runs next, not behind a
    backlog of its own priority level; by default it waits its turn (FIFO)."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, due_first={"q"} if due_first else ())
    ran: list[str] = []
    timed: list[aioqueue.Job[None]] = []

    @app.task(queue="q")
    async def step(tag: str) -> None:
        ran.append(tag)
        if tag == "backlog0":  # the backlog is still there when the timed job falls due
            # (enqueued here, not before the worker starts: on a busy machine the worker
            # could start after it fell due, and run it first)
            timed.append(await step.enqueue("timed").options(delay=0.1))
            await wait_until(lambda: _promoted(timed[0]), timeout=10)

    try:
        await app.queue("q").enqueue_many(step.enqueue(f"backlog{n}") for n in range(100))
        async with app.worker(concurrency=1):
            await wait_until(lambda: _ran(ran, 101), timeout=10)
    finally:
        await app.close()
    assert ran.index("timed") == (1 if due_first else 100)


async def _promoted(job: aioqueue.Job[None]) -> bool:
    return await job.status() is not aioqueue.JobStatus.SCHEDULED
