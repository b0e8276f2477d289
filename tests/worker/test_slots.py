"""The worker's slots and lookahead, and the one-timer deadlines (units), then jobs taken
ahead of a free slot inside a real worker: they start in order, end cancelled when
aborted, and go back to ready when they wait too long or the worker stops."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import Taken
from aioqueue.worker import slots as slots_module
from aioqueue.worker.acks import AckBatcher
from aioqueue.worker.deadlines import Deadlines
from aioqueue.worker.inflight import InFlight
from aioqueue.worker.runner import RunEnv
from aioqueue.worker.running import Interrupt, RunningJob
from aioqueue.worker.slots import Slots
from tests.helpers import counts, wait_until

# -- Slots --------------------------------------------------------------------------------


async def test_jobs_beyond_the_free_slots_wait_and_start_in_order() -> None:
    started: list[str] = []
    slots: Slots[str] = Slots(2, started.append)
    slots.lookahead = 2
    assert slots.reserve(10) == 4  # two slots and a lookahead of two
    for job in "abcd":
        slots.admit(job)
    assert (started, slots.running, slots.waiting, slots.room) == (["a", "b"], 2, 2, 0)
    slots.end()
    assert (started, slots.running, slots.waiting) == (["a", "b", "c"], 2, 1)
    slots.end()
    slots.end()
    assert (started, slots.running, slots.waiting, slots.ended) == (["a", "b", "c", "d"], 1, 0, 3)


async def test_a_quiet_queue_may_take_one_job_past_a_full_worker() -> None:
    """reserve_beyond: one job past the capacity (for a queue with nothing in hand, the
    consumer's rule), only while the worker takes ahead at all: a worker of long jobs has
    no lookahead and holds none it cannot start soon. The job waits in order for a slot."""
    started: list[str] = []
    slots: Slots[str] = Slots(1, started.append)
    assert slots.reserve(5) == 1
    slots.admit("busy-1")
    assert slots.room == 0 and slots.reserve_beyond() == 0  # no lookahead: long jobs
    slots.lookahead = 1
    assert slots.reserve(5) == 1
    slots.admit("busy-2")
    assert slots.room == 0 and slots.reserve_beyond() == 1
    slots.admit("quiet")
    assert (started, slots.waiting) == (["busy-1"], 2)
    slots.end()
    slots.end()
    assert started == ["busy-1", "busy-2", "quiet"]
    slots.stop_starting()
    assert slots.reserve_beyond() == 0


async def test_unreserved_room_comes_back() -> None:
    slots: Slots[str] = Slots(3, lambda job: None)
    assert slots.reserve(5) == 3
    assert slots.reserve(1) == 0
    slots.unreserve(2)  # a take came back with one job
    slots.admit("a")
    assert (slots.running, slots.room) == (1, 2)


async def test_lookahead_follows_the_rate_at_which_jobs_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    slots: Slots[str] = Slots(100, lambda job: None)
    slots.size_lookahead(0.001)  # starts the first measuring window
    slots.reserve(100)
    for _ in range(100):
        slots.admit("job")
    for _ in range(50):
        slots.end()
    now[0] += 0.010  # 50 jobs ended in 10 ms: 5,000/s, i.e. 10 per 2 ms round trip
    slots.size_lookahead(0.002)
    assert slots.lookahead == 20  # twice what ends during one round trip
    now[0] += 3600.0  # an hour, nothing ended: long jobs, take nothing ahead
    slots.size_lookahead(0.002)
    assert slots.lookahead == 0
    for _ in range(50):
        slots.end()
    now[0] += 0.001  # shorter than the measuring window: no new estimate yet
    slots.size_lookahead(0.002)
    assert slots.lookahead == 0


async def test_waiting_jobs_can_be_taken_back_by_match_or_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slots: Slots[str] = Slots(1, lambda job: None, max_wait=0.5)
    slots.lookahead = 1
    slots.reserve(3)
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)
    for job in ("running", "old"):
        slots.admit(job)
    monkeypatch.setattr(time, "monotonic", lambda: now + 0.4)
    slots.admit("young")
    assert slots.take_waiting(lambda job: job == "young") == ["young"]
    assert slots.take_stale() == []
    monkeypatch.setattr(time, "monotonic", lambda: now + 0.6)
    assert slots.take_stale() == ["old"]
    assert (slots.waiting, slots.lookahead) == (0, 0)  # jobs got slow: no more lookahead
    monkeypatch.undo()  # (the event loop's clock too: before it runs again)


# -- Deadlines ----------------------------------------------------------------------------


@dataclass(eq=False)
class Timed:
    """A job as its owner keeps it for Deadlines: its deadline while watched."""

    name: str
    deadline: float | None = None


def watch(deadlines: Deadlines[Timed], job: Timed, deadline: float) -> None:
    job.deadline = deadline  # (what the owner does)
    deadlines.watch(job, deadline)


def unwatch(deadlines: Deadlines[Timed], job: Timed) -> None:
    job.deadline = None
    deadlines.unwatch(job)


async def test_deadlines_report_only_overdue_jobs() -> None:
    due: list[str] = []
    reported = asyncio.Event()

    def on_due(job: Timed) -> None:
        due.append(job.name)
        reported.set()

    deadlines: Deadlines[Timed] = Deadlines(on_due)
    first, finished, later = Timed("first"), Timed("finished"), Timed("later")
    loop = asyncio.get_running_loop()
    watch(deadlines, first, loop.time() + 0.05)
    watch(deadlines, finished, loop.time() + 0.05)
    watch(deadlines, later, loop.time() + 60)
    unwatch(deadlines, finished)  # finished in time
    await asyncio.wait_for(reported.wait(), 5)
    assert due == ["first"]  # (the finished one, due as early, was looked at in that pass)


async def test_a_deadline_cancels_its_handler_through_the_owner() -> None:
    """The owner hears of the deadline and cancels the job's handler with its reason."""
    inflight = InFlight(RunEnv(lambda name: None), concurrency=1)
    acks = AckBatcher(Redis(), QueueKeys.for_queue("p", "q"), result_ttl_ms=0)
    jobs = [RunningJob(Taken(str(n).encode(), b"{}", 1, 1, "lease"), acks) for n in range(2)]
    never = asyncio.Event()
    handles = [asyncio.create_task(_wait(never)) for _ in jobs]
    for job, handle in zip(jobs, handles, strict=True):
        job.handle, job.begun = handle, True
    inflight.time_out(jobs[0])
    await asyncio.wait_for(asyncio.wait([handles[0]]), 5)
    assert handles[0].cancelled() and not handles[1].done()
    assert [job.interrupt for job in jobs] == [Interrupt.TIMEOUT, None]
    handles[1].cancel()


async def _wait(event: asyncio.Event) -> None:
    await event.wait()


async def test_deadlines_of_finished_jobs_do_not_pile_up() -> None:
    deadlines: Deadlines[Timed] = Deadlines(lambda job: None)
    loop = asyncio.get_running_loop()
    for n in range(10_000):
        job = Timed(str(n))
        watch(deadlines, job, loop.time() + 300)
        unwatch(deadlines, job)
    assert len(deadlines._heap) < 100  # rebuilt without the finished ones as it grows


# -- jobs taken ahead inside a worker -----------------------------------------------------


@pytest.fixture
def take_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every worker take one job beyond its free slots, whatever the job rate."""

    def one_ahead(self: Slots[Any], round_trip: float) -> None:
        self.lookahead = 1

    monkeypatch.setattr(Slots, "size_lookahead", one_ahead)


@pytest.mark.usefixtures("take_ahead")
async def test_a_job_waiting_for_a_slot_can_be_cancelled(app: aioqueue.App) -> None:
    release = asyncio.Event()
    ran: list[int] = []

    @app.task(queue="q")
    async def gated(n: int) -> None:
        ran.append(n)
        await release.wait()

    first, second = await gated.enqueue(1), await gated.enqueue(2)
    async with app.worker(concurrency=1) as worker:
        await wait_until(lambda: _is_active(second))  # leased, waiting behind the first
        assert ran == [1]
        assert await second.cancel() is True
        await wait_until(lambda: _is(second, aioqueue.JobStatus.CANCELLED))
        release.set()
        await wait_until(lambda: _is(first, aioqueue.JobStatus.COMPLETE))
        assert worker.outcomes == {"abort": 1, "complete": 1}
    assert ran == [1]  # the cancelled job never started


@pytest.mark.usefixtures("take_ahead")
async def test_a_job_waiting_too_long_goes_back_to_ready(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots_module, "MAX_WAIT", 0.2)
    release = asyncio.Event()

    @app.task(queue="q")
    async def gated(n: int) -> None:
        await release.wait()

    await gated.enqueue(1)
    second = await gated.enqueue(2)
    async with app.worker(concurrency=1) as worker:
        await wait_until(lambda: _is_active(second))
        await wait_until(lambda: _is(second, aioqueue.JobStatus.QUEUED))  # handed back
        assert worker.outcomes["release"] >= 1
        info = await second.info()
        assert info.attempts == 0  # never started: the attempt does not count
        release.set()
        await wait_until(lambda: _is(second, aioqueue.JobStatus.COMPLETE))


@pytest.mark.usefixtures("take_ahead")
async def test_shutdown_puts_waiting_jobs_back_at_once(app: aioqueue.App) -> None:
    started = asyncio.Event()

    @app.task(queue="q", timeout=60)
    async def stuck(n: int) -> None:
        started.set()
        await asyncio.Event().wait()

    first, second = await stuck.enqueue(1), await stuck.enqueue(2)
    async with app.worker(concurrency=1, grace=0.1, lease=30) as worker:
        await asyncio.wait_for(started.wait(), 5)
        await wait_until(lambda: _is_active(second))
    assert worker.outcomes == {"release": 2}
    assert await app.queue("q").counts() == counts(ready=2)
    assert [(await job.info()).attempts for job in (first, second)] == [0, 0]


async def _is(job: aioqueue.Job[Any], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


async def _is_active(job: aioqueue.Job[Any]) -> bool:
    return await _is(job, aioqueue.JobStatus.ACTIVE)


async def test_jobs_the_promoter_takes_respect_the_concurrency_limit(app: aioqueue.App) -> None:
    running = peak = done = 0
    permits = asyncio.Semaphore(0)

    @app.task(queue="q")
    async def gated(n: int) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await permits.acquire()
        running -= 1
        done += 1

    async with app.worker(concurrency=2) as worker:
        for n in range(5):  # due together, while the worker idles: its promoter takes them
            await gated.enqueue(n).options(delay=0.2)

        async def two_running() -> bool:
            return running == 2

        await wait_until(two_running)
        for _ in range(5):
            permits.release()

        async def all_done() -> bool:
            return done == 5

        await wait_until(all_done)
        assert worker.outcomes["complete"] == 5
    assert peak == 2
