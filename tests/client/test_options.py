"""Per-call options that make no sense raise ConfigError where they are written, never a
TypeError, ValueError or OverflowError from deep inside, and never a job due in the year
33715."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.client.enqueue import MAX_DELAY
from tests.client.test_bad_input import assert_nothing_written


@pytest.mark.parametrize(
    "delay",
    ["10", math.nan, math.inf, -math.inf, -1, True, timedelta(seconds=-1)],
)
async def test_a_delay_that_is_not_seconds_is_a_config_error(
    app: aioqueue.App, redis: Redis, prefix: str, delay: object
) -> None:
    @app.task(queue="q")
    async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="options: delay must be a finite number"):
        work.enqueue().options(delay=delay)  # type: ignore[arg-type]
    with pytest.raises(aioqueue.ConfigError, match="options: delay"):
        await app.queue("q").reschedule("any", delay=delay)  # type: ignore[arg-type]
    await assert_nothing_written(redis, prefix, app.queue("q"))


@pytest.mark.parametrize("delay", [10**12, 1_767_225_600_000, 1_767_225_600, timedelta(days=4000)])
async def test_a_far_future_delay_is_refused(app: aioqueue.App, delay: object) -> None:
    """A millisecond (or second) timestamp passed as a delay is a mistake: refused, with
    the bound and what to use instead."""

    @app.task(queue="q")
    async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match=r"is over ten years .*pass at=datetime"):
        work.enqueue().options(delay=delay)  # type: ignore[arg-type]
    work.enqueue().options(delay=MAX_DELAY)  # the bound itself is allowed


async def test_at_must_be_an_aware_datetime_within_the_bound(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="at must be a datetime, not '2030-01-01'"):
        work.enqueue().options(at="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(aioqueue.ConfigError, match="more than ten years"):
        work.enqueue().options(at=datetime(9999, 1, 1, tzinfo=UTC))
    with pytest.raises(aioqueue.ConfigError, match="aware datetime"):
        work.enqueue().options(at=datetime(2030, 1, 1))
    work.enqueue().options(at=datetime(2001, 1, 1, tzinfo=UTC))  # past: runs now


async def test_delay_and_at_together_are_refused(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def work() -> None: ...

    soon = datetime.now(UTC) + timedelta(minutes=5)
    with pytest.raises(aioqueue.ConfigError, match="give delay or at, not both"):
        await work.enqueue().options(delay=5, at=soon)
    with pytest.raises(aioqueue.ConfigError, match="give delay or at, not both"):
        await work.enqueue().options(delay=5).options(at=soon)
    await assert_nothing_written(redis, prefix, app.queue("q"))


@pytest.mark.parametrize("option", ["expires", "debounce"])
@pytest.mark.parametrize("value", [math.inf, math.nan, "5", 0])
async def test_expires_and_debounce_refuse_what_is_not_a_positive_finite_span(
    app: aioqueue.App, option: str, value: object
) -> None:
    @app.task(queue="q")
    async def work() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match=f"options: {option} must be positive"):
        work.enqueue().options(id="k", **{option: value})  # type: ignore[arg-type]
