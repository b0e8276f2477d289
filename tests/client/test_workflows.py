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
        workflow = await chain(start.enqueue(1), add.callback(10), add.callback(100))
        assert await workflow.result(timeout=10) == 111
        status = await workflow.status()
        assert (status.status, status.children, status.complete) == (JobStatus.COMPLETE, 1, 1)


async def test_a_chord_gets_every_result_in_order(app: aioqueue.App) -> None:
    @app.task
    async def square(x: int) -> int:
        await asyncio.sleep(0.001 * (10 - x))  # finish out of order
        return x * x

    @app.task
    async def total(results: list[int], label: str) -> str:
        return f"{label}: {results}"

    workflow = await chord([square.enqueue(x) for x in range(10)], total.callback("squares"))
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
        node.callback(),
        [
            leaf.enqueue(1),
            flow(node.callback(), [leaf.enqueue(2), leaf.enqueue(3)]),
            leaf.enqueue(4),
        ],
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
        workflow = await chain(
            chord([fragile.enqueue(x) for x in range(4)], merge.callback()), after.callback()
        )
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
            [fragile.enqueue(x) for x in range(3)], merge.callback(), on_child_failure="ignore"
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
        on_complete=done.callback("complete"), on_success=done.callback("success")
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

    batch = app.batch(on_complete=done.callback("complete"), on_success=done.callback("success"))
    async with batch:
        for x in range(3):
            batch.add(work.enqueue(x))
    async with app.worker():
        assert await batch.wait(timeout=10) == aioqueue.BatchSummary(3, 3, 0)
        await wait_until(lambda: now(sorted(calls) == ["complete", "success"]))
    assert not await redis.keys(f"{app.settings.prefix}:*inputs*")


async def test_an_empty_batch_is_complete_at_once(app: aioqueue.App) -> None:
    async with app.batch() as batch:
        pass
    assert await batch.wait(timeout=5) == aioqueue.BatchSummary(0, 0, 0)


async def test_a_requeued_dead_child_never_counts_twice(app: aioqueue.App) -> None:
    attempts: list[int] = []

    @app.task(retries=0)
    async def once_broken(x: int) -> int:
        attempts.append(x)
        if len(attempts) == 1:
            raise ValueError("first run fails")
        return x

    @app.task
    async def merge(results: list[Any]) -> int:
        return len(results)

    queue = app.queue()
    async with app.worker():
        workflow = await chord(
            [once_broken.enqueue(1)], merge.callback(), on_child_failure="ignore"
        )
        assert await workflow.result(timeout=10) == 1
        assert await queue.requeue_dead() == 1  # the dead child runs again, and completes
        await wait_until(lambda: now(len(attempts) == 2))
        await wait_until(lambda: _settled(queue))
    status = await workflow.status()
    assert (status.children, status.complete, status.failed) == (1, 0, 1)


async def _settled(queue: aioqueue.Queue) -> bool:
    counts = await queue.counts()
    return counts.ready == counts.active == 0


async def test_cancelling_a_waiting_parent_stops_the_rest_of_a_chain(app: aioqueue.App) -> None:
    release = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def first() -> str:
        await release.wait()
        ran.append("first")
        return "one"

    @app.task
    async def then(previous: str) -> str:
        ran.append("then")
        return previous

    workflow = await chain(first.enqueue(), then.callback(), then.callback())
    async with app.worker():
        parent_of_first = await _waiting_parents(app)
        assert len(parent_of_first) == 2
        middle = next(job for job in parent_of_first if job != workflow.id)
        assert await app.queue().cancel(middle)
        release.set()
        with pytest.raises(aioqueue.JobFailed, match="ChildFailed"):
            await workflow.result(timeout=10)
    assert ran == ["first"]


async def _waiting_parents(app: aioqueue.App) -> list[str]:
    redis = await app.client()
    keys = [key async for key in redis.scan_iter(match=f"{app.queue().keys.job_prefix}*")]
    return [
        key.decode().rpartition(":")[2] for key in keys if await redis.hget(key, "s") == b"waiting"
    ]


async def test_submitting_a_flow_again_under_its_id_adds_nothing(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    def build() -> aioqueue.Flow[int]:
        return chord([leaf.enqueue(x) for x in range(3)], total.callback().options(id="report-1"))

    first = await build()
    again = await build()
    assert first.job.created and not again.job.created
    assert (await again.status()).children == 3
    assert await app.queue().counts() == aioqueue.QueueCounts(
        ready=3,
        scheduled=0,
        active=0,
        dead=0,
        waiting=1,  # the parent, once
    )
    async with app.worker():
        assert await again.result(timeout=10) == 3
    assert (await app.queue().counts()).waiting == 0


async def test_a_fan_in_wider_than_one_script_call(app: aioqueue.App) -> None:
    """2,500 children: written in three script calls; the parent is sealed by the last."""

    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    workflow = await chord([leaf.enqueue(x) for x in range(2500)], total.callback())
    async with app.worker(concurrency=50):
        assert await workflow.result(timeout=60) == sum(range(2500))
    status = await workflow.status()
    assert (status.children, status.pending, status.complete) == (2500, 0, 2500)


async def test_a_cancelled_child_fails_its_parent(app: aioqueue.App) -> None:
    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    children = [leaf.enqueue(x) for x in range(3)]
    workflow = await chord(children, total.callback())
    queue = app.queue()
    ready = await queue.jobs("ready")
    assert await queue.cancel(ready[0].id)
    with pytest.raises(aioqueue.JobFailed, match="ChildFailed"):
        await workflow.result(timeout=10)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t, u: chain(t.a.enqueue()), "two steps"),
        (lambda t, u: flow(t.b.callback(), []), "at least one child"),
        (lambda t, u: chord([t.a.enqueue()], t.b.callback(), on_child_failure="x"), "'fail'"),  # type: ignore[arg-type]
        (lambda t, u: chain(t.a.enqueue(), chord([t.a.enqueue()], t.b.callback())), "first"),  # type: ignore[arg-type]
    ],
)
def test_bad_shapes_raise_where_written(app: aioqueue.App, build: Any, message: str) -> None:
    tasks = _tasks(app)
    with pytest.raises(aioqueue.ConfigError, match=message):
        build(tasks, None)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda t: _twice(t), aioqueue.ConfigError, "twice"),
        (
            lambda t: chord([t.a.enqueue().options(id="x")], t.b.callback()),
            aioqueue.ConfigError,
            "root",
        ),
        (
            lambda t: chord([t.a.enqueue()], t.b.callback().options(group="g")),
            aioqueue.ConfigError,
            "group",
        ),
        (lambda t: chord([t.a.enqueue()], t.a.enqueue()), aioqueue.InvalidArguments, "arguments"),
        (lambda t: chain(t.a.enqueue(), t.a.enqueue()), aioqueue.InvalidArguments, "arguments"),
    ],
)
async def test_bad_workflows_raise_and_write_nothing(
    app: aioqueue.App, redis: Redis, build: Any, error: type[Exception], message: str
) -> None:
    tasks = _tasks(app)
    with pytest.raises(error, match=message):
        await build(tasks)
    assert await redis.keys(f"{app.settings.prefix}:*") == []


def _twice(t: Any) -> aioqueue.Flow[Any]:
    leaf = t.a.enqueue()
    return chord([leaf, leaf], t.b.callback())


def _tasks(app: aioqueue.App) -> Any:
    class Tasks:
        @app.task
        async def a() -> int:
            return 1

        @app.task
        async def b(results: list[int]) -> int:
            return sum(results)

        @app.task(queue="elsewhere")
        async def other() -> int:
            return 2

    return Tasks


async def test_batch_bad_input(app: aioqueue.App) -> None:
    tasks = _tasks(app)
    batch = app.batch()
    with pytest.raises(aioqueue.ConfigError, match="generated ids"):
        batch.add(tasks.a.enqueue().options(id="x"))
    with pytest.raises(aioqueue.ConfigError, match="share its queue"):
        batch.add(tasks.other.enqueue())
    with pytest.raises(aioqueue.ConfigError, match="run on its queue"):
        app.batch(queue="default", on_complete=tasks.other.enqueue())
    with pytest.raises(RuntimeError):
        async with app.batch() as failing:
            failing.add(tasks.a.enqueue())
            raise RuntimeError("nothing written")
    with pytest.raises(aioqueue.JobNotFound):
        await failing.wait(timeout=0.2)


async def test_a_workflow_spans_queues_by_hand_off(app: aioqueue.App, redis: Redis) -> None:
    """Children on other queues than their parent: each outcome is left in the child's
    queue (another Cluster slot) and delivered to the parent's by the worker's HandOff;
    here by workers that each serve one queue."""

    @app.task(queue="fetch")
    async def fetch(x: int) -> int:
        return x * 10

    @app.task(queue="fetch")
    async def merge(results: list[int]) -> int:
        return sum(results)

    @app.task(queue="report")
    async def report(total: int, label: str) -> str:
        return f"{label}={total}"

    header = [fetch.enqueue(x) for x in range(5)]
    workflow = await chain(chord(header, merge.callback()), report.callback("total"))
    assert workflow.queue.name == "report"
    async with app.worker(queues=["fetch"]), app.worker(queues=["report"]):
        assert await workflow.result(timeout=15) == "total=100"
    for queue in ("fetch", "report"):
        assert await redis.zcard(app.queue(queue).keys.handoff) == 0


async def test_a_cross_queue_chord_counts_each_child_once(app: aioqueue.App, redis: Redis) -> None:
    """Children on another queue than their parent, the parent's counts read back; a
    delivery repeated (a worker that died between delivering and removing) counts nothing."""

    @app.task(queue="leaves")
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    workflow = await chord([leaf.enqueue(x) for x in range(20)], total.callback())
    leaves = app.queue("leaves")
    async with app.worker(queues=["leaves"]):
        await wait_until(lambda: _drained(leaves))
        await wait_until(lambda: _handed_off(redis, leaves, 0))
    status = await workflow.status()
    assert (status.status, status.children, status.complete) == (JobStatus.QUEUED, 20, 20)

    from aioqueue.core.lifecycle import HandedOff
    from aioqueue.store.scripts import links

    again = HandedOff.parse(f"default\n{workflow.id}\n3\nc2".encode())
    assert again is not None
    await links.deliver(redis, workflow.queue.keys, [again, again], result_ttl_ms=60_000)
    assert (await workflow.status()).complete == 20
    async with app.worker():
        assert await workflow.result(timeout=10) == sum(range(20))


async def _drained(queue: aioqueue.Queue) -> bool:
    counts = await queue.counts()
    return counts.ready == counts.active == counts.scheduled == 0


async def _handed_off(redis: Redis, queue: aioqueue.Queue, count: int) -> bool:
    return await redis.zcard(queue.keys.handoff) == count


async def test_counts_say_how_many_parents_wait(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def leaf(x: int) -> int:
        if x < 0:
            raise ValueError(x)
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    queue = app.queue()
    good = await chord([leaf.enqueue(1), leaf.enqueue(2)], total.callback())
    bad = await chord([leaf.enqueue(-1)], total.callback())  # failed by its child
    async with app.batch() as batch:
        batch.add(leaf.enqueue(3))
    assert (await queue.counts()).waiting == 3  # two parents, one batch
    async with app.worker():
        assert await good.result(timeout=10) == 3
        with pytest.raises(aioqueue.JobFailed):
            await bad.result(timeout=10)
        await batch.wait(timeout=10)
    assert (await queue.counts()).waiting == 0
