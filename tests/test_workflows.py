"""Workflows: chains, chords, flows (parent/child trees) and batches, counted inside Redis.
A parent runs once its children have finished, with their results; a failed child fails
it or is passed on, by its policy; a child re-run never counts twice; bad shapes raise
where they are written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue import ChildFailed, JobStatus, chain, chord, flow
from tests.helpers import now, wait_until


async def test_a_chain_passes_each_result_to_the_next_step(app: aioqueue.App) -> None:
    @app.task
    async def add(previous: int, x: int) -> int:
        return previous + x

    @app.task
    async def start(x: int) -> int:
        return x

    async with app.worker():
        workflow = await chain(start.enqueue(1), add.enqueue(10), add.enqueue(100))
        assert await workflow.result(timeout=10) == 111
        status = await workflow.status()
        assert status.status is JobStatus.COMPLETE or status.status is JobStatus.COMPLETE


async def test_a_chord_gets_every_result_in_order(app: aioqueue.App) -> None:
    @app.task
    async def square(x: int) -> int:
        await asyncio.sleep(0.001 * (10 - x))  # finish out of order
        return x * x

    @app.task
    async def total(results: list[int], label: str) -> str:
        return f"{label}: {results}"

    workflow = await chord([square.enqueue(x) for x in range(10)], total.enqueue("squares"))
    status = await workflow.status()
    assert (status.status, status.children, status.pending) == (JobStatus.WAITING, 10, 10)
    async with app.worker(concurrency=10):
        assert await workflow.result(timeout=10) == f"squares: {[x * x for x in range(10)]}"


async def test_a_flow_is_a_tree(app: aioqueue.App) -> None:
    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def node(results: list[Any]) -> int:
        return sum(results)

    tree = flow(
        node.enqueue(),
        [leaf.enqueue(1), flow(node.enqueue(), [leaf.enqueue(2), leaf.enqueue(3)]), leaf.enqueue(4)],
    )
    async with app.worker():
        workflow = await tree
        assert await workflow.result(timeout=10) == 10


async def test_a_failed_child_fails_its_parent_by_default(app: aioqueue.App) -> None:
    ran: list[str] = []

    @app.task(retries=0)
    async def fragile(x: int) -> int:
        if x == 2:
            raise ValueError("two")
        return x

    @app.task
    async def merge(results: list[int]) -> int:
        ran.append("merge")
        return sum(results)

    @app.task
    async def after(total: int) -> int:
        ran.append("after")
        return total

    async with app.worker():
        workflow = await chain(chord([fragile.enqueue(x) for x in range(4)], merge.enqueue()), after.enqueue())
        with pytest.raises(aioqueue.JobFailed) as failed:
            await workflow.result(timeout=10)
        assert failed.value.error_type == "ChildFailed"
    assert ran == []


async def test_an_ignoring_parent_runs_with_the_failure_in_place(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def fragile(x: int) -> int:
        if x == 1:
            raise ValueError("one")
        return x

    @app.task
    async def merge(results: list[Any]) -> list[Any]:
        return [r if not isinstance(r, ChildFailed) else f"failed: {r.error_type}" for r in results]

    async with app.worker():
        workflow = await chord(
            [fragile.enqueue(x) for x in range(3)], merge.enqueue(), on_child_failure="ignore"
        )
        assert await workflow.result(timeout=10) == [0, "failed: ValueError", 2]


async def test_a_batch_calls_back_once_with_its_counts(app: aioqueue.App) -> None:
    calls: list[tuple[str, dict[str, int]]] = []

    @app.task(retries=0)
    async def work(x: int) -> int:
        if x % 5 == 0:
            raise ValueError(x)
        return x

    @app.task
    async def done(summary: dict[str, int], label: str) -> None:
        calls.append((label, summary))

    async with app.batch(
        on_complete=done.enqueue("complete"), on_success=done.enqueue("success")
    ) as batch:
        for x in range(20):
            batch.add(work.enqueue(x))
    async with app.worker(concurrency=5):
        summary = await batch.wait(timeout=10)
        assert summary == aioqueue.BatchSummary(total=20, succeeded=16, failed=4)
        await wait_until(lambda: now(len(calls) == 1))
    assert calls == [("complete", {"total": 20, "succeeded": 16, "failed": 4})]


async def test_a_successful_batch_runs_both_callbacks(app: aioqueue.App, redis: Redis) -> None:
    calls: list[str] = []

    @app.task
    async def work(x: int) -> int:
        return x

    @app.task
    async def done(summary: dict[str, int], label: str) -> None:
        calls.append(label)

    batch = app.batch(on_complete=done.enqueue("complete"), on_success=done.enqueue("success"))
    async with batch:
        for x in range(3):
            batch.add(work.enqueue(x))
    async with app.worker():
        assert await batch.wait(timeout=10) == aioqueue.BatchSummary(3, 3, 0)
        await wait_until(lambda: now(sorted(calls) == ["complete", "success"]))
    assert not await redis.keys("*inputs*")


async def test_an_empty_batch_is_complete_at_once(app: aioqueue.App) -> None:
    async with app.batch() as batch:
        pass
    assert await batch.wait(timeout=5) == aioqueue.BatchSummary(0, 0, 0)
