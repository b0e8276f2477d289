"""Handlers' ``Depends()`` at run time (worker/injection.py): what each job gets, each
provider once per job; cleanup however the job ends (success, failure, timeout, abort,
shutdown, a thread that returns after a shutdown); providers that raise; worker-scoped
providers opened once when the worker starts and closed when it stops, after its jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import aioqueue
from aioqueue import Depends
from tests.helpers import now, run_until_idle, wait_until


class Log:
    """What the providers and handlers did, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str) -> None:
        self.events.append(event)

    def has(self, event: str) -> bool:
        return event in self.events


async def status_is(job: aioqueue.Job[Any], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


# -- what a job gets -----------------------------------------------------------------------


async def test_every_provider_shape_and_each_provider_once_per_job(app: aioqueue.App) -> None:
    log, loop_thread = Log(), threading.get_ident()

    def settings() -> dict[str, str]:  # a def: runs in a thread, as a def handler does
        log(f"settings (in a thread: {threading.get_ident() != loop_thread})")
        return {"dsn": "db://"}

    async def pool(settings: dict[str, str] = Depends(settings)) -> AsyncIterator[str]:
        log("pool open")
        yield f"pool({settings['dsn']})"
        log("pool close")

    def session(
        job: aioqueue.JobContext, pool: str = Depends(pool)
    ) -> Iterator[str]:  # a generator: its cleanup after the yield
        log(f"session open for attempt {job.attempt}")
        yield f"session({pool})"
        log("session close")

    async def user(job: aioqueue.JobContext) -> str:
        return f"user of {job.task}"

    @app.task
    async def save(
        row: int,
        *,
        session: str = Depends(session),
        pool: str = Depends(pool),  # the same pool as the session's
        user: str = Depends(user),
        job: aioqueue.JobContext = Depends(aioqueue.current_job),
    ) -> str:
        log(f"save {row}")
        assert job is aioqueue.current_job()
        return f"{row} {session} {pool} {user}"

    saved = await save.enqueue(1)
    await run_until_idle(app)

    assert await saved.result(timeout=1) == "1 session(pool(db://)) pool(db://) user of save"
    assert log.events == [
        "settings (in a thread: True)", "pool open", "session open for attempt 1", "save 1",
        "session close", "pool close",
    ]  # fmt: skip


async def test_each_job_gets_its_own_values(app: aioqueue.App) -> None:
    opened: list[int] = []

    async def counter() -> AsyncIterator[int]:
        opened.append(len(opened))
        yield opened[-1]

    @app.task
    async def run(n: int, value: int = Depends(counter)) -> int:
        return value

    jobs = [await run.enqueue(n) for n in range(3)]
    await run_until_idle(app, concurrency=1)

    assert sorted([await job.result(timeout=1) for job in jobs]) == [0, 1, 2]


async def test_a_def_handler_gets_them_too_and_state_still_works(app: aioqueue.App) -> None:
    @app.on_startup
    async def fill(state: dict[str, Any]) -> None:
        state["greeting"] = "hello"

    def name(job: aioqueue.JobContext) -> str:
        return job.task

    @app.task
    def greet(*, who: str = Depends(name)) -> str:
        return f"{aioqueue.current_job().state['greeting']} {who}"

    job = await greet.enqueue()
    await run_until_idle(app)
    assert await job.result(timeout=1) == "hello greet"


async def test_a_chain_step_gets_its_input_first_and_its_dependencies_by_name(
    app: aioqueue.App,
) -> None:
    def scale() -> int:
        return 10

    @app.task
    async def start(x: int, *, factor: int = Depends(scale)) -> int:
        return x * factor

    @app.task
    async def add(previous: int, y: int, *, factor: int = Depends(scale)) -> int:
        return previous + y * factor

    workflow = await aioqueue.chain(start.enqueue(1), add.callback(2))
    await run_until_idle(app)
    assert await workflow.result(timeout=5) == 30


async def test_a_subscriber_gets_them(app: aioqueue.App) -> None:
    seen: list[str] = []

    async def prefix() -> str:
        return "got"

    @app.subscriber("events", group="g")
    async def on_event(body: Any, prefix: str = Depends(prefix)) -> None:
        seen.append(f"{prefix} {body}")

    await app.topic("events").add_group("g")
    await app.topic("events").publish("a")
    async with app.worker():
        await wait_until(lambda: now(seen == ["got a"]))


# -- cleanup however the job ends -------------------------------------------------------------


def tracked(log: Log) -> Any:
    """An async generator provider that logs what reached it at its yield."""

    async def resource() -> AsyncIterator[str]:
        log("open")
        try:
            yield "resource"
        except BaseException as exc:
            log(f"close after {type(exc).__name__}")
            raise
        log("close")

    return resource


async def test_cleanup_sees_the_handlers_error_and_changes_nothing(app: aioqueue.App) -> None:
    log = Log()
    resource = tracked(log)

    @app.task(retries=0)
    async def fail(x: int, r: str = Depends(resource)) -> None:
        raise ValueError("bad row")

    job = await fail.enqueue(1)
    await run_until_idle(app)

    assert log.events == ["open", "close after ValueError"]
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.error is not None and (info.error.type, info.error.message) == (
        "ValueError",
        "bad row",
    )


async def test_a_timed_out_job_cleans_up(app: aioqueue.App) -> None:
    log = Log()
    resource = tracked(log)

    @app.task(timeout=0.2, retries=0)
    async def slow(r: str = Depends(resource)) -> None:
        await asyncio.Event().wait()

    job = await slow.enqueue()
    await run_until_idle(app)

    assert log.events == ["open", "close after CancelledError"]
    info = await job.info()
    assert info.error is not None and info.error.type == "TimeoutError"


async def test_an_aborted_job_cleans_up(app: aioqueue.App) -> None:
    log, started = Log(), asyncio.Event()
    resource = tracked(log)

    @app.task
    async def wait(r: str = Depends(resource)) -> None:
        started.set()
        await asyncio.Event().wait()

    job = await wait.enqueue()
    async with app.worker() as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await job.cancel() is True
        await wait_until(lambda: status_is(job, aioqueue.JobStatus.CANCELLED))
        await wait_until(lambda: now(log.has("close after CancelledError")))
        assert worker.outcomes == {"abort": 1}
    assert log.events == ["open", "close after CancelledError"]


async def test_a_job_cancelled_at_shutdown_cleans_up_before_the_worker_stops(
    app: aioqueue.App,
) -> None:
    log, started = Log(), asyncio.Event()
    resource = tracked(log)

    @app.task
    async def wait(r: str = Depends(resource)) -> None:
        started.set()
        await asyncio.Event().wait()

    job = await wait.enqueue()
    async with app.worker(grace=0.1) as worker:
        await asyncio.wait_for(started.wait(), 5)
    assert log.events == ["open", "close after CancelledError"]
    assert worker.outcomes == {"release": 1}
    assert await job.status() is aioqueue.JobStatus.QUEUED


async def test_a_thread_that_returns_after_shutdown_cleans_up_then(app: aioqueue.App) -> None:
    """A def handler's thread cannot be stopped: its job stays leased past the worker's
    stop, and its dependencies, per job and per worker, stay open until it returns."""
    log, release = Log(), threading.Event()

    async def pool() -> AsyncIterator[str]:
        log("pool open")
        yield "pool"
        log("pool close")

    def session(pool: str = Depends(pool, scope="worker")) -> Iterator[str]:
        log("session open")
        yield "session"
        log("session close")

    @app.task
    def slow(*, session: str = Depends(session)) -> str:
        log("handler start")
        release.wait(30)
        log("handler end")
        return session

    job = await slow.enqueue()
    worker = app.worker(grace=0)
    try:
        await worker.start()
        await wait_until(lambda: now(log.has("handler start")))
        await asyncio.wait_for(worker.stop(), 10)  # returns with the thread running
        assert log.events == ["pool open", "session open", "handler start"]
    finally:
        release.set()
    assert await job.result(timeout=10) == "session"
    await wait_until(lambda: now(log.has("pool close")))
    assert log.events == [
        "pool open", "session open", "handler start", "handler end", "session close",
        "pool close",
    ]  # fmt: skip


async def test_a_cleanup_that_raises_is_logged_and_changes_nothing(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    async def leaky() -> AsyncIterator[int]:
        yield 1
        raise OSError("could not close")

    @app.task
    async def run(value: int = Depends(leaky)) -> int:
        return value

    job = await run.enqueue()
    with caplog.at_level(logging.ERROR, logger="aioqueue.worker.injection"):
        await run_until_idle(app)

    assert await job.result(timeout=1) == 1
    (record,) = caplog.records
    assert record.getMessage() == (
        "cleanup of provider test_a_cleanup_that_raises_is_logged_and_changes_nothing.<locals>"
        ".leaky raised OSError: could not close; ignored"
    )


async def test_a_generator_that_swallows_the_error_does_not_hide_it(app: aioqueue.App) -> None:
    def quiet() -> Iterator[int]:
        with contextlib.suppress(ValueError):  # (contextlib would suppress it: not here)
            yield 1

    @app.task(retries=0)
    async def fail(value: int = Depends(quiet)) -> None:
        raise ValueError("still failed")

    job = await fail.enqueue()
    await run_until_idle(app)
    assert (await job.status()) is aioqueue.JobStatus.DEAD


# -- providers that raise ----------------------------------------------------------------------


async def test_a_provider_that_raises_fails_the_attempt_naming_it(app: aioqueue.App) -> None:
    log, calls = Log(), 0
    resource = tracked(log)

    async def connect(r: str = Depends(resource)) -> str:
        nonlocal calls
        calls += 1
        raise ConnectionRefusedError("db down")

    @app.task(retries=1, backoff=aioqueue.Fixed(0))
    async def save(conn: str = Depends(connect)) -> None:
        log("handler")

    job = await save.enqueue()
    await run_until_idle(app)

    assert calls == 2  # retried by the task's policy
    assert log.events == ["open", "close after DependencyFailed"] * 2  # never the handler
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.error is not None
    assert info.error.type == "DependencyFailed"
    assert info.error.message == (
        "provider test_a_provider_that_raises_fails_the_attempt_naming_it.<locals>.connect "
        "raised ConnectionRefusedError: db down"
    )
    assert "ConnectionRefusedError: db down" in info.error.traceback


async def test_a_provider_may_ask_for_a_retry(app: aioqueue.App) -> None:
    attempts: list[int] = []

    def not_yet(job: aioqueue.JobContext) -> int:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise aioqueue.Retry(delay=0)
        return job.attempt

    @app.task(retries=3)
    async def run(attempt: int = Depends(not_yet)) -> int:
        return attempt

    job = await run.enqueue()
    await run_until_idle(app)
    assert await job.result(timeout=1) == 2
    assert attempts == [1, 2]


async def test_a_job_timed_out_in_a_def_providers_thread_goes_no_further(
    app: aioqueue.App,
) -> None:
    """A def provider's thread holds the timeout's cancellation, as a def handler's does;
    once it returns, the job ends timed out without calling its handler."""
    log = Log()

    def slow_settings() -> str:
        threading.Event().wait(0.5)
        return "settings"

    @app.task(timeout=0.1, retries=0)
    async def run(settings: str = Depends(slow_settings)) -> None:
        log("handler")

    job = await run.enqueue()
    await run_until_idle(app)

    assert log.events == []
    info = await job.info()
    assert info.error is not None and info.error.type == "TimeoutError"


# -- worker scope --------------------------------------------------------------------------------


async def test_worker_scoped_providers_open_once_and_close_after_the_jobs(
    app: aioqueue.App,
) -> None:
    log, started, release = Log(), asyncio.Event(), asyncio.Event()

    async def pool() -> AsyncIterator[str]:
        log("pool open")
        yield "pool"
        log("pool close")

    @app.on_shutdown
    async def after(state: dict[str, Any]) -> None:
        log("shutdown hook")

    @app.task
    async def run(n: int, pool: str = Depends(pool, scope="worker")) -> str:
        if n == 0:
            started.set()
            await release.wait()
        log(f"job {n}")
        return pool

    jobs = [await run.enqueue(n) for n in range(3)]
    async with app.worker(grace=5):
        await asyncio.wait_for(started.wait(), 5)
        await wait_until(lambda: now(log.has("job 1") and log.has("job 2")))
        asyncio.get_running_loop().call_soon(release.set)  # once the stop has begun
    assert [await job.result(timeout=1) for job in jobs] == ["pool"] * 3
    assert log.events[0] == "pool open"
    assert log.events[-3:] == ["job 0", "pool close", "shutdown hook"]
    assert log.events.count("pool open") == 1


async def test_a_worker_scoped_provider_that_raises_stops_the_start(
    app: aioqueue.App,
) -> None:
    log = Log()

    async def first() -> AsyncIterator[str]:
        log("first open")
        yield "first"
        log("first close")

    async def broken(first: str = Depends(first, scope="worker")) -> str:
        raise OSError("no route to db")

    @app.task
    async def run(value: str = Depends(broken, scope="worker")) -> None: ...

    worker = app.worker()
    with pytest.raises(aioqueue.DependencyFailed) as caught:
        await worker.start()
    await worker.stop()

    assert str(caught.value) == (
        "worker-scoped provider test_a_worker_scoped_provider_that_raises_stops_the_start."
        "<locals>.broken raised OSError: no route to db"
    )
    assert log.events == ["first open", "first close"]
