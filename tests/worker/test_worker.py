"""Running jobs: concurrency, queues, sync handlers, timeouts, retries, failure outcomes and
graceful shutdown (DESIGN.md §2, §4, §6)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import leasing
from tests.helpers import counts, drain, now, run_until_idle, wait_until


async def error_of(job: aioqueue.Job[Any]) -> aioqueue.JobFailed:
    with pytest.raises(aioqueue.JobFailed) as raised:
        await job.result(timeout=1)
    return raised.value


# -- concurrency and queues -----------------------------------------------------------------


async def test_concurrency_bound_is_respected(app: aioqueue.App) -> None:
    total, limit = 20, 3
    permits = asyncio.Semaphore(0)  # the test lets jobs finish one at a time
    running = peak = finished = 0

    @app.task(queue="q")
    async def gated(n: int) -> int:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        try:
            await permits.acquire()
        finally:
            running -= 1
            finished += 1
        return n

    jobs = [await gated.enqueue(n) for n in range(total)]
    async with app.worker(concurrency=limit, lease=2) as worker:
        for released in range(total):
            expected = min(limit, total - released)

            async def settled(released: int = released, expected: int = expected) -> bool:
                return finished == released and running == expected

            await wait_until(settled)
            assert worker.running == expected
            if released == 0:  # the worker holds exactly `limit` leases, no more
                assert await app.queue("q").counts() == counts(ready=total - limit, active=limit)
            permits.release()
        assert [await job.result(timeout=5) for job in jobs] == list(range(total))
    assert peak == limit
    assert worker.outcomes == {"complete": total}


async def test_one_worker_serves_several_queues(app: aioqueue.App) -> None:
    @app.task(queue="alpha")
    async def in_alpha() -> str:
        return "alpha"

    @app.task(queue="beta")
    async def in_beta() -> str:
        return "beta"

    @app.task(queue="gamma")
    async def in_gamma() -> str:
        return "gamma"

    a, b, c = await in_alpha.enqueue(), await in_beta.enqueue(), await in_gamma.enqueue()
    worker = await run_until_idle(app, queues=["alpha", "beta"])
    assert worker.outcomes == {"complete": 2}
    assert (await a.result(timeout=1), await b.result(timeout=1)) == ("alpha", "beta")
    assert await c.status() is aioqueue.JobStatus.QUEUED  # not a queue this worker serves

    everything = await run_until_idle(app)  # default: every queue the app's tasks use
    assert everything.outcomes == {"complete": 1}
    assert await c.result(timeout=1) == "gamma"


async def test_sync_handler_runs_in_a_thread(app: aioqueue.App) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    @app.task(queue="q")
    def blocking(a: int, b: int) -> int:
        seen.append(threading.get_ident())
        time.sleep(0.01)  # blocking is fine here: this is not the event loop's thread
        return a * b

    jobs = [await blocking.enqueue(n, 10) for n in range(3)]
    worker = await run_until_idle(app)
    assert worker.outcomes == {"complete": 3}
    assert [await job.result(timeout=1) for job in jobs] == [0, 10, 20]
    assert len(seen) == 3
    assert loop_thread not in seen


async def test_finished_jobs_are_freed_without_the_garbage_collector(app: aioqueue.App) -> None:
    # A reference cycle through each finished job (its context held a callable bound to
    # the job) left ~10 objects per job to the collector: ~15 % of a no-op job's CPU.
    @app.task(queue="q")
    async def noop(n: int) -> None:
        return None

    async def garbage_after_draining(jobs: int) -> int:
        await app.queue("q").enqueue_many(noop.enqueue(n) for n in range(jobs))
        gc.collect()
        gc.disable()
        try:
            assert (await drain(app, queues=["q"]))["complete"] == jobs
            return gc.collect()
        finally:
            gc.enable()

    # A cycle per job shows in every round; a loaded machine's (timeouts that came, takes
    # that came back short) in some: the best of three rounds is what the jobs leave.
    extra = []
    for _ in range(3):
        few, many = await garbage_after_draining(50), await garbage_after_draining(550)
        extra.append(many - few)
        if extra[-1] < 250:
            break
    assert min(extra) < 250, f"{extra} more objects left in cycles by 500 more jobs"


# -- timeouts -------------------------------------------------------------------------------


async def test_async_handler_timeout_is_a_failure(app: aioqueue.App) -> None:
    @app.task(queue="q", timeout=0.2, retries=0)
    async def hangs() -> None:
        await asyncio.Event().wait()

    job = await hangs.enqueue()
    worker = await run_until_idle(app, lease=1)
    assert worker.outcomes == {"bury": 1}
    failed = await error_of(job)
    assert failed.error_type in {"TimeoutError", "HandlerTimeout"}
    assert (await job.info()).attempts == 1


async def test_handler_swallowing_cancellation_is_a_timeout_not_success(
    app: aioqueue.App,
) -> None:
    swallowed = False

    @app.task(queue="q", timeout=0.2, retries=0)
    async def stubborn() -> str:
        nonlocal swallowed
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed = True
        return "pretended to succeed"

    job = await stubborn.enqueue()
    worker = await run_until_idle(app, lease=1)
    assert swallowed
    assert worker.outcomes == {"bury": 1}
    failed = await error_of(job)
    assert failed.error_type in {"TimeoutError", "HandlerTimeout"}
    assert (await job.info()).result_raw is None


async def test_handler_blocking_the_loop_is_a_timeout(app: aioqueue.App) -> None:
    @app.task(queue="q", timeout=0.2, retries=0)
    async def blocks() -> str:
        time.sleep(0.4)  # noqa: ASYNC251 -- the misbehaviour under test
        return "late"

    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    bad = await blocks.enqueue()
    good = await ok.enqueue()
    worker = await run_until_idle(app, concurrency=1, lease=2)
    assert worker.outcomes == {"bury": 1, "complete": 1}
    failed = await error_of(bad)
    assert failed.error_type in {"TimeoutError", "HandlerTimeout"}
    assert await good.result(timeout=1) == "ok"


async def test_handler_ignoring_cancellation_still_times_out(app: aioqueue.App) -> None:
    let_go = asyncio.Event()  # set at the end, so no handler outlives the test

    @app.task(queue="q", timeout=0.2, retries=0)
    async def deaf() -> None:
        while not let_go.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await let_go.wait()

    job = await deaf.enqueue()
    async with app.worker(lease=2, grace=0):
        try:
            await wait_until(lambda: _is_finished(job), timeout=10)
        finally:
            let_go.set()
    assert (await error_of(job)).error_type in {"TimeoutError", "HandlerTimeout"}


async def test_hanging_sync_handler_is_a_timeout(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    """Once its thread returns: till then the job stays leased here (see test_threads.py)."""
    unblock = threading.Event()

    @app.task(queue="q", timeout=0.2, retries=0)
    def hangs() -> str:
        unblock.wait(10)
        return "late"

    job = await hangs.enqueue()
    try:
        async with app.worker(lease=1) as worker:
            await wait_until(lambda: now("passed its 0.2s timeout" in caplog.text))
            assert await job.status() is aioqueue.JobStatus.ACTIVE
            unblock.set()
            await wait_until(lambda: _is_finished(job))
    finally:
        unblock.set()
    assert worker.outcomes == {"bury": 1}
    failed = await error_of(job)
    assert failed.error_type == "HandlerTimeout"
    assert "thread, which cannot be stopped" in failed.error


# -- retries and failure outcomes -----------------------------------------------------------


async def test_failed_attempts_are_counted_then_dead(app: aioqueue.App) -> None:
    calls = 0

    @app.task(queue="q", retries=2, backoff=aioqueue.Fixed(0))
    async def always_fails() -> None:
        nonlocal calls
        calls += 1
        raise ValueError(f"attempt {calls}")

    job = await always_fails.enqueue()
    outcomes = await drain(app)
    assert calls == 3
    assert outcomes == {"retry": 2, "bury": 1}
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.attempts == 3
    assert info.error is not None
    assert info.error.type == "ValueError"
    assert info.error.message == "attempt 3"
    assert "always_fails" in info.error.traceback


async def test_retry_request_with_zero_delay_is_honoured(app: aioqueue.App) -> None:
    calls = 0

    # The task's own backoff would push a retry an hour out; Retry(delay=0) overrides it.
    @app.task(queue="q", retries=2, backoff=aioqueue.Exponential(base=3600, jitter=False))
    async def needs_three() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise aioqueue.Retry(delay=0)
        return "third time"

    job = await needs_three.enqueue()
    outcomes = await drain(app)
    assert outcomes == {"retry": 2, "complete": 1}
    assert await job.result(timeout=1) == "third time"
    assert (await job.info()).attempts == 3


async def test_retry_request_delay_overrides_backoff(app: aioqueue.App, redis: Redis) -> None:
    @app.task(queue="q", retries=3, backoff=aioqueue.Fixed(0))
    async def later() -> None:
        raise aioqueue.Retry(delay=3600)

    job = await later.enqueue()
    worker = await run_until_idle(app, wait_retries=False)  # not an hour
    assert worker.outcomes == {"retry": 1}
    info = await job.info()
    assert info.status is aioqueue.JobStatus.SCHEDULED
    assert info.attempts == 1
    assert info.error is not None
    assert info.error.type == "Retry"
    due_ms = await redis.zscore(app.queue("q").keys.schedule, job.id)
    assert due_ms is not None
    assert info.started_at_ms is not None
    assert due_ms - info.started_at_ms > 3000 * 1000  # about an hour out, not backoff's 0


async def test_retry_request_counts_towards_max_attempts(app: aioqueue.App) -> None:
    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0))
    async def forever() -> None:
        raise aioqueue.Retry(delay=0)

    job = await forever.enqueue()
    outcomes = await drain(app)
    assert outcomes == {"retry": 1, "bury": 1}
    assert (await job.info()).attempts == 2
    assert (await error_of(job)).error_type == "Retry"


async def test_never_retry_exceptions_go_straight_to_dead(app: aioqueue.App) -> None:
    calls = 0

    @app.task(queue="q", retries=5, backoff=aioqueue.Fixed(0), never_retry=(ValueError,))
    async def picky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("transient")  # not listed: retried
        raise ValueError("permanent")  # listed: no more attempts

    job = await picky.enqueue()
    outcomes = await drain(app)
    assert outcomes == {"retry": 1, "bury": 1}
    assert calls == 2
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.attempts == 2
    assert info.error is not None
    assert info.error.type == "ValueError"


async def test_dead_letter_false_ends_failed_not_dead(app: aioqueue.App) -> None:
    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0), dead_letter=False)
    async def fails() -> None:
        raise RuntimeError("nope")

    job = await fails.enqueue()
    outcomes = await drain(app)
    assert outcomes == {"retry": 1, "fail": 1}
    assert await job.status() is aioqueue.JobStatus.FAILED
    failed = await error_of(job)
    assert (failed.error_type, failed.error) == ("RuntimeError", "nope")
    queue = app.queue("q")
    assert await queue.counts() == counts()
    assert await queue.dead_jobs() == []
    info = await job.info()
    assert info.attempts == 2
    assert info.finished_at_ms is not None


@pytest.mark.parametrize(
    "value",
    [{1, 2}, object(), b"bytes", float("nan"), {"scores": [1.0, float("inf")]}],
    ids=["set", "object", "bytes", "nan", "inf-inside"],
)
async def test_unserializable_result_goes_dead(app: aioqueue.App, value: object) -> None:
    """Dead with the reason, never stored as something else (JSON would write NaN as null)."""
    calls = 0

    @app.task(queue="q", retries=3, backoff=aioqueue.Fixed(0))
    async def returns_junk() -> object:
        nonlocal calls
        calls += 1
        return value

    job = await returns_junk.enqueue()
    worker = await run_until_idle(app)
    assert worker.outcomes == {"bury": 1}
    assert calls == 1  # the same value would come back: not retried
    assert (await error_of(job)).error_type == "SerializationError"
    assert await app.queue("q").counts() == counts(dead=1)


# -- graceful shutdown ------------------------------------------------------------------------


async def test_shutdown_puts_a_stuck_job_back_to_ready_at_once(app: aioqueue.App) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    cancelled = 0

    @app.task(queue="q", timeout=60)
    async def stuck() -> str:
        nonlocal cancelled
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return "finished"

    job = await stuck.enqueue()
    async with app.worker(grace=0.2, lease=30) as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await job.status() is aioqueue.JobStatus.ACTIVE
    assert cancelled == 1
    assert worker.outcomes == {"release": 1}
    # Back to ready now, not after its 30 s lease runs out, and the attempt is not counted.
    info = await job.info()
    assert info.status is aioqueue.JobStatus.QUEUED
    assert info.attempts == 0
    assert await app.queue("q").counts() == counts(ready=1)

    release.set()
    later = await run_until_idle(app)
    assert later.outcomes == {"complete": 1}
    assert await job.result(timeout=1) == "finished"
    assert (await job.info()).attempts == 1


async def test_job_finishing_within_grace_completes_normally(app: aioqueue.App) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    cancelled = False

    @app.task(queue="q", timeout=60)
    async def slow() -> str:
        nonlocal cancelled
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled = True
            raise
        return "finished"

    job = await slow.enqueue()
    async with app.worker(grace=30, lease=2) as worker:
        await asyncio.wait_for(started.wait(), 5)
        # Runs at the first suspension inside the worker's exit: after it stopped taking.
        asyncio.get_running_loop().call_soon(release.set)
    assert not cancelled
    assert worker.outcomes == {"complete": 1}
    assert await job.result(timeout=1) == "finished"
    assert await app.queue("q").counts() == counts()


async def test_handler_raising_cancelled_error_itself_is_not_rerun_forever(
    app: aioqueue.App,
) -> None:
    """It once came back as a shutdown 'release': requeued uncounted, rerun forever."""
    calls = 0

    @app.task(queue="q", retries=0)
    async def raises_cancelled() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError  # e.g. leaked from a library's cancelled inner task

    job = await raises_cancelled.enqueue()
    async with app.worker(lease=2) as worker:
        await wait_until(lambda: _is_finished(job), timeout=2)
    assert calls == 1
    assert worker.outcomes == {"bury": 1}
    assert (await error_of(job)).error_type == "CancelledError"


async def _is_finished(job: aioqueue.Job[Any]) -> bool:
    return (await job.status()).finished


async def test_burst_worker_does_not_strand_a_retried_job(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replays one interleaving of the race: Redis runs a take that finds nothing ready
    before the retry's ack, and the worker reads the ack's reply before the take's (two
    connections). Unpatched, the same thing happens now and then on its own. (At start the
    fetch loop and the promoter both take: one gets the job, the other comes back empty.)"""
    real_take, real_ack = leasing.take, leasing.ack
    empty_take_ran, acked = asyncio.Event(), asyncio.Event()
    replayed = False

    async def take(redis: Any, keys: QueueKeys, **kwargs: Any) -> lifecycle.TakeResult:
        nonlocal replayed
        result = await real_take(redis, keys, **kwargs)
        if kwargs["limit"] and not result.jobs and not acked.is_set() and not replayed:
            replayed = True
            empty_take_ran.set()
            await asyncio.wait_for(acked.wait(), 5)  # its reply is handled after the ack's
        return result

    async def ack(*args: Any, **kwargs: Any) -> list[bool]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(empty_take_ran.wait(), 1)
        settled = await real_ack(*args, **kwargs)
        acked.set()
        return settled

    monkeypatch.setattr(leasing, "take", take)
    monkeypatch.setattr(leasing, "ack", ack)

    calls = 0

    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0))
    async def fails_once() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("first attempt")
        return "second attempt"

    job = await fails_once.enqueue()
    worker = await run_until_idle(app, queues=["q"])
    assert replayed
    assert worker.outcomes == {"retry": 1, "complete": 1}
    assert await job.status() is aioqueue.JobStatus.COMPLETE


async def test_a_job_blocking_the_event_loop_is_named_in_the_log(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(timeout=30)
    async def hog() -> None:
        time.sleep(0.6)  # noqa: ASYNC251 - blocking the loop is the point

    job = await hog.enqueue()
    with caplog.at_level(logging.WARNING, logger="aioqueue.worker.looplag"):
        await run_until_idle(app, loop_lag_warning=0.2)
    blocked = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert blocked, "the stall was not reported"
    assert f"job {job.id} (hog)" in blocked[0]
    assert "time.sleep(0.6)" in blocked[0]


async def test_a_burst_worker_finishes_the_retries_it_scheduled(app: aioqueue.App) -> None:
    """A CI-style burst run once left a failed job's delayed retry unrun: work it started
    (retries included) is finished, unless it is told not to wait for them."""
    calls = 0

    @app.task(retries=1, backoff=aioqueue.Fixed(0.3))
    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("first attempt")
        return "second attempt"

    job = await flaky.enqueue()
    worker = await run_until_idle(app)
    assert worker.outcomes == {"retry": 1, "complete": 1}
    assert await job.result(timeout=1) == "second attempt"


async def test_a_burst_worker_can_leave_its_retries_for_later(app: aioqueue.App) -> None:
    @app.task(retries=1, backoff=aioqueue.Fixed(60))
    async def flaky() -> None:
        raise ConnectionError("always")

    job = await flaky.enqueue()
    worker = await run_until_idle(app, wait_retries=False)
    assert worker.outcomes == {"retry": 1}
    assert await job.status() is aioqueue.JobStatus.SCHEDULED


async def test_retries_forever_until_it_succeeds(app: aioqueue.App) -> None:
    calls = 0

    @app.task(retries="forever", backoff=aioqueue.Fixed(0))
    async def stubborn() -> int:
        nonlocal calls
        calls += 1
        if calls <= 5:  # past the app's default of 3 attempts
            raise ConnectionError("not yet")
        return calls

    job = await stubborn.enqueue()
    worker = await run_until_idle(app)
    assert worker.outcomes == {"retry": 5, "complete": 1}
    assert await job.result(timeout=1) == 6
    assert (await job.info()).max_attempts == -1


async def test_retries_forever_still_ends_on_a_never_retry_error(app: aioqueue.App) -> None:
    @app.task(retries="forever", backoff=aioqueue.Fixed(0), never_retry=(KeyError,))
    async def doomed() -> None:
        raise KeyError("no such thing")

    job = await doomed.enqueue()
    worker = await run_until_idle(app)
    assert worker.outcomes == {"bury": 1}
    assert (await error_of(job)).error_type == "KeyError"


@pytest.mark.parametrize("retries", [-1, 1.5, True, "always"])
async def test_bad_retries_raise(app: aioqueue.App, retries: Any) -> None:
    with pytest.raises(aioqueue.ConfigError, match="retries"):
        app.task(retries=retries)(_noop)


async def _noop() -> None: ...


async def test_only_a_burst_worker_keeps_track_of_its_retries(app: aioqueue.App) -> None:
    """A long-running worker must not remember every id it ever retried."""

    @app.task(retries=1, backoff=aioqueue.Fixed(3600))
    async def flaky() -> None:
        raise ConnectionError("later")

    await flaky.enqueue()
    async with app.worker() as worker:
        await wait_until(lambda: _outcome_is(worker, "retry"))
        assert all(not acks.retrying for acks in worker._acks)


async def _outcome_is(worker: aioqueue.Worker, outcome: str) -> bool:
    return worker.outcomes[outcome] > 0


async def test_the_ack_loop_survives_redis_pys_writer_race(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's asyncio writer raises AttributeError or TypeError (not ConnectionError)
    when the peer closed the connection under a write (redis-py #3546, #4287). The ack
    loop keeps the batch and tries again instead of dying with the jobs unacked."""
    real_ack = leasing.ack
    failures: list[int] = []

    async def racing_ack(*args: Any, **kwargs: Any) -> list[bool]:
        if len(failures) < 2:
            failures.append(1)
            raise (AttributeError if len(failures) == 1 else TypeError)("'NoneType' object")
        return await real_ack(*args, **kwargs)

    monkeypatch.setattr(leasing, "ack", racing_ack)

    @app.task
    async def echo(value: int) -> int:
        return value

    job = await echo.enqueue(7)
    async with app.worker():
        assert await job.result(timeout=10) == 7
    assert len(failures) == 2


async def test_a_job_announced_after_the_promoter_found_the_queue_dry_is_taken(
    app: aioqueue.App,
) -> None:
    """The promoter's take of a due job comes back short (the worker had room for more),
    which says the queue ran dry, while the fetch loop waits in BLPOP. A job announced
    after that (a notify token: here a group's job, which no offer takes) must be taken at
    once: the wake-up spent the token, and the loop went back to wait until its BLPOP timed
    out (idle_wait, here 30 s) before."""

    @app.task
    async def echo(value: int) -> int:
        return value

    async with app.worker(concurrency=10, idle_wait=30):
        delayed = await echo.enqueue(1).options(delay=0.2)
        assert await delayed.result(timeout=5) == 1  # run by the promoter's take
        grouped = await echo.enqueue(2).options(group="g")
        assert await grouped.result(timeout=5) == 2
