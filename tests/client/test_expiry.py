"""Expiry: ``.options(expires=...)``: a job not started within that long of being due ends
``expired`` without running (measured on the Redis clock, from its enqueue or, for a
delayed job, its due time); a retry never expires; bad values raise where written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.errors import PayloadError
from aioqueue.core.payload import Payload
from tests.helpers import redis_ms, run_until_idle, wait_until


@pytest.mark.parametrize("bad", [0, -1, True, "5", float("nan"), timedelta(0)])
async def test_bad_expiries_raise_where_written(app: aioqueue.App, bad: object) -> None:
    @app.task
    async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="expires must be positive"):
        work.enqueue().options(expires=bad)  # type: ignore[arg-type]


def test_a_payload_with_a_bad_expiry_is_a_payload_error() -> None:
    for raw in (b'{"t":"x","xp":0}', b'{"t":"x","xp":"5"}', b'{"t":"x","xp":1.5}'):
        with pytest.raises(PayloadError, match="expiry"):
            Payload.decode(raw)
    assert Payload.decode(b'{"t":"x","xp":250}').expires_ms == 250


async def _past(redis: Redis, start_ms: int, ms: int) -> None:
    """Wait until ``ms`` have passed on the Redis clock since ``start_ms``."""

    async def passed() -> bool:
        return await redis_ms(redis) - start_ms > ms

    await wait_until(passed, timeout=10)


async def test_a_job_not_started_in_time_expires_and_never_runs(
    app: aioqueue.App, redis: Redis
) -> None:
    ran: list[str] = []

    @app.task
    async def work(name: str) -> None:
        ran.append(name)

    start = await redis_ms(redis)
    late = await work.enqueue("late").options(expires=0.2)
    kept = await work.enqueue("kept").options(expires=timedelta(minutes=5))
    plain = await work.enqueue("plain")
    await _past(redis, start, 300)  # no worker meanwhile
    worker = await run_until_idle(app)
    assert sorted(ran) == ["kept", "plain"]
    with pytest.raises(aioqueue.JobExpired):
        await late.result(timeout=5)
    info = await late.info()
    assert info is not None and info.status is aioqueue.JobStatus.EXPIRED
    assert info.attempts == 0 and info.error is not None and info.error.type == "JobExpired"
    assert worker.outcomes["expire"] == 1
    await kept.result(timeout=5)
    await plain.result(timeout=5)


async def test_a_delayed_job_expires_from_its_due_time(app: aioqueue.App, redis: Redis) -> None:
    """Its window opens when it is due, not at its enqueue; and it closes even while no
    worker was there to promote it."""
    ran: list[str] = []

    @app.task
    async def work(name: str) -> None:
        ran.append(name)

    start = await redis_ms(redis)
    on_time = await work.enqueue("on time").options(delay=0.3, expires=60)
    missed = await work.enqueue("missed").options(delay=0.1, expires=0.2)
    await _past(redis, start, 450)  # the second was due at 100 ms: 350 ms ago, no worker
    await run_until_idle(app)
    assert ran == ["on time"]
    await on_time.result(timeout=5)
    with pytest.raises(aioqueue.JobExpired):
        await missed.result(timeout=5)


async def test_a_retry_never_expires(app: aioqueue.App) -> None:
    attempts: list[int] = []

    @app.task(retries=1, backoff=aioqueue.Fixed(0.3))
    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first try fails")
        return "ok"

    job = await flaky.enqueue().options(expires=0.1)  # the retry is due 0.3 s later
    await run_until_idle(app)
    assert await job.result(timeout=5) == "ok" and len(attempts) == 2
