"""A burst worker runs a workflow across its queues to the last step: a queue found dry is
not left while a job ready on another queue may still hand work over to it."""

from __future__ import annotations

import aioqueue
from aioqueue import chain, chord
from tests.helpers import drain


async def test_a_burst_worker_runs_every_step_of_workflows_across_queues(
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

    for round_ in range(5):  # (the step it skipped depended on which queue looked first)
        words = ["a" * n for n in range(1, round_ + 3)]
        workflow = await chain(
            chord([size.enqueue(word) for word in words], total.callback("bytes")),
            shout.callback(),
        )
        assert await drain(app) == {"complete": len(words) + 2}
        assert await workflow.result(timeout=1) == f"BYTES: {sum(map(len, words))}"
