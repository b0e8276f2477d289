"""Per-key ordering: ``.options(group=key)``. Jobs of one group run one at a time in enqueue
order, across every worker; different groups run in parallel; a failing job keeps its
group until it succeeds or fails for good; a cancelled one lets the group go on."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue import JobStatus
from tests.helpers import now, wait_until


async def test_one_at_a_time_in_order_across_workers(app: aioqueue.App, redis: Redis) -> None:
    running: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    order: dict[str, list[int]] = defaultdict(list)

    @app.task
    async def step(group: str, n: int) -> None:
        running[group] += 1
        most[group] = max(most[group], running[group])
        order[group].append(n)
        await asyncio.sleep(0.002)
        running[group] -= 1

    for n in range(20):
        for group in ("a", "b", "c"):
            await step.enqueue(group, n).options(group=group)
    async with app.worker(concurrency=10), app.worker(concurrency=10):
        await wait_until(lambda: now(sum(map(len, order.values())) == 60), timeout=20)
    assert dict(order) == {group: list(range(20)) for group in "abc"}
    assert dict(most) == {"a": 1, "b": 1, "c": 1}
    assert not await redis.hlen(app.queue().keys.groups)  # every group let go


async def test_different_groups_run_in_parallel(app: aioqueue.App) -> None:
    b_started = asyncio.Event()

    @app.task
    async def a() -> str:
        await asyncio.wait_for(b_started.wait(), 10)  # would time out if groups ran serially
        return "a"

    @app.task
    async def b() -> str:
        b_started.set()
        return "b"

    job_a = await a.enqueue().options(group="one")
    job_b = await b.enqueue().options(group="two")
    async with app.worker(concurrency=2):
        assert [await job_a.result(timeout=15), await job_b.result(timeout=15)] == ["a", "b"]


async def test_a_retried_job_keeps_its_group_until_it_succeeds(app: aioqueue.App) -> None:
    events: list[str] = []

    @app.task(retries=3, backoff=aioqueue.Fixed(0.1))
    async def flaky(name: str) -> None:
        attempt = aioqueue.current_job().attempt
        events.append(f"{name}#{attempt}")
        if name == "first" and attempt < 3:
            raise RuntimeError("not yet")

    first = await flaky.enqueue("first").options(group="g")
    second = await flaky.enqueue("second").options(group="g")
    assert await second.status() is JobStatus.WAITING
    async with app.worker(concurrency=4):
        await second.result(timeout=15)
    assert await first.status() is JobStatus.COMPLETE
    assert events == ["first#1", "first#2", "first#3", "second#1"]


async def test_a_job_that_fails_for_good_lets_the_group_go_on(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def broken() -> None:
        raise RuntimeError("for good")

    @app.task
    async def fine() -> str:
        return "fine"

    dead = await broken.enqueue().options(group="g")
    after = await fine.enqueue().options(group="g")
    async with app.worker():
        assert await after.result(timeout=10) == "fine"
    assert await dead.status() is JobStatus.DEAD


@pytest.mark.parametrize("which", ["holder", "waiting"])
async def test_a_cancelled_job_lets_the_group_go_on(app: aioqueue.App, which: str) -> None:
    ran: list[int] = []

    @app.task
    async def step(n: int) -> int:
        ran.append(n)
        return n

    jobs = [await step.enqueue(n).options(group="g") for n in range(3)]
    victim = jobs[0] if which == "holder" else jobs[1]
    assert await victim.cancel()
    async with app.worker():
        await jobs[2].result(timeout=10)
    assert ran == [n for n in range(3) if jobs[n] is not victim]
    assert await victim.status() in (JobStatus.CANCELLED, None)


async def test_a_delayed_job_keeps_its_place(app: aioqueue.App) -> None:
    ran: list[str] = []

    @app.task
    async def step(name: str) -> None:
        ran.append(name)

    await step.enqueue("later").options(group="g", delay=0.3)
    last = await step.enqueue("after").options(group="g")
    async with app.worker():
        await last.result(timeout=10)
    assert ran == ["later", "after"]


async def test_enqueue_many_keeps_group_order(app: aioqueue.App) -> None:
    ran: list[int] = []

    @app.task
    async def step(n: int) -> None:
        ran.append(n)

    jobs = await app.queue().enqueue_many(step.enqueue(n).options(group="g") for n in range(50))
    assert [await job.status() for job in jobs[:2]] == [JobStatus.QUEUED, JobStatus.WAITING]
    async with app.worker(concurrency=20):
        await jobs[-1].result(timeout=10)
    assert ran == list(range(50))


async def test_a_group_held_by_a_vanished_job_is_repaired(app: aioqueue.App, redis: Redis) -> None:
    """A holder whose record went (deleted by hand, evicted) does not block its group for
    ever: the next enqueue of the group takes it over."""

    @app.task
    async def step(n: int) -> int:
        return n

    queue = app.queue()
    first = await step.enqueue(1).options(group="g")
    await redis.delete(queue.keys.job(first.id))
    second = await step.enqueue(2).options(group="g")
    assert await second.status() is JobStatus.QUEUED
    async with app.worker():
        assert await second.result(timeout=10) == 2


@pytest.mark.parametrize("group", ["", 5, "x" * 201])
def test_a_bad_group_raises_where_written(app: aioqueue.App, group: object) -> None:
    @app.task
    async def step() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="group"):
        step.enqueue().options(group=group)  # type: ignore[arg-type]


def test_a_debounced_call_cannot_have_a_group(app: aioqueue.App) -> None:
    @app.task
    async def step() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="group"):
        step.enqueue().options(id="k", debounce=1, group="g")


async def test_counts_say_how_many_jobs_wait(app: aioqueue.App) -> None:
    """``counts().waiting``: jobs behind their group (and workflow parents), kept by the
    scripts as jobs start waiting and stop: made ready, cancelled, or closed."""

    @app.task
    async def step(n: int) -> int:
        return n

    queue = app.queue()
    jobs = [await step.enqueue(n).options(group="g") for n in range(4)]
    assert (await queue.counts()).waiting == 3
    assert await jobs[2].cancel()
    assert (await queue.counts()).waiting == 2
    async with app.worker():
        await jobs[3].result(timeout=10)
    assert (await queue.counts()).waiting == 0
