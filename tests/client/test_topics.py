"""Topics on a real Redis: every subscriber group sees every message, the workers of one
group share them, each runs under a task's rules (retry, timeout, dead letter, lease), what
every group processed is trimmed, the length bound, waiting until processed, bad input."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.backoff import Fixed
from aioqueue.core.keys import TopicKeys
from aioqueue.core.lifecycle import Settlement
from aioqueue.store.scripts import topics
from tests.helpers import run_until_idle, wait_until


async def test_every_group_gets_every_message(app: aioqueue.App) -> None:
    seen: dict[str, list[int]] = {"analytics": [], "archive": []}

    @app.subscriber("logs", group="analytics")
    async def analyse(line: dict[str, int]) -> None:
        seen["analytics"].append(line["n"])

    @app.subscriber("logs", group="archive")
    def archive(line: dict[str, int]) -> None:  # a plain function runs in a thread
        seen["archive"].append(line["n"])

    logs = app.topic("logs")
    for group in ("analytics", "archive"):  # groups declared before the first publish
        assert await logs.add_group(group) is True
    assert await logs.add_group("archive") is False
    ids = await logs.publish_many({"n": n} for n in range(50))
    assert len(ids) == len(set(ids)) == 50 and ids == sorted(ids, key=_order)
    assert await logs.publish({"n": 50}) not in ids

    worker = await run_until_idle(app)
    assert sorted(seen["analytics"]) == sorted(seen["archive"]) == list(range(51))
    assert seen["analytics"] == list(range(51))  # one worker: in order
    assert worker.outcomes["complete"] == 102
    await logs.wait_processed(timeout=5)
    info = await logs.info()
    assert set(info.groups) == {"analytics", "archive"}
    assert all(group.pending == 0 and group.lag == 0 for group in info.groups.values())
    assert info.size == 0  # processed by every group: trimmed
    assert (info.dropped, info.dead) == (0, 0)


async def test_a_late_group_gets_what_the_log_still_keeps(app: aioqueue.App) -> None:
    got: list[int] = []
    await app.topic("t").publish_many(range(5))  # before any group exists

    @app.subscriber("t", group="late")
    async def late(n: int) -> None:
        got.append(n)

    await run_until_idle(app)
    assert got == [0, 1, 2, 3, 4]


async def test_workers_of_one_group_share_its_messages(redis_url: str, prefix: str) -> None:
    apps = [aioqueue.App(redis_url=redis_url, prefix=prefix) for _ in range(3)]
    handled: list[Counter[int]] = [Counter() for _ in apps]
    for app, counts in zip(apps, handled, strict=True):

        @app.subscriber("jobs", group="g")
        async def work(n: int, counts: Counter[int] = counts) -> None:
            counts[n] += 1
            await asyncio.sleep(0.001)

    try:
        workers = [app.worker(concurrency=5) for app in apps]
        for worker in workers:
            await worker.start()
        await apps[0].topic("jobs").publish_many(range(300))
        total = Counter[int]()

        async def all_done() -> bool:
            total.clear()
            for counts in handled:
                total.update(counts)
            return len(total) == 300

        await wait_until(all_done, timeout=10)
        for worker in workers:
            await worker.stop()
        assert set(total.values()) == {1}  # each once: no failure, no redelivery
        assert sum(1 for counts in handled if counts) >= 2  # shared, not one worker's
    finally:
        for app in apps:
            await app.close()


async def test_a_failing_message_is_retried_then_dead_lettered(app: aioqueue.App) -> None:
    attempts: Counter[int] = Counter()
    dead_hooks: list[str] = []

    @app.subscriber("t", group="g", retries=2, backoff=Fixed(0))
    async def flaky(n: int) -> None:
        attempts[n] += 1
        if n == 1 and attempts[n] < 3:
            raise RuntimeError("not yet")
        if n == 2:
            raise ValueError(f"never works: {n}")

    @flaky.on_dead
    async def on_dead(job: aioqueue.JobContext, error: BaseException) -> None:
        dead_hooks.append(f"{job.attempt}:{error}")

    await app.topic("t").publish_many([0, 1, 2])
    worker = await run_until_idle(app)
    assert attempts == Counter({0: 1, 1: 3, 2: 3})
    assert worker.outcomes["complete"] == 2 and worker.outcomes["bury"] == 1
    assert dead_hooks == ["3:never works: 2"]
    [dead] = await app.topic("t").dead_letters()
    assert (dead.group, dead.body, dead.attempts) == ("g", 2, 3)
    assert dead.error is not None and dead.error.type == "ValueError"
    assert "never works" in dead.error.message
    assert (await app.topic("t").info()).dead == 1


async def test_a_retry_delayed_past_the_lease_waits_its_delay(app: aioqueue.App) -> None:
    runs: list[float] = []

    @app.subscriber("t", group="g", retries=1, backoff=Fixed(1.6))
    async def once_more(n: int) -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) == 1:
            raise RuntimeError("first")

    await app.topic("t").publish(1)
    worker = await run_until_idle(app, lease=1)  # the retry outlives one lease: re-parked
    assert len(runs) == 2 and worker.outcomes["complete"] == 1
    assert runs[1] - runs[0] >= 1.5  # (a lower bound only: never early)


async def test_a_subscriber_timeout_is_a_failed_attempt(app: aioqueue.App) -> None:
    @app.subscriber("t", group="g", timeout=0.1, retries=0)
    async def slow(n: int) -> None:
        await asyncio.sleep(30)

    await app.topic("t").publish(1)
    worker = await run_until_idle(app)
    assert worker.outcomes["bury"] == 1
    [dead] = await app.topic("t").dead_letters()
    assert dead.error is not None and dead.error.type == "TimeoutError"


async def test_foreign_and_undecodable_entries_are_dead_lettered(
    app: aioqueue.App, redis: Redis
) -> None:
    got: list[Any] = []

    @app.subscriber("t", group="g")
    async def take(body: Any) -> None:
        got.append(body)

    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").publish("before")
    await redis.xadd(keys.log, {"x": "1"})  # no body field: not ours
    await redis.xadd(keys.log, {"b": b"\xff{not json"})
    await app.topic("t").publish("after")
    worker = await run_until_idle(app)
    assert got == ["before", "after"]
    assert worker.outcomes["bury"] == 1  # (the entry without a body never runs)
    dead = await app.topic("t").dead_letters()
    assert [d.error.type if d.error else None for d in dead] == ["PayloadError", "PayloadError"]
    assert dead[0].raw == b"x 1" and "no body" in (dead[0].error.message if dead[0].error else "")
    assert dead[1].raw == b"\xff{not json" and dead[1].body is None


async def test_a_dead_workers_messages_go_to_another_when_its_lease_runs_out(
    app: aioqueue.App, redis: Redis
) -> None:
    got: list[int] = []

    @app.subscriber("t", group="g")
    async def take(n: int) -> None:
        got.append(n)

    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").add_group("g")
    await app.topic("t").publish_many([1, 2, 3])
    # A worker that read them and died: they sit in the group's pending list as its own.
    await redis.xreadgroup("g", "dead-worker", {keys.log: ">"}, count=2)
    worker = await run_until_idle(app, lease=1)
    assert sorted(got) == [1, 2, 3]
    assert worker.outcomes["complete"] == 3
    assert (await redis.xpending(keys.log, "g"))["pending"] == 0


async def test_a_message_whose_lease_ran_out_on_its_last_attempt_is_dead(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.subscriber("t", group="g", retries=0)
    async def take(n: int) -> None:
        raise AssertionError("never runs: its one attempt died with a worker")

    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").add_group("g")
    await app.topic("t").publish(7)
    await redis.xreadgroup("g", "dead-worker", {keys.log: ">"}, count=1)
    await run_until_idle(app, lease=1)
    [dead] = await app.topic("t").dead_letters()
    assert (dead.body, dead.attempts) == (7, 1)
    assert dead.error is not None and dead.error.type == "LeaseExpired"


async def test_an_ack_from_a_worker_that_lost_the_lease_changes_nothing(
    app: aioqueue.App, redis: Redis
) -> None:
    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").add_group("g")
    [first, second] = await app.topic("t").publish_many([1, 2])
    await redis.xreadgroup("g", "old", {keys.log: ">"}, count=2)
    await redis.xclaim(keys.log, "g", "new", 0, [first])  # its lease ran out: claimed
    batch = [
        Settlement(first.encode(), "old", "complete"),
        Settlement(second.encode(), "old", "complete"),
    ]
    acked = await topics.topic_ack(
        await app.client(), keys, "g", "old", batch, [1, 1], lease_ms=30_000, dead_max=0
    )
    assert acked == [False, True]
    pending = await redis.xpending_range(keys.log, "g", "-", "+", 10)
    assert [(p["message_id"], p["consumer"]) for p in pending] == [(first.encode(), b"new")]


async def test_the_length_bound_drops_the_oldest_and_counts_them(app: aioqueue.App) -> None:
    logs = app.topic("t", max_messages=10)
    await logs.add_group("slow")  # a group that never reads
    await logs.publish_many(range(25))
    info = await logs.info()
    assert (info.size, info.dropped) == (10, 15)
    got: list[int] = []

    @app.subscriber("t", group="slow")
    async def slow(n: int) -> None:
        got.append(n)

    await run_until_idle(app)
    assert got == list(range(15, 25))  # the laggard skips what was dropped


async def test_processed_messages_are_trimmed_only_when_every_group_has_them(
    app: aioqueue.App,
) -> None:
    @app.subscriber("t", group="fast")
    async def fast(n: int) -> None:
        return None

    logs = app.topic("t")
    await logs.add_group("fast")
    await logs.add_group("other")  # nobody serves it yet
    await logs.publish_many(range(20))
    await run_until_idle(app)
    info = await logs.info()
    assert info.size == 20  # "other" has not processed them
    assert (info.groups["fast"].lag, info.groups["other"].lag) == (0, 20)
    with pytest.raises(TimeoutError, match="other"):
        await logs.wait_processed(timeout=0.3)
    await logs.wait_processed(timeout=1, groups=["fast"])


async def test_wait_processed_returns_when_every_group_is_through(app: aioqueue.App) -> None:
    release = asyncio.Event()

    @app.subscriber("t", group="g")
    async def gated(n: int) -> None:
        await release.wait()

    logs = app.topic("t")
    await logs.add_group("g")
    await logs.publish_many(range(5))
    async with app.worker():
        waiting = asyncio.ensure_future(logs.wait_processed(timeout=10))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        release.set()
        await asyncio.wait_for(waiting, 10)

    async def trimmed() -> bool:
        return (await logs.info()).size == 0

    await wait_until(trimmed)  # what every group processed goes (the last ack trims it)


async def test_a_batch_subscriber_gets_lists_of_bodies(app: aioqueue.App, redis: Redis) -> None:
    batches: list[list[int]] = []

    @app.subscriber("t", group="g", batch=10)
    async def bulk(bodies: list[int]) -> None:
        batches.append(bodies)

    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").add_group("g")
    await app.topic("t").publish_many(range(95))
    await redis.xadd(keys.log, {"b": b"not json"})  # buried alone, not with its batch
    await app.topic("t").publish(95)
    worker = await run_until_idle(app)
    assert sorted(n for batch in batches for n in batch) == list(range(96))
    assert max(len(batch) for batch in batches) == 10
    assert worker.outcomes["complete"] == len(batches) < 96  # runs, not messages
    [dead] = await app.topic("t").dead_letters()
    assert dead.raw == b"not json" and dead.error is not None
    assert "not valid JSON" in dead.error.message
    assert (await app.topic("t").info()).size == 0


async def test_a_failing_batch_is_retried_and_each_message_dead_lettered(
    app: aioqueue.App,
) -> None:
    runs: list[list[int]] = []

    @app.subscriber("t", group="g", batch=10, retries=1, backoff=Fixed(0))
    async def bulk(bodies: list[int]) -> None:
        runs.append(bodies)
        raise ValueError("bad batch")

    await app.topic("t").publish_many([1, 2, 3])
    await run_until_idle(app)
    assert sorted(n for batch in runs for n in batch) == [1, 1, 2, 2, 3, 3]  # 2 attempts each
    dead = await app.topic("t").dead_letters()
    assert sorted(d.body for d in dead) == [1, 2, 3]
    assert {(d.attempts, d.error.type if d.error else "") for d in dead} == {(2, "ValueError")}


async def test_a_batch_held_by_a_dead_worker_runs_again(app: aioqueue.App, redis: Redis) -> None:
    got: list[int] = []

    @app.subscriber("t", group="g", batch=50)
    async def bulk(bodies: list[int]) -> None:
        got.extend(bodies)

    keys = TopicKeys.of(app.settings.prefix, "t")
    await app.topic("t").add_group("g")
    await app.topic("t").publish_many(range(30))
    await redis.xreadgroup("g", "dead-worker", {keys.log: ">"}, count=20)
    await run_until_idle(app, lease=1)
    assert sorted(got) == list(range(30))
    assert (await redis.xpending(keys.log, "g"))["pending"] == 0


async def test_concurrent_publishes_each_get_the_id_of_their_own_message(
    app: aioqueue.App, redis: Redis
) -> None:
    logs = app.topic("t")
    ids = await asyncio.gather(*(logs.publish({"n": n}) for n in range(60)))
    assert len(set(ids)) == 60
    entries: Any = await redis.xrange(TopicKeys.of(app.settings.prefix, "t").log)
    by_id = {entry_id.decode(): fields[b"b"] for entry_id, fields in entries}
    assert [by_id[i] for i in ids] == [b'{"n":%d}' % n for n in range(60)]


async def test_bad_bodies_raise_and_write_nothing(app: aioqueue.App) -> None:
    logs = app.topic("t")
    with pytest.raises(aioqueue.SerializationError):
        await logs.publish_many([1, object()])
    with pytest.raises(aioqueue.SerializationError, match="message body is -inf: JSON has no NaN"):
        await logs.publish(float("-inf"))
    with pytest.raises(aioqueue.PayloadTooLarge):
        await logs.publish("x" * (app.settings.max_payload_bytes + 1))
    assert (await logs.info()).size == 0


def test_names_and_handlers_are_checked(app: aioqueue.App) -> None:
    with pytest.raises(aioqueue.ConfigError):
        app.topic("bad name")
    with pytest.raises(aioqueue.ConfigError):
        app.topic("t", max_messages=-1)
    with pytest.raises(aioqueue.ConfigError, match="one argument"):

        @app.subscriber("t", group="g")  # type: ignore[arg-type]
        async def two(a: int, b: int) -> None: ...

    with pytest.raises(aioqueue.ConfigError):
        app.subscriber("t", group="a:b")
    with pytest.raises(aioqueue.ConfigError, match="batch"):
        app.subscriber("t", group="g", batch=0)

    @app.subscriber("t", group="g")
    async def one(body: Any) -> None: ...

    with pytest.raises(aioqueue.ConfigError, match="already"):

        @app.subscriber("t", group="g")
        async def again(body: Any) -> None: ...


def _order(message_id: str) -> tuple[int, int]:
    ms, _, seq = message_id.partition("-")
    return int(ms), int(seq)
