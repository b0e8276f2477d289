"""Observers: headers added at enqueue reach the job's context; workers report each
start and each attempt's end; an observer that raises changes nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import aioqueue
from aioqueue import JobEvent, Observer, current_job
from tests.helpers import drain


class Recorder(Observer):
    def __init__(self) -> None:
        self.enqueued: list[tuple[str, str]] = []
        self.open_during_write: list[bool] = []
        self.started: list[JobEvent] = []
        self.ended: list[tuple[str, str, float]] = []

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        index = len(self.open_during_write)
        self.open_during_write.append(True)
        yield
        self.open_during_write[index] = False

    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Any:
        self.enqueued.append((queue, task))
        headers["traceparent"] = f"00-{'a' * 32}-{'b' * 16}-01"
        return self._write()

    def job_started(self, job: JobEvent) -> None:
        self.started.append(job)

    def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
        self.ended.append((job.task, outcome, seconds))


async def test_headers_travel_from_enqueue_to_the_handler(app: aioqueue.App) -> None:
    recorder = app.add_observer(Recorder())
    seen: list[dict[str, str]] = []

    @app.task
    async def work() -> None:
        seen.append(dict(current_job().headers))

    await work.enqueue()
    await app.queue().enqueue_many([work.enqueue(), work.enqueue()])
    await drain(app)
    assert seen == [{"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"}] * 3
    assert recorder.enqueued == [("default", "work")] * 3
    assert recorder.open_during_write == [False] * 3  # exited once the write was done


async def test_workers_report_starts_and_outcomes(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    recorder = app.add_observer(Recorder())

    @app.task(retries=1, backoff=aioqueue.Fixed(0))
    async def flaky() -> None:
        if current_job().attempt == 1:
            raise RuntimeError("once")

    @app.task
    async def fine() -> int:
        return 1

    await flaky.enqueue()
    await fine.enqueue()
    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as producer:  # lacks the code
        await producer.queue().enqueue("no_such_task")
    await drain(app)
    assert sorted((task, outcome) for task, outcome, _ in recorder.ended) == [
        ("fine", "complete"), ("flaky", "complete"), ("flaky", "retry"),
        ("no_such_task", "bury"),
    ]  # fmt: skip
    assert all(seconds >= 0 for _, _, seconds in recorder.ended)
    assert sorted(event.attempt for event in recorder.started if event.task == "flaky") == [1, 2]
    assert all(event.waited is not None and event.waited >= 0 for event in recorder.started)
    assert {event.queue for event in recorder.started} == {"default"}


async def test_an_observer_that_raises_changes_nothing(app: aioqueue.App) -> None:
    class Broken(Observer):
        def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Any:
            raise RuntimeError("observer bug")

        def job_started(self, job: JobEvent) -> None:
            raise RuntimeError("observer bug")

        def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
            raise RuntimeError("observer bug")

    app.add_observer(Broken())

    @app.task
    async def fine() -> int:
        return 1

    job = await fine.enqueue()
    await drain(app)
    assert await job.result(timeout=5) == 1
