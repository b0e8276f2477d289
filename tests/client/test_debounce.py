"""Debounce: ``.options(id=key, debounce=window)``: calls with one key collapse into one run,
a window after the last of them, with its arguments; once that run is due, the next call
schedules the next run. Bad combinations raise where written."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

import aioqueue
from tests.helpers import now, redis_ms, wait_until


async def test_calls_within_the_window_collapse_into_one_run_with_the_last_arguments(
    app: aioqueue.App, redis: Redis
) -> None:
    runs: list[int] = []

    @app.task
    async def sync(version: int) -> int:
        runs.append(version)
        return version

    def call(version: int) -> aioqueue.EnqueueCall[int]:
        return sync.enqueue(version).options(id="user-42", debounce=0.3)

    async with app.worker():
        first, second = await call(1), await call(2)
        before_last = await redis_ms(redis)
        third = await call(3)
        assert first.id == second.id == third.id == "debounce:user-42:1"
        assert [first.created, second.created, third.created] == [True, False, False]
        assert await third.result(timeout=10) == 3
        assert runs == [3]  # one run, the last call's arguments
        info = await third.info()
        assert info is not None and info.started_at_ms is not None
        assert info.started_at_ms >= before_last + 300  # a window after the last call

        later = await call(4)  # the run is over: the next call schedules the next run
        assert later.id == "debounce:user-42:2" and later.created
        assert await later.result(timeout=10) == 4
        await wait_until(lambda: now(runs == [3, 4]))


async def test_other_keys_do_not_collapse(app: aioqueue.App) -> None:
    @app.task
    async def sync(user: str) -> str:
        return user

    a = await sync.enqueue("a").options(id="a", debounce=0.05)
    b = await sync.enqueue("b").options(id="b", debounce=0.05)
    assert a.id != b.id
    async with app.worker():
        assert [await a.result(timeout=10), await b.result(timeout=10)] == ["a", "b"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce": 5}, "needs an id"),
        ({"id": "k", "debounce": 0}, "positive"),
        ({"id": "k", "debounce": True}, "positive"),
        ({"id": "k", "debounce": 5, "delay": 1}, "leave out delay"),
        ({"id": "debounce:k:1"}, "minted by aioqueue"),
    ],
)
async def test_bad_debounces_raise_where_written(
    app: aioqueue.App, options: dict[str, object], message: str
) -> None:
    @app.task
    async def sync() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match=message):
        sync.enqueue().options(**options)  # type: ignore[arg-type]


async def test_enqueue_many_refuses_debounced_calls(app: aioqueue.App) -> None:
    @app.task
    async def sync() -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="debounced"):
        await app.queue("default").enqueue_many(
            [sync.enqueue().options(id="k", debounce=1), sync.enqueue()]
        )
    assert (await app.queue("default").counts()).scheduled == 0
