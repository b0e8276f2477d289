"""Pages of jobs picked by what they are: a task's jobs in any list, the retrying ones,
the complete ones that kept a record (newest first); each page bounded by how much of
its list it reads, and saying whether it read it all."""

from __future__ import annotations

import aioqueue
from tests.helpers import drain


async def test_a_task_filter_works_on_every_list(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def send(n: int) -> int:
        return n

    @app.task(queue="q")
    async def other(n: int) -> int:
        return n

    queue = app.queue("q")
    sent = [await send.enqueue(n) for n in range(5)]
    for n in range(5):
        await other.enqueue(n)
    page = await queue.find_jobs("ready", task="send", limit=2, offset=1)
    assert [info.id for info in page.jobs] == [job.id for job in sent[1:3]]
    assert [info.id for info in await queue.jobs("ready", task="other")] != []
    last = await queue.find_jobs("ready", task="send", limit=10)
    assert len(last.jobs) == 5 and last.exhausted and last.scanned == 10
    later = await send.enqueue(9).options(delay=600)
    assert [i.id for i in await queue.jobs("scheduled", task="send")] == [later.id]
    assert await queue.jobs("scheduled", task="other") == []
    cut = await queue.find_jobs("ready", task="nobody", scan=3)
    assert (cut.jobs, cut.scanned, cut.exhausted) == ([], 3, False)


async def test_complete_jobs_that_kept_a_record_are_listed_newest_first(
    app: aioqueue.App,
) -> None:
    @app.task(queue="q")
    async def work(n: int) -> int | None:
        return None if n % 2 else n

    queue = app.queue("q")
    jobs = [await work.enqueue(n) for n in range(6)]
    assert await drain(app, queues=["q"]) == {"complete": 6}
    listed = await queue.jobs("complete")
    assert {info.id for info in listed} == {jobs[n].id for n in (0, 2, 4)}  # None: no record
    assert all(info.task == "work" and info.status == "complete" for info in listed)
    assert (await queue.counts()).complete == 3
    finished = [info.finished_at_ms or 0 for info in listed]
    assert finished == sorted(finished, reverse=True)
    assert await queue.jobs("complete", task="other") == []


async def test_retrying_jobs_are_those_scheduled_after_a_failed_attempt(
    app: aioqueue.App,
) -> None:
    @app.task(queue="q", retries=3, backoff=aioqueue.Fixed(600))
    async def flaky() -> None:
        raise RuntimeError("down")

    queue = app.queue("q")
    failing = await flaky.enqueue()
    delayed = await flaky.enqueue().options(delay=300)  # scheduled, never tried
    assert await drain(app, queues=["q"], wait_retries=False) == {"retry": 1}
    [retrying] = await queue.jobs("retrying")
    assert retrying.id == failing.id and retrying.attempts == 1 and retrying.due_ms
    assert retrying.error is not None and retrying.error.message == "down"
    assert {info.id for info in await queue.jobs("scheduled")} == {failing.id, delayed.id}
