"""Counts agree with what is listed: the ready entry of a cancelled job (which take skips
later, O(1) cancel) is in no count and on no page, per priority level too."""

from __future__ import annotations

import aioqueue
from tests.helpers import drain


async def test_ready_by_priority_leaves_out_cancelled_jobs(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def work(n: int) -> None: ...

    queue = app.queue("q")
    await work.enqueue(0).options(priority=9)
    cancelled = [await work.enqueue(n).options(priority=5) for n in range(3)]
    kept = await work.enqueue(3).options(priority=5)
    for job in cancelled:
        assert await job.cancel()
    counts = await queue.counts()
    assert counts.ready == 2 and dict(counts.ready_by_priority) == {9: 1, 5: 1}
    await kept.cancel()
    assert dict((await queue.counts()).ready_by_priority) == {9: 1}
    assert await drain(app, queues=["q"]) == {"complete": 1}
    assert (await queue.counts()).ready_by_priority == {}


async def test_a_page_of_ready_jobs_is_full_around_cancelled_ones(app: aioqueue.App) -> None:
    """``jobs ls --limit 2 --offset 1``: offsets count jobs, not the entries of cancelled
    ones, and the page is full."""

    @app.task(queue="q")
    async def work(n: int) -> None: ...

    queue = app.queue("q")
    high = [await work.enqueue(n).options(priority=9) for n in range(3)]
    low = [await work.enqueue(n).options(priority=1) for n in range(10, 14)]
    await high[1].cancel()
    await low[0].cancel()
    listed = [info.id for info in await queue.jobs("ready", limit=100)]
    assert listed == [high[0].id, high[2].id, *(job.id for job in low[1:])]
    for offset in range(len(listed) + 1):
        for limit in (1, 2, 3):
            page = await queue.jobs("ready", limit=limit, offset=offset)
            assert [info.id for info in page] == listed[offset : offset + limit], (offset, limit)
