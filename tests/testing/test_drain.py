"""``drain`` and ``run_jobs``: what was enqueued runs, what it enqueues runs, and each job's
outcome comes back; on both backends (the suite's ``app``), and on memory:// without
waiting for retries."""

from __future__ import annotations

import itertools

import pytest

import aioqueue
from aioqueue import chain, chord
from aioqueue.testing import drain, run_jobs
from tests.helpers import redis_ms


async def test_drain_runs_what_was_enqueued_and_what_that_enqueued(app: aioqueue.App) -> None:
    followed: list[str] = []

    @app.task
    async def sign_up(email: str) -> str:
        await welcome.enqueue(email)
        return email.upper()

    @app.task(queue="mail")
    async def welcome(email: str) -> None:
        followed.append(email)

    jobs = [await sign_up.enqueue(email) for email in ("ada@x", "bob@x")]
    ran = await drain(app)
    assert followed == ["ada@x", "bob@x"]
    assert ran.outcomes == {"complete": 4}
    assert [(job.task, job.queue) for job in ran.of(welcome)] == [("welcome", "mail")] * 2
    assert ran[jobs[0]].ok and ran[jobs[0].id].attempts == 1
    assert [await job.result(timeout=1) for job in jobs] == ["ADA@X", "BOB@X"]
    assert (await drain(app)).outcomes == {}  # nothing left


async def test_a_chain_and_a_chord_across_queues_run_to_their_last_step(
    app: aioqueue.App,
) -> None:
    @app.task(queue="fetch")
    async def size(text: str) -> int:
        return len(text)

    @app.task
    async def total(sizes: list[int], label: str) -> str:
        return f"{label}: {sum(sizes)}"

    @app.task(queue="fetch")
    async def shout(summary: str) -> str:
        return summary.upper()

    workflow = await chain(
        chord([size.enqueue(word) for word in ("a", "bb", "ccc")], total.callback("bytes")),
        shout.callback(),
    )
    ran = await drain(app)
    assert ran.outcomes == {"complete": 5}
    assert await workflow.result(timeout=1) == "BYTES: 6"


async def test_retries_run_to_the_end_and_a_dead_job_says_so(app: aioqueue.App) -> None:
    calls: list[str] = []

    @app.task(retries=2, backoff=aioqueue.Fixed(0.05))
    async def flaky(name: str) -> str:
        calls.append(name)
        if name == "never" or calls.count(name) < 3:
            raise ValueError(f"{name} failed")
        return name

    ok, dead = await flaky.enqueue("ok"), await flaky.enqueue("never")
    ran = await drain(app)
    assert (ran[ok].outcome, ran[ok].attempts) == ("complete", 3)
    assert (ran[dead].outcome, ran[dead].attempts) == ("bury", 3)
    assert ran.outcomes == {"complete": 1, "bury": 1}
    with pytest.raises(aioqueue.JobFailed, match="never failed"):
        await dead.result(timeout=1)


async def test_a_delayed_job_is_left_for_its_time(app: aioqueue.App) -> None:
    @app.task
    async def later() -> None: ...

    job = await later.enqueue().options(delay=3600)
    assert job not in await drain(app)
    assert await job.status() is aioqueue.JobStatus.SCHEDULED


async def test_run_jobs_runs_the_queues_it_is_given(app: aioqueue.App) -> None:
    @app.task(queue="a")
    async def on_a() -> None: ...

    @app.task(queue="b")
    async def on_b() -> None: ...

    first, second = await on_a.enqueue(), await on_b.enqueue()
    assert list(await run_jobs(app, queues=["b"])) == [second.id]
    assert await first.status() is aioqueue.JobStatus.QUEUED
    assert list(await run_jobs(app, queues=["a"])) == [first.id]


async def test_on_memory_a_long_backoff_does_not_hold_up_a_drain(
    aioqueue_app: aioqueue.App,
) -> None:
    """The server's clock moves to each retry's due time: an hour's backoff, no wait."""
    app = aioqueue_app
    attempts: list[int] = []

    @app.task(retries=3, backoff=aioqueue.Fixed(3600))
    async def flaky() -> int:
        attempts.append(await redis_ms(await app.client()))
        if len(attempts) < 3:
            raise aioqueue.Retry()
        return len(attempts)

    job = await flaky.enqueue()
    ran = await drain(app)
    assert ran[job].outcome == "complete"
    assert await job.result(timeout=1) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert len(gaps) == 2 and min(gaps) >= 3_600_000
