"""``advance``: time moves on a memory:// server as a running worker would see it pass."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

import aioqueue
from aioqueue.testing import advance, drain
from tests.helpers import plain_client, redis_ms


async def test_a_delayed_job_runs_once_its_delay_has_passed_and_not_before(
    aioqueue_app: aioqueue.App,
) -> None:
    app = aioqueue_app

    @app.task
    async def remind(text: str) -> str:
        return text

    job = await remind.enqueue("stand up").options(delay=3600)
    assert job not in await advance(app, 3599)
    assert await job.status() is aioqueue.JobStatus.SCHEDULED
    ran = await advance(app, 1)
    assert ran[job].ok
    assert await job.result(timeout=1) == "stand up"


async def test_a_job_every_minute_runs_three_times_in_three_minutes(
    aioqueue_app: aioqueue.App,
) -> None:
    app = aioqueue_app
    seen: list[tuple[int, int]] = []  # (its tick, when it ran): Redis clock, ms

    @app.periodic(every=60)
    @app.task
    async def tick() -> None:
        tick_ms = int(aioqueue.current_job().id.rsplit(":", 1)[1])
        seen.append((tick_ms, await redis_ms(await app.client())))

    assert len(await advance(app, 180)) == 3
    assert len(await advance(app, 60)) == 1
    ticks = [tick_ms for tick_ms, _ in seen]
    assert [later - earlier for earlier, later in itertools.pairwise(ticks)] == [60_000] * 3
    assert all(ran >= tick_ms for tick_ms, ran in seen)  # none before its time
    assert len(await drain(app)) == 0  # (a burst worker does not tick)


async def test_a_cron_job_runs_at_its_hour_in_its_time_zone(aioqueue_app: aioqueue.App) -> None:
    app = aioqueue_app
    hours: list[int] = []

    @app.periodic(cron="30 9 * * *", tz="Europe/Paris")
    @app.task
    async def morning() -> None:
        now = datetime.fromtimestamp(await redis_ms(await app.client()) / 1000, UTC)
        hours.append(now.astimezone(ZoneInfo("Europe/Paris")).hour)

    ran = await advance(app, 2 * 24 * 3600)
    assert len(ran.of(morning)) == 2
    assert hours == [9, 9]


async def test_a_periodic_job_added_at_run_time_ticks_too(aioqueue_app: aioqueue.App) -> None:
    app = aioqueue_app

    @app.task
    async def ping(host: str) -> str:
        return host

    await app.add_periodic(ping, every=600, args=("db",), name="ping-db")
    ran = await advance(app, 1800)
    assert [job.id.split(":")[1] for job in ran.values()] == ["ping-db"] * 3


async def test_retries_within_the_time_advanced_run_and_later_ones_wait(
    aioqueue_app: aioqueue.App,
) -> None:
    app = aioqueue_app

    @app.task(retries=2, backoff=aioqueue.Fixed(600))
    async def flaky() -> None:
        raise ValueError("down")

    job = await flaky.enqueue()
    await advance(app, 0)  # runs what is due now: the first attempt
    assert (await job.info()).attempts == 1
    await advance(app, 900)  # the second attempt at 600 s; the third is due at 1200 s
    info = await job.info()
    assert (info.attempts, info.status) == (2, aioqueue.JobStatus.SCHEDULED)
    ran = await advance(app, 400)  # (past 1200 s by more than the real time the runs took)
    assert (ran[job].outcome, (await job.status())) == ("bury", aioqueue.JobStatus.DEAD)


async def test_a_result_expires_when_its_time_is_up(aioqueue_url: str) -> None:
    """Keys expire by the server's clock, so a result kept 60 s is gone after advance."""
    app = aioqueue.App(redis_url=aioqueue_url, result_ttl=60)

    @app.task
    async def answer() -> int:
        return 42

    try:
        job = await answer.enqueue()
        await drain(app)
        await advance(app, 59)
        assert await job.result(timeout=1) == 42
        await advance(app, 2)
        with pytest.raises(aioqueue.JobNotFound):
            await job.status()
    finally:
        await app.close()


async def test_each_memory_server_keeps_its_own_time(aioqueue_app: aioqueue.App) -> None:
    other = plain_client("memory://another-server")
    try:
        before = await redis_ms(other)
        await advance(aioqueue_app, 86_400)
        moved = await redis_ms(await aioqueue_app.client())
        assert moved - before >= 86_400_000
        assert await redis_ms(other) - before < 86_400_000
    finally:
        await other.aclose()


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "60"])
async def test_advance_takes_a_finite_number_of_seconds(
    aioqueue_app: aioqueue.App, seconds: object
) -> None:
    with pytest.raises(aioqueue.ConfigError, match="finite number of seconds"):
        await advance(aioqueue_app, seconds)  # type: ignore[arg-type]


@pytest.mark.real_redis("a real server's clock")
async def test_advance_says_a_real_servers_clock_cannot_move(app: aioqueue.App) -> None:
    with pytest.raises(aioqueue.ConfigError, match="whose clock cannot be moved"):
        await advance(app, 60)
