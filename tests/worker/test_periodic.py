"""Periodic jobs: tick arithmetic, one job per tick across worker processes, run-time specs."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.periodic import Periodic
from aioqueue.worker.scheduler import PeriodicScheduler
from tests.helpers import wait_until

HOUR_MS = 3_600_000


def _ms(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)


def test_interval_ticks_are_aligned_to_the_epoch() -> None:
    spec = Periodic(name="p", task="t", queue="q", every=60)
    now = _ms(2026, 1, 1, 12, 0, 30)
    assert spec.last_tick(now) == _ms(2026, 1, 1, 12, 0, 0)
    assert spec.next_tick(now) == _ms(2026, 1, 1, 12, 1, 0)
    assert spec.last_tick(_ms(2026, 1, 1, 12, 1, 0)) == _ms(2026, 1, 1, 12, 1, 0)


def test_cron_ticks_follow_the_time_zone() -> None:
    spec = Periodic(name="p", task="t", queue="q", cron="0 9 * * *", tz="Europe/Paris")
    winter_noon = _ms(2026, 1, 15, 12, 0, 0)  # 13:00 in Paris
    assert spec.last_tick(winter_noon) == _ms(2026, 1, 15, 8, 0, 0)  # 09:00 CET
    summer_noon = _ms(2026, 7, 15, 12, 0, 0)
    assert spec.last_tick(summer_noon) == _ms(2026, 7, 15, 7, 0, 0)  # 09:00 CEST
    assert spec.next_tick(summer_noon) == _ms(2026, 7, 16, 7, 0, 0)
    on_the_tick = _ms(2026, 7, 16, 7, 0, 0)
    assert spec.last_tick(on_the_tick) == on_the_tick
    assert spec.next_tick(on_the_tick) == _ms(2026, 7, 17, 7, 0, 0)


def test_missed_ticks_policy() -> None:
    skip = Periodic(name="p", task="t", queue="q", every=3600, misfire_grace=60)
    latest = Periodic(name="p", task="t", queue="q", every=3600, missed="latest")
    just_after, long_after = _ms(2026, 1, 1, 12, 0, 30), _ms(2026, 1, 1, 12, 30, 0)
    assert skip.tick_to_enqueue(just_after) == _ms(2026, 1, 1, 12, 0, 0)
    assert skip.tick_to_enqueue(long_after) is None  # stale: skipped, no burst on restart
    assert latest.tick_to_enqueue(long_after) == _ms(2026, 1, 1, 12, 0, 0)


@pytest.mark.parametrize(
    "options",
    [
        {"every": 1, "cron": "* * * * *"},
        {},
        {"cron": "not a cron"},
        {"every": 1, "tz": "Mars/Olympus"},
        {"every": 1, "missed": "all"},
        {"every": 0},
    ],
)
def test_bad_specs_are_rejected(options: dict[str, object]) -> None:
    with pytest.raises(aioqueue.ConfigError):
        Periodic(name="p", task="t", queue="q", **options)  # type: ignore[arg-type]


def test_specs_round_trip_through_json() -> None:
    spec = Periodic(
        name="p", task="t", queue="q", cron="*/5 * * * *", tz="Asia/Tokyo",
        args=(1, "x"), kwargs={"k": [1]}, missed="latest", declared=False,
    )  # fmt: skip
    assert Periodic.decode(spec.encode()) == spec


def test_decorator_checks_arguments_and_names(app: aioqueue.App) -> None:
    @app.task
    async def report(day: str) -> None: ...

    with pytest.raises(TypeError):
        app.periodic(every=60)(report)  # report needs `day`
    app.periodic(every=60, args=["mon"])(report)
    with pytest.raises(aioqueue.ConfigError):
        app.periodic(every=30, args=["tue"])(report)  # same name twice
    assert [spec.name for spec in app.declared_periodic("default")] == ["report"]


async def test_each_tick_is_enqueued_once_and_stale_ticks_are_skipped(
    app: aioqueue.App, redis: Redis
) -> None:
    queue = app.queue()
    client = await app.client()
    schedulers = [
        PeriodicScheduler(client, queue.keys, declared=[], max_payload_bytes=1000) for _ in range(3)
    ]
    await app.add_periodic("hourly", every=3600, missed="latest", name="latest")
    await app.add_periodic("hourly", every=3600, misfire_grace=0, name="skipped")
    for scheduler in schedulers:  # three schedulers race for the same tick
        await scheduler._tick()
    jobs = [key async for key in redis.scan_iter(f"{queue.keys.job_prefix}periodic:*")]
    assert len(jobs) == 1 and b"periodic:latest:" in jobs[0]
    assert (await queue.counts()).ready == 1


async def test_runtime_specs_run_and_can_be_removed(app: aioqueue.App) -> None:
    runs = 0

    @app.task
    async def ping() -> None:
        nonlocal runs
        runs += 1

    async with app.worker():
        spec = await app.add_periodic(ping, every=0.1)
        assert spec.declared is False
        assert [s.name for s in await app.queue().periodic_specs()] == ["ping"]
        await wait_until(lambda: _at_least(lambda: runs, 2), timeout=10)
        assert await app.remove_periodic("ping") is True
    assert await app.queue().periodic_specs() == []
    assert await app.remove_periodic("ping") is False


async def test_worker_start_syncs_declared_specs(app: aioqueue.App) -> None:
    @app.periodic(every=3600)
    @app.task
    async def nightly() -> None: ...

    queue = app.queue()
    stale = Periodic(name="gone", task="nightly", queue="default", every=60)
    added = Periodic(name="added", task="nightly", queue="default", every=60, declared=False)
    await queue.add_periodic(stale)
    await queue.add_periodic(added)
    async with app.worker():
        await wait_until(lambda: _spec_names_are(queue, {"nightly", "added"}), timeout=5)


@pytest.mark.real_redis("worker processes")
async def test_several_worker_processes_enqueue_each_tick_once(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aioqueue",
            "worker",
            "tests.apps.periodic_app:app",
            env=env,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(3)
    ]
    try:
        await wait_until(lambda: _beats_at_least(redis, prefix, 6), timeout=20)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            assert await worker.wait() == 0
    ticks: list[bytes] = await redis.lrange(f"{prefix}:beats", 0, -1)  # type: ignore[assignment]
    assert len(set(ticks)) == len(ticks), "one run per tick, with three schedulers racing"
    assert all(job_id.startswith(b"periodic:beat:") for job_id in ticks)
    tick_times = sorted(int(job_id.rsplit(b":", 1)[1]) for job_id in ticks)
    assert all(later - earlier == 250 for earlier, later in itertools.pairwise(tick_times))


async def _beats_at_least(redis: Redis, prefix: str, count: int) -> bool:
    return int(await redis.llen(f"{prefix}:beats")) >= count


async def _at_least(value: object, count: int) -> bool:
    assert callable(value)
    return int(value()) >= count


async def _spec_names_are(queue: aioqueue.Queue, names: set[str]) -> bool:
    return {spec.name for spec in await queue.periodic_specs()} == names


async def test_a_spec_s_arguments_are_checked_as_an_enqueue_s(app: aioqueue.App) -> None:
    """Refused when the spec is made (not at every tick, in a worker's log): what JSON
    cannot carry, or would change; what the handler's annotations decode is fine."""

    @app.task
    async def report(day: object, total: Decimal | None = None) -> None: ...

    refused = {
        float("nan"): "argument 'day' is nan: JSON has no NaN",
        datetime(2026, 1, 1): "argument 'day' is a datetime, which arrives as a str",
        object(): "task 'report' are not JSON-serializable",
    }
    for bad, reason in refused.items():
        with pytest.raises(aioqueue.SerializationError, match=reason):
            await app.add_periodic(report, every=60, args=[bad])
    with pytest.raises(aioqueue.InvalidArguments, match="cannot take these arguments"):
        await app.add_periodic(report, every=60, kwargs={"week": 1})
    spec = await app.add_periodic(report, every=60, args=["mon"], kwargs={"total": Decimal("1.5")})
    assert Periodic.decode(spec.encode()).kwargs == {"total": "1.5"}  # decoded back by the worker
