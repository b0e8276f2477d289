"""Eager mode: an enqueue runs its job in this process before it returns, after the same
checks and JSON round trip as any enqueue, on an in-process server of its own."""

from __future__ import annotations

import sys
from datetime import date
from decimal import Decimal

import pytest

import aioqueue
import aioqueue.store
from aioqueue.store import memory


def _app() -> aioqueue.App:
    """An App whose own server is nowhere: eager mode must not need it."""
    return aioqueue.App(redis_url="redis://127.0.0.1:1/0", connect_timeout=0.2)


async def test_an_enqueue_returns_a_finished_job_with_its_arguments_decoded() -> None:
    app = _app()
    got: list[object] = []

    @app.task
    async def bill(customer: str, on: date, amount: Decimal) -> str:
        got.append((on, amount))
        return f"{customer}: {amount} on {on:%d %b}"

    with app.eager():
        job = await bill.enqueue("ada", date(2024, 3, 1), Decimal("9.90"))
        assert await job.status() is aioqueue.JobStatus.COMPLETE
        assert await job.result() == "ada: 9.90 on 01 Mar"
    assert got == [(date(2024, 3, 1), Decimal("9.90"))]  # decoded as a worker decodes them


async def test_what_cannot_travel_as_json_is_refused_as_by_any_enqueue() -> None:
    app = _app()

    @app.task
    async def store(blob: object) -> None: ...

    with app.eager():
        with pytest.raises(aioqueue.SerializationError):
            await store.enqueue(object())
        with pytest.raises(aioqueue.EnqueueError):
            await store.enqueue(float("nan"))


async def test_jobs_a_job_enqueues_run_before_the_first_enqueue_returns() -> None:
    app = _app()
    order: list[str] = []

    @app.task
    async def sign_up(email: str) -> None:
        order.append(f"sign_up {email}")
        await welcome.enqueue(email)
        order.append("sign_up done")

    @app.task(queue="mail")
    async def welcome(email: str) -> None:
        order.append(f"welcome {email}")

    @app.task(queue="mail")
    async def shout(text: str) -> str:
        return text.upper() + "!"

    with app.eager():
        await sign_up.enqueue("ada@x")
        assert order == ["sign_up ada@x", "sign_up done", "welcome ada@x"]
        workflow = await aioqueue.chain(shout.enqueue("hi"), shout.callback(), shout.callback())
        assert await workflow.result() == "HI!!!"


async def test_retries_and_delays_do_not_hold_up_an_eager_enqueue() -> None:
    app = _app()
    attempts: list[int] = []

    @app.task(retries=2, backoff=aioqueue.Fixed(3600))
    async def flaky() -> int:
        attempts.append(1)
        if len(attempts) < 3:
            raise ValueError("not yet")
        return len(attempts)

    @app.task(retries=0)
    async def broken() -> None:
        raise ValueError("always")

    with app.eager():
        assert await (await flaky.enqueue()).result() == 3
        later = await flaky.enqueue().options(delay=86_400)
        assert await later.result() == 4
        failed = await broken.enqueue()
        assert await failed.status() is aioqueue.JobStatus.DEAD
        with pytest.raises(aioqueue.JobFailed, match="always"):
            await failed.result()


@pytest.mark.parametrize("block", ["with", "async with"])
async def test_the_apps_own_server_is_untouched_and_back_after(
    app: aioqueue.App, block: str
) -> None:
    """The suite's app (real or memory://): eager jobs go elsewhere; afterwards its
    enqueues reach its own server again, and a result there is heard as it is announced
    (the App's listener is its own again, not the eager server's)."""

    @app.task
    async def note(text: str) -> str:
        return text

    await note.enqueue("before")
    if block == "with":
        with app.eager():
            assert await (await note.enqueue("during")).result() == "during"
    else:
        async with app.eager():
            assert await (await note.enqueue("during")).result() == "during"
    after = await note.enqueue("after")
    counts = await app.queue().counts()
    assert (counts.ready, counts.complete) == (2, 0)
    async with app.worker():
        assert await after.result(timeout=10, poll_interval=3600) == "after"


async def test_eager_mode_needs_the_testing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_CONNECTION", [])
    monkeypatch.setitem(sys.modules, "aioqueue.store.memory_server", None)
    monkeypatch.delattr(aioqueue.store, "memory_server", raising=False)
    with pytest.raises(aioqueue.ConfigError, match=r"pip install 'aioqueue\[testing\]'"):
        _app().eager().__enter__()
