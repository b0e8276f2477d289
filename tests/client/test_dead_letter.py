"""The dead-letter set: list, inspect, requeue and purge dead jobs (DESIGN.md §4)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.store.scripts import admin
from tests.helpers import counts, drain, run_until_idle


class Broken:
    """A switch standing for the cause of failures, fixed between runs."""

    def __init__(self) -> None:
        self.on = True
        self.calls: list[str] = []


@pytest.fixture
def broken() -> Broken:
    return Broken()


@pytest.fixture
def flaky(app: aioqueue.App, broken: Broken) -> aioqueue.Task[[str], str]:
    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0))
    async def flaky(tag: str) -> str:
        broken.calls.append(tag)
        if broken.on:
            raise ValueError(f"broken for {tag}")
        return f"fixed {tag}"

    return flaky


async def bury(app: aioqueue.App, task: aioqueue.Task[[str], str], *tags: str) -> list[str]:
    """Enqueue one job per tag (ids = tags) and run them until they are dead."""
    for tag in tags:
        await task.enqueue(tag).options(id=tag)
    outcomes = await drain(app)
    assert outcomes == {"retry": len(tags), "bury": len(tags)}
    return list(tags)


async def test_dead_jobs_are_listed_with_error_attempts_and_timestamps(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], broken: Broken
) -> None:
    await bury(app, flaky, "a", "b")
    assert sorted(broken.calls) == ["a", "a", "b", "b"]

    queue = app.queue("q")
    assert await queue.counts() == counts(dead=2)
    dead = await queue.dead_jobs()
    assert sorted(info.id for info in dead) == ["a", "b"]
    for info in dead:
        assert info.status is aioqueue.JobStatus.DEAD
        assert info.queue == "q"
        assert info.task == "flaky"
        assert list(info.args) == [info.id]
        assert info.attempts == 2
        assert info.max_attempts == 2
        assert info.error is not None
        assert info.error.type == "ValueError"
        assert info.error.message == f"broken for {info.id}"
        assert "ValueError" in info.error.traceback
        assert "flaky" in info.error.traceback
        assert info.raw is None  # a real job, not a poison entry
        assert info.enqueued_at_ms is not None
        assert info.started_at_ms is not None
        assert info.finished_at_ms is not None
        assert info.enqueued_at_ms <= info.started_at_ms <= info.finished_at_ms

    # Pagination: oldest first, limit and offset.
    first, second = await queue.dead_jobs(limit=1), await queue.dead_jobs(limit=1, offset=1)
    assert [info.id for info in first + second] == [info.id for info in dead]
    assert await queue.dead_jobs(offset=2) == []


async def test_requeue_one_by_id_then_all(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], broken: Broken
) -> None:
    await bury(app, flaky, "a", "b", "c")
    queue = app.queue("q")

    assert await queue.requeue_dead(["b"]) == 1
    assert await queue.counts() == counts(ready=1, dead=2)
    info = await queue.job("b").info()
    assert info.status is aioqueue.JobStatus.QUEUED
    assert info.attempts == 0  # a fresh set of attempts
    assert sorted(info.id for info in await queue.dead_jobs()) == ["a", "c"]

    assert await queue.requeue_dead(["b"]) == 0  # not dead any more
    assert await queue.requeue_dead(["no-such-job"]) == 0

    assert await queue.requeue_dead() == 2
    assert await queue.counts() == counts(ready=3)
    assert await queue.dead_jobs() == []


async def test_requeued_job_runs_and_completes_once_the_cause_is_fixed(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], broken: Broken
) -> None:
    await bury(app, flaky, "a", "b")
    queue = app.queue("q")
    broken.on = False
    broken.calls.clear()

    assert await queue.requeue_dead(["a"]) == 1
    outcomes = await drain(app)
    assert outcomes == {"complete": 1}
    assert broken.calls == ["a"]
    job = queue.job("a")
    assert await job.result(timeout=1) == "fixed a"
    info = await job.info()
    assert info.status is aioqueue.JobStatus.COMPLETE
    assert info.attempts == 1
    assert await queue.counts() == counts(dead=1)  # "b" is still dead
    assert await queue.job("b").status() is aioqueue.JobStatus.DEAD


async def test_requeued_job_that_fails_again_is_dead_again(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], broken: Broken
) -> None:
    await bury(app, flaky, "a")
    queue = app.queue("q")
    broken.calls.clear()
    assert await queue.requeue_dead() == 1
    assert await drain(app) == {"retry": 1, "bury": 1}  # the full set of attempts again
    assert broken.calls == ["a", "a"]
    (info,) = await queue.dead_jobs()
    assert info.id == "a"
    assert info.attempts == 2


async def test_purge_removes_dead_records(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], redis: Redis
) -> None:
    await bury(app, flaky, "a", "b", "c")
    queue = app.queue("q")

    assert await queue.purge_dead(["a"]) == 1
    assert await queue.purge_dead(["a"]) == 0
    assert not await redis.exists(queue.keys.job("a"))
    with pytest.raises(aioqueue.JobNotFound):
        await queue.job("a").info()
    assert await queue.counts() == counts(dead=2)

    assert await queue.purge_dead() == 2
    assert await queue.counts() == counts()
    assert await queue.dead_jobs() == []
    for job_id in ("b", "c"):
        assert not await redis.exists(queue.keys.job(job_id))


async def test_enqueueing_a_dead_id_returns_the_dead_job_and_requeue_revives_it(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], broken: Broken
) -> None:
    """An id is an idempotency key: enqueueing it again does not resurrect a dead job
    (requeue_dead does), and nothing live is left for purge to delete by mistake."""
    await bury(app, flaky, "a")
    queue = app.queue("q")
    again = await flaky.enqueue("a").options(id="a")
    assert not again.created
    assert await again.status() is aioqueue.JobStatus.DEAD
    assert await queue.counts() == counts(dead=1)

    assert await queue.requeue_dead(["a"]) == 1
    assert await again.status() is aioqueue.JobStatus.QUEUED
    broken.on = False
    assert await drain(app) == {"complete": 1}
    assert await again.result(timeout=1) == "fixed a"
    assert await queue.counts() == counts()


async def test_poison_entries_cannot_be_requeued(
    app: aioqueue.App, flaky: aioqueue.Task[[str], str], redis: Redis
) -> None:
    queue = app.queue("q")
    await redis.rpush(queue.keys.ready(5), b"\xff\xfe", b"not-a-job")
    await bury(app, flaky, "real")
    dead = await queue.dead_jobs()
    poison = sorted(info.id for info in dead if info.raw is not None)
    assert len(poison) == 2
    assert all(info.error and info.error.type == "PoisonEntry" for info in dead if info.raw)

    assert await queue.requeue_dead(poison) == 0
    assert await queue.requeue_dead() == 1  # only the real job
    assert await queue.counts() == counts(ready=1, dead=2)
    still_dead = await queue.dead_jobs()
    assert sorted(info.id for info in still_dead) == poison
    assert sorted(info.raw or b"" for info in still_dead) == [b"not-a-job", b"\xff\xfe"]

    # Poison entries can be purged like any dead job.
    assert await queue.purge_dead(poison) == 2
    assert await queue.counts() == counts(ready=1)


async def test_dead_set_retention_by_count_and_age(redis_url: str, prefix: str) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, dead_max_jobs=3, dead_ttl=3600)

    @app.task(retries=0)
    async def doomed(n: int) -> None:
        raise ValueError(n)

    jobs = [await doomed.enqueue(n) for n in range(5)]
    worker = await run_until_idle(app)  # buries all five; trims when it stops
    assert worker.outcomes["bury"] == 5
    queue = app.queue()
    assert len(await queue.dead_jobs()) == 3
    assert (await queue.counts()).dead == 3
    kept = {info.id for info in await queue.dead_jobs()}
    gone = [job.id for job in jobs if job.id not in kept]
    assert [await queue.info(job_id) for job_id in gone] == [None, None], "with their records"

    redis = await app.client()
    oldest, *younger = sorted(kept)
    await redis.zadd(queue.keys.dead, {oldest: 1})  # buried in 1970: past the age limit
    trimmed = await admin.trim_dead(redis, queue.keys, max_jobs=3, max_age_ms=3_600_000, limit=100)
    assert trimmed == 1
    assert {info.id for info in await queue.dead_jobs()} == set(younger)
    await app.close()


async def test_requeue_and_purge_filtered_by_task_and_error(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def fails_value() -> None:
        raise ValueError("v")

    @app.task(retries=0)
    async def fails_key() -> None:
        raise KeyError("k")

    values = [await fails_value.enqueue() for _ in range(2)]
    keys = [await fails_key.enqueue() for _ in range(2)]
    await run_until_idle(app)
    queue = app.queue()
    assert (await queue.counts()).dead == 4

    assert await queue.requeue_dead(error_type="KeyError") == 2
    assert {job.id for job in keys} == {
        job.id for job in keys if await job.status() is aioqueue.JobStatus.QUEUED
    }
    assert await queue.requeue_dead(task="no_such_task") == 0
    assert await queue.purge_dead(task="fails_value") == 2
    assert [await queue.info(job.id) for job in values] == [None, None]
    assert (await queue.counts()).dead == 0


async def test_find_dead_lists_what_a_filtered_requeue_would_take(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def fails_value() -> None:
        raise ValueError("v")

    @app.task(retries=0)
    async def fails_key() -> None:
        raise KeyError("k")

    values = [await fails_value.enqueue() for _ in range(2)]
    keys = [await fails_key.enqueue() for _ in range(2)]
    await run_until_idle(app)
    queue = app.queue()

    assert [info.id for info in await queue.find_dead()] == [
        info.id for info in await queue.dead_jobs()
    ]
    assert {info.id for info in await queue.find_dead(task="fails_value")} == {
        job.id for job in values
    }
    found = await queue.find_dead(error_type="KeyError", task="fails_key")
    assert {info.id for info in found} == {job.id for job in keys}
    assert await queue.find_dead(error_type="KeyError", task="fails_value") == []
    assert len(await queue.find_dead(limit=1)) == 1
    assert await queue.requeue_dead(error_type="KeyError") == len(found)
