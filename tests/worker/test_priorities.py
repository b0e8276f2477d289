"""Priority levels: strict order, and the weighted mode that keeps low levels from starving."""

from __future__ import annotations

import pytest

import aioqueue
from aioqueue.core.priorities import planner, resolve_priority, strict_plan
from tests.helpers import drain, run_until_idle


def test_names_and_bounds() -> None:
    assert [resolve_priority(p) for p in ("low", "normal", "high", 0, 9)] == [0, 5, 9, 0, 9]
    for bad in (-1, 10, "urgent", True):
        with pytest.raises(aioqueue.ConfigError):
            resolve_priority(bad)


def test_strict_plan_visits_levels_high_to_low_with_full_quotas() -> None:
    assert strict_plan(7) == [(level, 7) for level in range(9, -1, -1)]


def test_weighted_plan_covers_every_level_with_a_quota() -> None:
    plan = planner("weighted", {0: 1.0, 9: 9.0})(100)
    assert sorted(level for level, _ in plan) == list(range(10))
    assert all(quota >= 1 for _, quota in plan)
    quotas = dict(plan)
    assert quotas[9] > quotas[0]


def test_bad_priority_settings_are_rejected(app: aioqueue.App) -> None:
    with pytest.raises(aioqueue.ConfigError):
        app.worker(priority_mode="fair")
    with pytest.raises(aioqueue.ConfigError):
        app.worker(priority_weights={0: 2.0})  # weights need the weighted mode
    with pytest.raises(aioqueue.ConfigError):
        app.worker(priority_mode="weighted", priority_weights={3: 0.0})


async def test_strict_runs_higher_levels_first_fifo_within_a_level(app: aioqueue.App) -> None:
    order: list[str] = []

    @app.task
    async def record(tag: str) -> None:
        order.append(tag)

    for tag, priority in [("l1", 0), ("h1", 9), ("n1", 5), ("l2", 0), ("h2", 9), ("n2", 5)]:
        await record.enqueue(tag).options(priority=priority)
    await run_until_idle(app, concurrency=1)
    assert order == ["h1", "h2", "n1", "n2", "l1", "l2"]


async def test_weighted_mode_lets_low_levels_through_a_flood(app: aioqueue.App) -> None:
    order: list[str] = []

    @app.task
    async def record(tag: str) -> None:
        order.append(tag)

    for i in range(30):
        await record.enqueue(f"high{i}").options(priority="high")
        await record.enqueue(f"low{i}").options(priority="low")
    await run_until_idle(
        app, concurrency=1, priority_mode="weighted", priority_weights={0: 1.0, 9: 1.0}
    )
    assert len(order) == 60
    # Equal weights: the chance that no low job is among the first 20 is 2**-20.
    assert any(tag.startswith("low") for tag in order[:20])
    lows = [tag for tag in order if tag.startswith("low")]
    assert lows == [f"low{i}" for i in range(30)]  # still FIFO within the level


async def test_strict_queue_order_serves_the_queues_in_the_order_listed(
    app: aioqueue.App,
) -> None:
    ran: list[str] = []

    @app.task
    async def job(tag: str) -> None:
        ran.append(tag)

    for n in range(5):  # the low queue's jobs are older: a fair worker would mix them in
        await app.queue("low").enqueue(job, f"low{n}")
    for n in range(5):
        await app.queue("high").enqueue(job, f"high{n}")
    await drain(app, queues=["high", "low"], queue_order="strict", concurrency=1)
    assert ran == [f"high{n}" for n in range(5)] + [f"low{n}" for n in range(5)]


async def test_strict_queue_order_takes_a_lower_queue_while_the_higher_is_dry(
    app: aioqueue.App,
) -> None:
    @app.task
    async def job(tag: str) -> str:
        return tag

    async with app.worker(queues=["high", "low"], queue_order="strict", concurrency=1):
        low = await app.queue("low").enqueue(job, "low")  # nothing above it: it runs
        assert await low.result(timeout=5) == "low"
        high = await app.queue("high").enqueue(job, "high")
        assert await high.result(timeout=5) == "high"
        later = await app.queue("low").enqueue(job, "later")
        assert await later.result(timeout=5) == "later"


def test_queue_order_must_be_fair_or_strict(app: aioqueue.App) -> None:
    with pytest.raises(aioqueue.ConfigError, match="queue_order"):
        app.worker(queue_order="random")
