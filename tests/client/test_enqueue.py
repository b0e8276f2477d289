"""Producing jobs: ids and deduplication, enqueue by name, priorities, per-call options,
delayed and timed jobs, cancellation (DESIGN.md §3, §5)."""

from __future__ import annotations

import asyncio
import time
from base64 import b64decode
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.client.enqueue import new_job_id
from aioqueue.core.ids import GENERATED_ID_ALPHABET
from tests.helpers import counts, drain, in_done_set, run_until_idle, wait_until

QUEUED, SCHEDULED = aioqueue.JobStatus.QUEUED, aioqueue.JobStatus.SCHEDULED


async def has_status(job: aioqueue.Job[Any], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


# -- ids and deduplication ------------------------------------------------------------------


async def test_same_id_while_queued_is_a_noop(app: aioqueue.App, redis: Redis, prefix: str) -> None:
    runs: list[int] = []

    @app.task(queue="q")
    async def record(n: int) -> int:
        runs.append(n)
        return n

    first = await record.enqueue(1).options(id="once")
    second = await record.enqueue(2).options(id="once")
    assert first.created is True
    assert second.created is False
    assert second.id == first.id == "once"
    assert await app.queue("q").counts() == counts(ready=1)
    job_keys = [key async for key in redis.scan_iter(match=f"{prefix}:*:job:*")]
    assert len(job_keys) == 1

    await run_until_idle(app)
    assert runs == [1]  # the first enqueue's arguments, not the duplicate's
    assert await second.result(timeout=1) == 1


async def test_same_id_while_scheduled_is_a_noop(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    first = await noop.enqueue().options(id="later", delay=60)
    again = await noop.enqueue().options(id="later")  # even without a delay
    delayed_again = await noop.enqueue().options(id="later", delay=1)
    assert (first.created, again.created, delayed_again.created) == (True, False, False)
    assert await first.status() is SCHEDULED
    assert await app.queue("q").counts() == counts(scheduled=1)


async def test_same_id_while_active_is_a_noop(app: aioqueue.App) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    @app.task(queue="q")
    async def gated() -> None:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()

    async with app.worker(lease=2):
        first = await gated.enqueue().options(id="busy")
        await started.wait()
        assert await first.status() is aioqueue.JobStatus.ACTIVE
        again = await gated.enqueue().options(id="busy")
        assert again.created is False
        assert await app.queue("q").counts() == counts(active=1)
        release.set()
        await first.result(timeout=5)
    assert runs == 1


async def test_same_id_after_completion_returns_the_finished_job(app: aioqueue.App) -> None:
    """An id is an idempotency key while its record lasts: no second run."""
    runs: list[str] = []

    @app.task(queue="q")
    async def record(tag: str) -> str:
        runs.append(tag)
        return tag

    first = await record.enqueue("a").options(id="repeat")
    await run_until_idle(app)
    assert await first.result(timeout=1) == "a"

    second = await record.enqueue("b").options(id="repeat")
    assert second.created is False
    assert await second.status() is aioqueue.JobStatus.COMPLETE
    await run_until_idle(app)
    assert runs == ["a"]
    assert await second.result(timeout=1) == "a"


async def test_generated_ids_are_unique(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    jobs = [await noop.enqueue() for _ in range(50)]
    assert all(job.created for job in jobs)
    assert len({job.id for job in jobs}) == 50
    assert all(job.id for job in jobs)
    assert await app.queue("q").counts() == counts(ready=50)


# -- by name --------------------------------------------------------------------------------


async def test_enqueue_by_name_from_an_app_without_the_task(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    @app.task(queue="mail", priority="high")
    async def send(to: str, *, subject: str) -> str:
        return f"{to}:{subject}"

    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as producer:
        assert producer.tasks == {}
        job = await producer.queue("mail").enqueue("send", "a@b.c", subject="hi")
        assert job.created
        assert job.queue == "mail"
        assert await job.status() is QUEUED
        worker = await run_until_idle(app)
        assert worker.outcomes == {"complete": 1}
        assert await job.result(timeout=1) == "a@b.c:hi"


async def test_enqueue_by_name_for_a_known_task_is_checked(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def add(a: int, b: int) -> int:
        return a + b

    job = await app.queue("q").enqueue("add", 1, b=2)
    await run_until_idle(app)
    assert await job.result(timeout=1) == 3


# -- priorities -----------------------------------------------------------------------------


async def test_higher_priority_runs_first_fifo_within_a_level(app: aioqueue.App) -> None:
    order: list[str] = []

    @app.task(queue="q")
    async def record(tag: str) -> None:
        order.append(tag)

    @app.task(queue="q", priority="high")
    async def urgent(tag: str) -> None:
        order.append(tag)

    plan: list[tuple[str, int | str | None]] = [
        ("n1", None),  # the task's default: normal (5)
        ("l1", "low"),
        ("h1", 9),
        ("n2", 5),
        ("m1", 7),
        ("h2", "high"),
        ("l2", 0),
        ("n3", "normal"),
        ("m2", 7),
    ]
    for tag, priority in plan:
        await record.enqueue(tag).options(priority=priority)
    await urgent.enqueue("u1")  # the task's own default priority: high, after h1 and h2

    await run_until_idle(app, concurrency=1)
    assert order == ["h1", "h2", "u1", "m1", "m2", "n1", "n2", "n3", "l1", "l2"]


async def test_priority_is_recorded_and_invalid_priorities_rejected(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    job = await noop.enqueue().options(priority="low")
    assert (await job.info()).priority == 0
    for bad in (10, -1, "urgent"):
        with pytest.raises(aioqueue.ConfigError):
            await noop.enqueue().options(priority=bad, id=f"bad-{bad}")
        assert await app.queue("q").info(f"bad-{bad}") is None
    assert await app.queue("q").counts() == counts(ready=1)


# -- per-call options -------------------------------------------------------------------------


async def test_options_never_clash_with_task_arguments(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def clash(
        timeout: float, priority: str, delay: int, id: str, at: str, max_attempts: int
    ) -> dict[str, Any]:
        return {
            "timeout": timeout,
            "priority": priority,
            "delay": delay,
            "id": id,
            "at": at,
            "max_attempts": max_attempts,
        }

    arguments: dict[str, Any] = {
        "timeout": 0.001,
        "priority": "not-a-priority",
        "delay": 3600,
        "id": "an-argument",
        "at": "not-a-datetime",
        "max_attempts": -5,
    }
    plain = await clash.enqueue(**arguments)
    assert plain.id != "an-argument"
    assert await plain.status() is QUEUED  # delay=3600 was an argument, not an option
    assert (await plain.info()).priority == 5

    with_options = await clash.enqueue(**arguments).options(id="the-job-id", priority=9)
    assert with_options.id == "the-job-id"
    assert (await with_options.info()).priority == 9

    await run_until_idle(app)
    assert await plain.result(timeout=1) == arguments
    assert await with_options.result(timeout=1) == arguments


async def test_per_call_timeout_and_max_attempts_apply(app: aioqueue.App) -> None:
    calls = 0

    @app.task(queue="q", timeout=30, retries=0, backoff=aioqueue.Fixed(0))
    async def slow_then_fail() -> None:
        nonlocal calls
        calls += 1
        await asyncio.Event().wait()

    job = await slow_then_fail.enqueue().options(timeout=0.2, max_attempts=2)
    assert (await job.info()).max_attempts == 2
    assert await drain(app) == {"retry": 1, "bury": 1}
    assert calls == 2
    info = await job.info()
    assert info.attempts == 2
    assert info.error is not None
    assert info.error.type in {"TimeoutError", "HandlerTimeout"}


# -- delayed and timed jobs ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["delay", "timedelta", "at"])
async def test_delayed_job_is_scheduled_then_runs(app: aioqueue.App, how: str) -> None:
    @app.task(queue="q")
    async def hello() -> str:
        return "hello"

    async with app.worker(lease=2):
        call = hello.enqueue()
        at = datetime.now(UTC) + timedelta(milliseconds=300)
        if how == "delay":
            job = await call.options(delay=0.3)
        elif how == "timedelta":
            job = await call.options(delay=timedelta(milliseconds=300))
        else:
            job = await call.options(at=at)
        assert job.created
        assert await job.status() is SCHEDULED
        assert await app.queue("q").counts() == counts(scheduled=1)
        await wait_until(lambda: has_status(job, aioqueue.JobStatus.COMPLETE))
    assert await job.result(timeout=1) == "hello"
    info = await job.info()
    assert info.started_at_ms is not None
    assert info.enqueued_at_ms is not None
    # Never early: a delay counts from the enqueue on the Redis clock; at= is absolute.
    due_ms = int(at.timestamp() * 1000) if how == "at" else info.enqueued_at_ms + 300
    assert info.started_at_ms >= due_ms


async def test_at_in_the_past_runs_immediately(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def hello() -> str:
        return "hello"

    job = await hello.enqueue().options(at=datetime.now(UTC) - timedelta(hours=1))
    assert await job.status() is QUEUED
    assert await app.queue("q").counts() == counts(ready=1)
    await run_until_idle(app)
    assert await job.result(timeout=1) == "hello"


async def test_naive_datetime_and_negative_delay_are_config_errors(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="aware"):
        await noop.enqueue().options(at=datetime.now() + timedelta(seconds=5))
    with pytest.raises(aioqueue.ConfigError):
        await noop.enqueue().options(delay=-1)
    with pytest.raises(aioqueue.ConfigError):
        await noop.enqueue().options(delay=timedelta(seconds=-1))
    assert await app.queue("q").counts() == counts()
    assert [key async for key in redis.scan_iter(match=f"{prefix}:*")] == []


# -- cancellation ---------------------------------------------------------------------------


@pytest.mark.parametrize("delayed", [False, True], ids=["queued", "scheduled"])
async def test_cancelled_job_never_runs(app: aioqueue.App, delayed: bool) -> None:
    runs: list[str] = []

    @app.task(queue="q")
    async def record(tag: str) -> str:
        runs.append(tag)
        return tag

    victim = await record.enqueue("victim").options(delay=0.2 if delayed else None)
    survivor = await record.enqueue("survivor").options(delay=0.2 if delayed else None)
    assert await victim.status() is (SCHEDULED if delayed else QUEUED)

    assert await victim.cancel() is True
    assert await victim.cancel() is False  # already cancelled: nothing left to stop
    assert await victim.status() is aioqueue.JobStatus.CANCELLED

    async with app.worker(lease=2):
        assert await survivor.result(timeout=5) == "survivor"
    await run_until_idle(app)  # anything left over would run here

    assert runs == ["survivor"]
    assert await victim.status() is aioqueue.JobStatus.CANCELLED
    with pytest.raises(aioqueue.JobCancelled):
        await victim.result(timeout=1)
    assert (await app.queue("q").counts()).scheduled == 0


async def test_cancel_is_refused_once_the_job_finished(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def noop() -> str:
        return "done"

    job = await noop.enqueue()
    await run_until_idle(app)
    assert await job.cancel() is False
    assert await job.result(timeout=1) == "done"
    assert await app.queue("q").job("never-enqueued").cancel() is False


async def test_unreachable_redis_is_a_clear_error_with_the_job_id() -> None:
    from aioqueue.ops.embedded import free_loopback_port

    app = aioqueue.App(redis_url=f"redis://127.0.0.1:{free_loopback_port()}/0", connect_timeout=0.2)

    @app.task
    async def noop() -> None: ...

    with pytest.raises(aioqueue.EnqueueUnconfirmed) as raised:
        await noop.enqueue().options(id="order-42")
    assert raised.value.job_id == "order-42"
    assert "retry with .options(id='order-42')" in str(raised.value)
    assert isinstance(raised.value, aioqueue.ServerUnavailable)
    await app.close()


async def test_generated_ids_are_short_unique_and_sort_by_time(app: aioqueue.App) -> None:
    @app.task
    async def noop() -> None: ...

    before = time.time_ns() // 1_000_000
    jobs = [await noop.enqueue() for _ in range(200)]
    jobs += await app.queue().enqueue_many(noop.enqueue() for _ in range(200))
    after = time.time_ns() // 1_000_000
    alphabet = set(GENERATED_ID_ALPHABET.decode())
    for job in jobs:
        assert len(job.id) == 20 and set(job.id) <= alphabet, job.id
        stamp = int.from_bytes(b64decode(job.id.translate(_FROM_ID_ALPHABET))[:6], "big")
        assert before <= stamp <= after
    assert len({job.id for job in jobs}) == 400
    first = new_job_id()

    async def next_millisecond() -> bool:
        return new_job_id()[:8] != first[:8]

    await wait_until(next_millisecond)
    assert first < new_job_id()


_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_FROM_ID_ALPHABET = str.maketrans(GENERATED_ID_ALPHABET.decode(), _BASE64)


async def test_completed_jobs_keep_results_for_result_ttl_and_ids_for_idempotency_ttl(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    """A result is kept result_ttl in a record; a job that returned None keeps no record,
    only its id's fingerprint in a done set (8 bytes), for idempotency_ttl."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, result_ttl=3600, idempotency_ttl=60)

    @app.task
    async def answer(n: int) -> int | None:
        return n if n else None

    try:
        with_result, without = await answer.enqueue(42), await answer.enqueue(0)
        await run_until_idle(app)
        assert await with_result.result(timeout=1) == 42
        assert await without.result(timeout=1) is None
        keys = app.queue().keys
        assert 60_000 < await redis.pttl(keys.job(with_result.id)) <= 3_600_000
        assert await redis.exists(keys.job(without.id)) == 0
        assert await without.status() is aioqueue.JobStatus.COMPLETE
        [done] = [key async for key in redis.scan_iter(match=f"{keys.done_prefix}*")]
        assert await in_done_set(redis, done, without.id)
        assert 0 < await redis.pttl(done) <= 120_000  # one span after its generation ends
        again = await answer.enqueue(0).options(id=without.id)
        assert again.created is False  # still an idempotency key
        info = await without.info()
        assert (info.status, info.task, info.raw) == ("complete", None, None)
        assert await app.queue().cancel(without.id) is False
    finally:
        await app.close()


async def test_without_an_idempotency_window_nothing_is_kept(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, idempotency_ttl=0)

    @app.task
    async def nothing() -> None: ...

    try:
        job = await nothing.enqueue()
        await run_until_idle(app)
        keys = app.queue().keys
        kept = [key async for key in redis.scan_iter(match=f"{keys.job_prefix}*")]
        kept += [key async for key in redis.scan_iter(match=f"{keys.done_prefix}*")]
        assert kept == []
        with pytest.raises(aioqueue.JobNotFound):
            await job.status()
    finally:
        await app.close()


async def test_a_bulk_enqueue_goes_in_rounds_and_a_failed_round_names_its_jobs_on(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each round trip of enqueue_many has its own enqueue_timeout (a million jobs in one
    ran past it); a round that fails leaves the rounds before it in Redis, and the error
    names the jobs from that round on."""
    from redis import exceptions as redis_errors

    from aioqueue.client import queue as queue_module
    from aioqueue.store.batching import EnqueueBatcher

    @app.task
    async def noop(n: int) -> None: ...

    monkeypatch.setattr(queue_module, "BULK_ROUND", 3)
    rounds: list[int] = []
    submit_many = EnqueueBatcher.submit_many

    async def counted(self: EnqueueBatcher, jobs: list[Any]) -> Any:
        rounds.append(len(jobs))
        if len(rounds) == 4:  # (the second round of the second call)
            raise redis_errors.ConnectionError("gone")
        return await submit_many(self, jobs)

    monkeypatch.setattr(EnqueueBatcher, "submit_many", counted)
    queue = app.queue()
    jobs = await queue.enqueue_many(noop.enqueue(n) for n in range(5))
    assert rounds == [3, 2] and all(job.created for job in jobs)
    calls = [noop.enqueue(n).options(id=f"b{n}") for n in range(5, 12)]
    with pytest.raises(aioqueue.EnqueueUnconfirmed) as failed:
        await queue.enqueue_many(calls)
    assert rounds == [3, 2, 3, 3]
    assert failed.value.job_ids == [f"b{n}" for n in range(8, 12)]  # (b5..b7 are in)
    assert (await queue.counts()).ready == 5 + 3
