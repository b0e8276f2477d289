"""Edge cases of groups, workflows and hand-offs (include/links.lua, enqueue_linked.lua,
deliver.lua, workflows.py, worker/handoff.py), each found by a review of the change: the
scenarios that must hold, and the bugs it found (each test failed before its fix)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import aioqueue
from aioqueue import ChildFailed, JobStatus, chain, chord
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import LinkedJob, NewJob, Outcome, Settlement
from aioqueue.store.scripts import leasing, links
from tests.helpers import now, wait_until

TTL = 60_000


async def _idle(queue: aioqueue.Queue) -> bool:
    counts = await queue.counts()
    return counts.ready == counts.active == counts.scheduled == 0


# -- workflows ----------------------------------------------------------------------------


async def test_a_chain_whose_middle_step_is_on_another_queue(
    app: aioqueue.App, redis: Redis
) -> None:
    """a (A) -> b (B) -> c (A): two hand-offs, each way, by workers that serve one queue."""

    @app.task(queue="qa")
    async def a(x: int) -> int:
        return x + 1

    @app.task(queue="qb")
    async def b(previous: int) -> int:
        return previous * 10

    @app.task(queue="qa")
    async def c(previous: int) -> str:
        return f"c{previous}"

    workflow = await chain(a.enqueue(1), b.callback(), c.callback())
    async with app.worker(queues=["qa"]), app.worker(queues=["qb"]):
        assert await workflow.result(timeout=15) == "c20"
    for name in ("qa", "qb"):
        assert await redis.zcard(app.queue(name).keys.handoff) == 0


async def test_a_cross_queue_fan_in_wider_than_one_script_call(app: aioqueue.App) -> None:
    """1,200 children on one queue, 1,100 grandchildren back on the parent's queue: runs
    of more than one script call each, counted once each across the hand-offs."""

    @app.task(queue="leaves")
    async def leaf(x: int) -> int:
        return x

    @app.task(queue="leaves")
    async def mid(results: list[int]) -> int:
        return sum(results)

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    inner = chord([leaf.enqueue(x) for x in range(1100)], mid.callback())
    tree = chord([inner, *(leaf.enqueue(x) for x in range(1200))], total.callback())
    workflow = await tree
    async with app.worker(concurrency=50), app.worker(queues=["leaves"], concurrency=50):
        assert await workflow.result(timeout=60) == sum(range(1100)) + sum(range(1200))
    status = await workflow.status()
    assert (status.children, status.pending, status.complete) == (1201, 0, 1201)


async def test_an_ignoring_parent_runs_when_a_child_is_cancelled(app: aioqueue.App) -> None:
    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def merge(results: list[Any]) -> list[Any]:
        return [r.error_type if isinstance(r, ChildFailed) else r for r in results]

    workflow = await chord(
        [leaf.enqueue(x) for x in range(3)], merge.callback(), on_child_failure="ignore"
    )
    queue = app.queue()
    ready = await queue.jobs("ready")
    second = next(job for job in ready if job.id.endswith("/2"))
    assert await queue.cancel(second.id)
    async with app.worker():
        assert await workflow.result(timeout=10) == [0, "JobCancelled", 2]


async def test_an_ignoring_parent_runs_when_a_running_child_is_cancelled(
    app: aioqueue.App,
) -> None:
    started = asyncio.Event()

    @app.task
    async def slow(x: int) -> int:
        if x == 1:
            started.set()
            await asyncio.sleep(30)
        return x

    @app.task(queue="cb")
    async def merge(results: list[Any]) -> list[Any]:
        return [r.error_type if isinstance(r, ChildFailed) else r for r in results]

    workflow = await chord(
        [slow.enqueue(x) for x in range(3)], merge.callback(), on_child_failure="ignore"
    )
    async with app.worker(queues=["default", "cb"], concurrency=3):
        await asyncio.wait_for(started.wait(), 10)
        assert await app.queue().cancel(f"{workflow.id}/2")
        assert await workflow.result(timeout=10) == [0, "JobCancelled", 2]


async def test_a_requeued_dead_parent_runs_with_its_inputs(app: aioqueue.App) -> None:
    """A parent that failed for good and is requeued from the dead set runs again: with
    its children's results, as the first time (not with an empty list)."""
    seen: list[list[int]] = []

    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task(retries=0)
    async def merge(results: list[int]) -> int:
        seen.append(results)
        if len(seen) == 1:
            raise RuntimeError("first run fails")
        return sum(results)

    workflow = await chord([leaf.enqueue(x) for x in (1, 2)], merge.callback())
    queue = app.queue()
    async with app.worker():
        await wait_until(lambda: _is(workflow.job, JobStatus.DEAD))
        assert await queue.requeue_dead() == 1
        await workflow.result(timeout=10)
    assert seen == [[1, 2], [1, 2]]


async def _is(job: aioqueue.Job[Any], status: JobStatus) -> bool:
    return await job.status() is status


async def test_a_cross_queue_workflow_resubmitted_after_a_failed_seal_completes(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seals of a workflow that spans queues are one call per queue. If the root's
    queue is sealed and another's seal fails (EnqueueUnconfirmed), submitting the workflow
    again under its root's id (as the README says to) must finish the job: the parents
    left unsealed on the other queue must not wait for ever."""

    @app.task(queue="qa")
    async def leaf(x: int) -> int:
        return x

    @app.task(queue="qb")
    async def mid(results: list[int]) -> int:
        return sum(results)

    @app.task(queue="qa")
    async def total(results: list[int]) -> int:
        return sum(results)

    def build() -> aioqueue.Flow[int]:
        inner = chord([leaf.enqueue(1), leaf.enqueue(2)], mid.callback())
        return chord([inner], total.callback().options(id="root-1"))

    qb = app.queue("qb")
    original = aioqueue.Queue._write_linked
    failed: list[bool] = []

    async def flaky(self: aioqueue.Queue, jobs: Any, seal: Any = ()) -> Any:
        if self is qb and seal and not failed:  # qb's seal: the connection drops
            failed.append(True)
            raise RedisConnectionError("connection lost")
        return await original(self, jobs, seal)

    monkeypatch.setattr(aioqueue.Queue, "_write_linked", flaky)
    with pytest.raises(aioqueue.ServerUnavailable):
        await build()
    assert failed
    again = await build()  # the retry the README prescribes
    async with app.worker(queues=["qa", "qb"]):
        assert await again.result(timeout=10) == 3


async def test_a_burst_worker_finishes_a_same_queue_chain(app: aioqueue.App) -> None:
    @app.task
    async def start(x: int) -> int:
        return x

    @app.task
    async def add(previous: int, x: int) -> int:
        return previous + x

    workflow = await chain(start.enqueue(1), add.callback(2), add.callback(3))
    worker = app.worker(burst=True)
    await asyncio.wait_for(worker.run_until_idle(), timeout=30)
    assert await workflow.job.status() is JobStatus.COMPLETE


async def test_a_burst_worker_finishes_a_cross_queue_chain(app: aioqueue.App) -> None:
    """A burst worker serving both queues of a workflow drains it: a parent made ready
    by a hand-off (after the child's queue looked idle) still runs."""

    @app.task(queue="qa")
    async def start(x: int) -> int:
        await asyncio.sleep(0.3)  # qb looks idle meanwhile
        return x

    @app.task(queue="qb")
    async def add(previous: int, x: int) -> int:
        return previous + x

    workflow = await chain(start.enqueue(1), add.callback(2))
    worker = app.worker(queues=["qa", "qb"], burst=True)
    await asyncio.wait_for(worker.run_until_idle(), timeout=30)
    assert await workflow.job.status() is JobStatus.COMPLETE


async def test_a_batch_of_no_jobs_runs_its_callbacks(app: aioqueue.App) -> None:
    calls: list[tuple[str, dict[str, int]]] = []

    @app.task
    async def done(summary: dict[str, int], label: str) -> None:
        calls.append((label, summary))

    async with app.batch(
        on_complete=done.callback("complete"), on_success=done.callback("success")
    ) as batch:
        pass
    zero = {"total": 0, "succeeded": 0, "failed": 0}
    async with app.worker():
        assert await batch.wait(timeout=5) == aioqueue.BatchSummary(0, 0, 0)
        await wait_until(lambda: now(len(calls) == 2))
    assert sorted(calls) == [("complete", zero), ("success", zero)]


@pytest.mark.parametrize("shape", ["chord", "batch"])
async def test_an_awaited_job_in_a_workflow_is_a_clear_error(app: aioqueue.App, shape: str) -> None:
    """A common slip: a Job (an awaited enqueue) where a call belongs. ConfigError (or
    TypeError) naming the problem, not an AttributeError from inside the tree builder."""

    @app.task
    async def leaf() -> int:
        return 1

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    job = await leaf.enqueue()
    with pytest.raises((aioqueue.ConfigError, TypeError)):
        if shape == "chord":
            await chord([job], total.callback())  # type: ignore[list-item]
        else:
            app.batch().add(job)  # type: ignore[arg-type]


# -- groups ---------------------------------------------------------------------------------


async def test_a_group_job_cancelled_while_running_lets_the_group_go_on(app: aioqueue.App) -> None:
    started = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def step(name: str) -> str:
        ran.append(name)
        if name == "first":
            started.set()
            await asyncio.sleep(30)
        return name

    first = await step.enqueue("first").options(group="g")
    second = await step.enqueue("second").options(group="g")
    assert await second.status() is JobStatus.WAITING
    async with app.worker(concurrency=2):
        await asyncio.wait_for(started.wait(), 10)
        assert await first.cancel()
        assert await second.result(timeout=10) == "second"
    assert await first.status() is JobStatus.CANCELLED
    assert ran == ["first", "second"]


async def test_enqueue_many_with_some_grouped_calls(app: aioqueue.App, redis: Redis) -> None:
    ran: list[str] = []

    @app.task
    async def step(name: str) -> None:
        ran.append(name)

    queue = app.queue()
    calls = [
        step.enqueue("g1").options(group="g"),
        step.enqueue("plain1"),
        step.enqueue("g2").options(group="g"),
        step.enqueue("plain2").options(priority="high"),
        step.enqueue("g3").options(group="g", delay=0.1),
    ]
    jobs = await queue.enqueue_many(calls)
    states = [await job.status() for job in jobs]
    assert states == [
        JobStatus.QUEUED, JobStatus.QUEUED, JobStatus.WAITING, JobStatus.QUEUED, JobStatus.WAITING,
    ]  # fmt: skip
    async with app.worker(concurrency=5):
        await wait_until(lambda: now(len(ran) == 5))
    grouped = [name for name in ran if name.startswith("g")]
    assert grouped == ["g1", "g2", "g3"]
    assert not await redis.hlen(queue.keys.groups)


async def test_a_cancelled_batch_does_not_hand_its_callback_an_error_as_counts(
    app: aioqueue.App,
) -> None:
    """Cancelling a batch (its job, the barrier) while its jobs run: on_complete runs (its
    policy ignores a failed child) and must get the counts dict the README promises, not
    the barrier's error JSON ({"type": "JobCancelled", ...}) in its place."""
    got: list[Any] = []

    @app.task
    async def work(x: int) -> int:
        return x

    @app.task
    async def report(summary: Any) -> None:
        got.append(summary)

    async with app.batch(on_complete=report.callback()) as batch:
        for x in range(3):
            batch.add(work.enqueue(x))
    assert await batch.job.cancel()
    async with app.worker():
        await wait_until(lambda: now(got), timeout=10)
    assert set(got[0]) == {"total", "succeeded", "failed"}, got[0]


async def test_a_flow_with_bad_inputs_raises_where_written(app: aioqueue.App, redis: Redis) -> None:
    """aioqueue.Flow is public; an unknown ``inputs`` must raise ConfigError at once, not be
    written and buried by the worker (PayloadError) later."""

    @app.task
    async def leaf() -> int:
        return 1

    @app.task
    async def total(results: Any) -> int:
        return 1

    with pytest.raises(aioqueue.ConfigError):
        await aioqueue.Flow(total.callback(), [leaf.enqueue()], inputs="all")  # type: ignore[arg-type]
    assert await redis.keys(f"{app.settings.prefix}:*") == []


@pytest.mark.parametrize("space", ["\x0b", "\x0c"])
async def test_a_root_id_with_a_space_lua_splits_on(
    app: aioqueue.App, redis: Redis, space: str
) -> None:
    """Parents are space-separated in Lua (%S+: also \\v and \\f). A root id with one of
    those passes the Python check (" \\t\\r\\n" only); then the seal ("a b") seals
    nothing and every child is skipped as "sealed": only the root is written, and it waits
    for ever. Refuse such an id, or split on " " only."""

    @app.task
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    try:
        workflow = await chord(
            [leaf.enqueue(1), leaf.enqueue(2)], total.callback().options(id=f"a{space}b")
        )
    except aioqueue.ConfigError:
        return  # refused where written: one fix
    async with app.worker():  # or written so that it works: the other
        assert await workflow.result(timeout=5) == 3


async def test_a_retried_child_counts_once_when_it_finishes(app: aioqueue.App) -> None:
    attempts: list[int] = []

    @app.task(retries=3, backoff=aioqueue.Fixed(0))
    async def flaky(x: int) -> int:
        attempts.append(x)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return x

    @app.task
    async def total(results: list[int]) -> list[int]:
        return results

    workflow = await chord([flaky.enqueue(7)], total.callback())
    async with app.worker():
        assert await workflow.result(timeout=10) == [7]
    status = await workflow.status()
    assert (status.children, status.pending, status.complete, status.failed) == (1, 0, 1, 0)
    assert attempts == [7, 7, 7]


async def test_reconcile_frees_a_group_whose_holder_vanished(
    app: aioqueue.App, redis: Redis
) -> None:
    """A holder whose record went (evicted): the jobs waiting behind it are repaired only
    by a later enqueue of the same group. reconcile ("run it after an eviction") looks at
    queued, scheduled and active records only, so with no such enqueue they wait for ever."""

    @app.task
    async def step(n: int) -> int:
        return n

    queue = app.queue()
    first = await step.enqueue(1).options(group="g")
    second = await step.enqueue(2).options(group="g")
    await redis.delete(queue.keys.job(first.id))  # evicted
    await queue.reconcile()
    async with app.worker():
        assert await second.result(timeout=5) == 2


async def test_the_status_of_a_finished_workflow_whose_root_returned_none(
    app: aioqueue.App,
) -> None:
    """The README's own example: a chain ending in ``notify`` (-> None), then
    ``workflow.status()``. A root that returned None keeps no record (only its id, in a
    done hash), so flow_status's HMGET finds nothing and raises JobNotFound, where
    Job.status() says COMPLETE."""

    @app.task
    async def fetch(x: int) -> int:
        return x

    @app.task
    async def notify(total: int) -> None:
        return None

    workflow = await chain(fetch.enqueue(1), notify.callback())
    async with app.worker():
        assert await workflow.result(timeout=10) is None
    assert await workflow.job.status() is JobStatus.COMPLETE
    status = await workflow.status()
    assert status.status is JobStatus.COMPLETE


# -- per-task limits --------------------------------------------------------------------


async def test_a_burst_without_a_rate_is_refused(app: aioqueue.App) -> None:
    """``burst`` is the bursts of a rate: alone it limits nothing, and as a task's declared
    limits it would make a worker's start write empty limits, lifting the ones an operator
    set with set_limits. Refused where written."""
    with pytest.raises(aioqueue.ConfigError, match="rate"):

        @app.task(queue="capped", burst=5)
        async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="rate"):
        await app.queue("capped").set_limits(burst=5)


@pytest.mark.parametrize("outcome", ["bury", "complete"])
async def test_a_barrier_sealed_after_its_children_settled_reports_how_they_ended(
    db: Redis, keys: QueueKeys, outcome: Outcome
) -> None:
    """A batch written in several calls is sealed by a last one, after its children may
    have finished (workers run them meanwhile): the barrier then completes at the seal,
    and its on_success parent runs only if every child succeeded (it ran even after a
    failure when the seal reported every sealed barrier as a success)."""
    success = NewJob("s", b'{"t":"cb","in":"summary"}', 5)
    await links.enqueue_linked(
        db, keys,
        [
            LinkedJob(success, parent="f1"),
            LinkedJob(NewJob("b", b"", 0), parents="s", position=1, parent="i0"),
            LinkedJob(NewJob("b/1", b'{"t":"x"}', 0), parents="b", position=1),
        ],
    )  # fmt: skip
    # (no seal yet: the last call of a write in several calls seals)
    [child] = (await leasing.take(db, keys, lease="w:1", lease_ms=30_000, limit=1)).jobs
    assert child.id == b"b/1"
    data = b'"E"' if outcome == "bury" else b"1"
    await leasing.ack(
        db, keys, [Settlement(child.id, child.lease, outcome, data)], result_ttl_ms=TTL
    )
    assert await db.hget(keys.job("s"), "s") == b"waiting"  # nothing released before the seal
    await links.enqueue_linked(db, keys, [], seal=["s", "b"], result_ttl_ms=TTL)
    assert await db.hget(keys.job("b"), "s") == b"complete"
    expected = b"failed" if outcome == "bury" else b"queued"
    assert await db.hget(keys.job("s"), "s") == expected
    assert await db.get(keys.waiting) == b"0"
