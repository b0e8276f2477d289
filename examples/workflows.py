"""Workflows: a chord across two queues, a batch with callbacks, and an ordered group.

A site report: fetch every page in parallel (queue ``fetch``), then total their sizes and
publish the report (queue ``reports``); the fetches' outcomes reach the report's queue by
hand-off. Then a batch of imports whose callback gets the counts, and a customer's
events, which must apply in order (a group).

Run it (a private redis-server is started when ``AIOQUEUE_REDIS_URL`` is unset)::

    python -m examples.workflows

Or enqueue from one process and run a long-lived worker for these tasks in another::

    aioqueue worker examples.workflows:app      # every queue of the app
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import aioqueue
from aioqueue import chain, chord
from aioqueue.ops.embedded import EmbeddedServer

app = aioqueue.App()
applied: list[str] = []  # the group's events, in the order they ran (in this process)
summaries: list[dict[str, int]] = []  # what the batch's callback got
called_back = asyncio.Event()


@app.task(queue="fetch", retries=2)
async def fetch(url: str) -> int:
    """Stand-in for an HTTP GET: a page's size in bytes."""
    await asyncio.sleep(0.01)
    return 1000 + int(hashlib.sha256(url.encode()).hexdigest()[:3], 16)


@app.task(queue="reports")
async def total(sizes: list[int], site: str) -> str:
    """A chord's callback: every fetch's result, in the order they were listed."""
    return f"{site}: {len(sizes)} pages, {sum(sizes):,} bytes"


@app.task(queue="reports")
async def publish(report: str) -> str:
    """A chain's next step: the total's result comes first."""
    return f"published '{report}'"


@app.task(queue="imports", retries=0)
async def import_row(row: int) -> None:
    if row % 7 == 0:
        raise ValueError(f"row {row} is malformed")


@app.task(queue="imports")
async def imported(summary: dict[str, int]) -> None:
    summaries.append(summary)
    called_back.set()


@app.task(queue="imports")
async def apply_event(customer: str, event: str) -> None:
    applied.append(event)
    await asyncio.sleep(0.005)  # however long each takes, the next waits for it


async def run_demo() -> tuple[str, dict[str, int], list[str]]:
    async with app:
        pages = [f"https://example.com/page/{n}" for n in range(8)]
        report = await chain(
            chord([fetch.enqueue(url) for url in pages], total.callback("example.com")),
            publish.callback(),
        )
        async with app.batch(on_complete=imported.callback()) as batch:
            for row in range(1, 21):
                batch.add(import_row.enqueue(row))
        events = ["created", "upgraded", "paid", "cancelled"]
        for event in events:
            last = await apply_event.enqueue("customer-42", event).options(group="customer-42")

        async with app.worker(queues=["fetch", "reports", "imports"], concurrency=20):
            published = await report.result(timeout=30)
            counts = await batch.wait(timeout=30)
            await last.result(timeout=30)  # the group's last: the others ran before it
            await asyncio.wait_for(called_back.wait(), 30)
        return published, {"total": counts.total, "failed": counts.failed}, applied


def main() -> None:
    with contextlib.ExitStack() as stack:
        if app.redis_url is None:
            server = stack.enter_context(EmbeddedServer())
            app.set_redis_url(server.url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {server.url}")
        published, counts, events = asyncio.run(run_demo())
    print(published)
    print(f"batch: {counts['total']} imports, {counts['failed']} failed")
    print(f"the batch's callback got {summaries[0]}")
    print(f"customer-42's events, in order: {events}")


if __name__ == "__main__":
    main()
