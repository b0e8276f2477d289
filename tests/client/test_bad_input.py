"""DESIGN.md §6, the rows about enqueue and dispatch: bad input never crashes a worker,
never vanishes, and never leaves half-written state behind."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import QueueKeys
from tests.helpers import run_until_idle, wait_until


async def keys_under(redis: Redis, prefix: str) -> list[bytes]:
    """Every key this test's app could have written."""
    return [key async for key in redis.scan_iter(match=f"{prefix}:*")]


async def assert_nothing_written(redis: Redis, prefix: str, queue: aioqueue.Queue) -> None:
    assert await queue.counts() == aioqueue.QueueCounts(ready=0, scheduled=0, active=0, dead=0)
    assert await keys_under(redis, prefix) == []


async def dead_job(queue: aioqueue.Queue, job_id: str) -> aioqueue.JobInfo:
    info = await queue.job(job_id).info()
    assert info.status is aioqueue.JobStatus.DEAD
    dead_ids = [dead.id for dead in await queue.dead_jobs()]
    assert job_id in dead_ids
    return info


async def is_dead(job: aioqueue.Job[Any]) -> bool:
    return await job.status() is aioqueue.JobStatus.DEAD


async def push_raw_job(redis: Redis, keys: QueueKeys, job_id: str, payload: bytes) -> None:
    """Write a job record the way a third party (or an old, buggy producer) might."""
    await redis.hset(
        keys.job(job_id),
        mapping={"s": "queued", "p": payload, "n": 0, "m": 0, "pr": 5},
    )
    await redis.rpush(keys.ready(5), job_id)
    await redis.rpush(keys.notify, 1)


# -- refused at enqueue: nothing written -------------------------------------------------


async def test_unserializable_args_raise_and_write_nothing(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def handle(value: object) -> None: ...

    with pytest.raises(aioqueue.SerializationError):
        await handle.enqueue(object()).options(id="unserializable")
    with pytest.raises(aioqueue.SerializationError):
        await handle.enqueue({1, 2, 3})
    with pytest.raises(aioqueue.SerializationError):  # by name, for a task the app knows
        await app.queue("q").enqueue("handle", value=lambda: None)
    await assert_nothing_written(redis, prefix, app.queue("q"))
    assert await app.queue("q").info("unserializable") is None


async def test_oversized_payload_raises_and_writes_nothing(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    async with aioqueue.App(redis_url=redis_url, prefix=prefix, max_payload_bytes=200) as small:

        @small.task(queue="q")
        async def handle(text: str) -> None: ...

        with pytest.raises(aioqueue.PayloadTooLarge) as raised:
            await handle.enqueue("x" * 500).options(id="big")
        assert raised.value.limit == 200
        assert raised.value.size > 500
        assert isinstance(raised.value, aioqueue.EnqueueError)
        await assert_nothing_written(redis, prefix, small.queue("q"))
        assert not await redis.exists(small.queue("q").keys.job("big"))

        # Under the limit the same task enqueues fine: the limit is not an off-by-anything.
        job = await handle.enqueue("x" * 10)
        assert await job.status() is aioqueue.JobStatus.QUEUED


async def test_wrong_arguments_via_task_handle_raise_invalid_arguments(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def add(a: int, b: int) -> int:
        return a + b

    untyped: Any = add  # the type checker would (rightly) refuse these calls
    with pytest.raises(aioqueue.InvalidArguments):
        await untyped.enqueue(1)
    with pytest.raises(aioqueue.InvalidArguments):
        await untyped.enqueue(1, 2, 3)
    with pytest.raises(aioqueue.InvalidArguments):
        await untyped.enqueue(1, c=2)
    with pytest.raises(aioqueue.InvalidArguments):  # by name: the app knows the task
        await app.queue("q").enqueue("add", 1)
    await assert_nothing_written(redis, prefix, app.queue("q"))


async def test_a_job_id_that_is_not_a_str_raises_config_error(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    untyped: Any = noop.enqueue()
    for job_id in (42, b"bytes"):
        with pytest.raises(aioqueue.ConfigError, match="id must be a str"):
            await untyped.options(id=job_id)
    with pytest.raises(aioqueue.ConfigError, match="id must be a str"):
        await app.queue("q").enqueue_many([untyped.options(id=42)])
    await assert_nothing_written(redis, prefix, app.queue("q"))


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": -1},
        {"timeout": 0},  # once silently "the task's default"
        {"timeout": float("nan")},
        {"timeout": float("inf")},
        {"timeout": True},
        {"max_attempts": 0},
        {"max_attempts": -2},
        {"priority": 10},
        {"priority": "urgent"},
        {"id": ""},  # once silently a random id: the idempotency key lost
        {"id": "poison-1"},  # ids aioqueue mints for buried foreign entries
        {"id": "periodic:report:1700000000000"},  # and for periodic ticks
    ],
    ids=repr,
)
async def test_bad_per_call_options_raise_config_error_and_write_nothing(
    app: aioqueue.App, redis: Redis, prefix: str, options: dict[str, Any]
) -> None:
    @app.task(queue="q")
    async def noop() -> None: ...

    untyped: Any = noop.enqueue()
    with pytest.raises(aioqueue.ConfigError):
        await untyped.options(**options)
    with pytest.raises(aioqueue.ConfigError):
        await app.queue("q").enqueue("noop").options(**options)
    await assert_nothing_written(redis, prefix, app.queue("q"))


async def test_the_same_timeout_rule_for_tasks_and_calls(app: aioqueue.App) -> None:
    for bad in (0, -1, float("nan")):
        with pytest.raises(aioqueue.ConfigError, match="timeout must be positive"):
            app.task(name=f"t{id(bad)}", timeout=bad)(_noop)
        with pytest.raises(aioqueue.ConfigError, match="timeout must be positive"):
            aioqueue.JobOptions(timeout=bad)
    assert aioqueue.JobOptions(timeout=0.5).timeout == 0.5


async def _noop() -> None: ...


@pytest.mark.parametrize("name", ["", "a:b", "{q}"])
async def test_empty_or_bad_queue_names_raise(app: aioqueue.App, name: str) -> None:
    """An empty name once silently meant the default queue."""
    with pytest.raises(aioqueue.ConfigError, match="invalid queue name"):
        app.queue(name)
    with pytest.raises(aioqueue.ConfigError, match="invalid queue name"):
        app.task(queue=name)(_noop)
    with pytest.raises(aioqueue.ConfigError):
        app.task(name=name)(_noop)


async def test_a_minted_poison_id_never_overwrites_a_record(
    app: aioqueue.App, redis: Redis
) -> None:
    """A record under a minted-looking id (written before ids were reserved, or by hand)
    survives the burial of a foreign entry: the minted id skips it."""

    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    queue = app.queue("q")
    await push_raw_job(redis, queue.keys, "poison-1", b'{"t": "ok", "a": [], "k": {}}')
    await redis.rpush(queue.keys.ready(0), b"\x80foreign")
    worker = await run_until_idle(app, concurrency=1)
    assert worker.outcomes == {"complete": 1}
    assert await queue.job("poison-1").result(timeout=1) == "ok"  # the old record ran
    (dead,) = await queue.dead_jobs()
    assert (dead.id, dead.raw) == ("poison-2", b"\x80foreign")


@pytest.mark.parametrize("number", [2**64, 2**64 + 1, -(2**63) - 1, 10**30])
async def test_huge_integers_raise_serialization_error(
    app: aioqueue.App, redis: Redis, prefix: str, number: int
) -> None:
    @app.task(queue="q")
    async def handle(value: object, nested: object = None) -> None: ...

    with pytest.raises(aioqueue.SerializationError):
        await handle.enqueue(number)
    with pytest.raises(aioqueue.SerializationError):
        await handle.enqueue(1, nested={"deep": [number]})
    await assert_nothing_written(redis, prefix, app.queue("q"))


async def test_largest_64_bit_integers_round_trip(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def echo(value: int) -> int:
        return value

    big, small = await echo.enqueue(2**64 - 1), await echo.enqueue(-(2**63))
    await run_until_idle(app)
    assert await big.result(timeout=1) == 2**64 - 1
    assert await small.result(timeout=1) == -(2**63)


async def test_deeply_nested_args_raise_an_aioqueue_error(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="q")
    async def handle(value: object) -> None: ...

    nested: list[Any] = []
    for _ in range(1000):
        nested = [nested]
    with pytest.raises(aioqueue.EnqueueError):
        await handle.enqueue(nested)

    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(aioqueue.EnqueueError):
        await handle.enqueue(cyclic)
    await assert_nothing_written(redis, prefix, app.queue("q"))


# -- caught at the worker: dead with the reason, worker keeps running ----------------------


async def test_unknown_task_goes_dead_and_worker_keeps_running(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as producer:
        queue = producer.queue("q")
        unknown = await queue.enqueue("no_such_task", 1, k="v")
        async with app.worker(lease=2):
            await wait_until(lambda: is_dead(unknown))
            good = await ok.enqueue()
            assert await good.result(timeout=5) == "ok"

        info = await dead_job(queue, unknown.id)
        assert info.error is not None
        assert info.error.type == "UnknownTask"
        assert "no_such_task" in info.error.message
        assert info.task == "no_such_task"  # the payload is kept for inspection
        assert list(info.args) == [1]
        with pytest.raises(aioqueue.JobFailed) as raised:
            await unknown.result(timeout=1)
        assert raised.value.error_type == "UnknownTask"


async def test_wrong_arguments_at_worker_go_dead_without_retry(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    calls = 0

    @app.task(queue="q", retries=5, backoff=aioqueue.Fixed(0))
    async def add(a: int, b: int) -> int:
        nonlocal calls
        calls += 1
        return a + b

    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as producer:
        wrong = await producer.queue("q").enqueue("add", 1, 2, 3)
        missing = await producer.queue("q").enqueue("add", a=1)
        good = await producer.queue("q").enqueue("add", 1, b=2)
    wrong, missing, good = (app.queue("q").job(job.id) for job in (wrong, missing, good))
    worker = await run_until_idle(app, concurrency=1)

    assert calls == 1  # only the good job reached the handler
    assert await good.result(timeout=1) == 3
    assert worker.outcomes["bury"] == 2
    assert worker.outcomes["retry"] == 0
    for job in (wrong, missing):
        info = await dead_job(app.queue("q"), job.id)
        assert info.attempts == 1
        assert info.error is not None
        assert info.error.type == "TypeError"
        assert "add" in info.error.message


@pytest.mark.parametrize(
    "entry",
    [b"\xff\xfe", b"{not json", b'{"v":1,"t":"ok","a":[],"k":{}}', b"\xc3\x28\x00\x01"],
    ids=["non-utf8", "invalid-json", "json-payload-as-id", "nul-bytes"],
)
async def test_foreign_bytes_in_ready_list_go_dead_with_raw_kept(
    app: aioqueue.App, redis: Redis, entry: bytes
) -> None:
    @app.task(queue="q")
    async def ok(n: int) -> int:
        return n

    queue = app.queue("q")
    before = await ok.enqueue(1)
    await redis.lpush(queue.keys.ready(5), entry)  # a third party, ahead of the jobs
    after = [await ok.enqueue(n) for n in range(2, 5)]

    worker = await run_until_idle(app, concurrency=1)
    assert worker.outcomes["complete"] == 4
    assert await before.result(timeout=1) == 1
    assert [await job.result(timeout=1) for job in after] == [2, 3, 4]

    dead = await queue.dead_jobs()
    assert len(dead) == 1
    assert dead[0].raw == entry
    assert dead[0].status is aioqueue.JobStatus.DEAD
    assert dead[0].error is not None
    assert dead[0].error.type == "PoisonEntry"
    assert await queue.counts() == aioqueue.QueueCounts(ready=0, scheduled=0, active=0, dead=1)


async def test_foreign_bytes_buried_while_worker_is_blocked_waiting(
    app: aioqueue.App, redis: Redis
) -> None:
    """An embedded worker idle in BLPOP: the entry arrives with a notify token."""

    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    queue = app.queue("q")
    async with app.worker(lease=2):
        await redis.rpush(queue.keys.ready(9), b"\x80garbage\xff")
        await redis.rpush(queue.keys.notify, 1)
        await wait_until(lambda: _has_dead(queue, 1))
        good = await ok.enqueue()
        assert await good.result(timeout=5) == "ok"
    (dead,) = await queue.dead_jobs()
    assert dead.raw == b"\x80garbage\xff"


async def _has_dead(queue: aioqueue.Queue, count: int) -> bool:
    return (await queue.counts()).dead == count


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe{",
        b"{not json",
        b"[1, 2, 3]",
        b'{"t": 5, "a": [], "k": {}}',
        b"",
        b'{"t": "ok", "a": [], "k": {}, "to": 0}',
        b'{"t": "ok", "a": [], "k": {}, "to": -5}',
    ],
    ids=[
        "non-utf8",
        "invalid-json",
        "not-an-object",
        "task-not-a-string",
        "empty",
        "zero-timeout",
        "negative-timeout",
    ],
)
async def test_job_hash_with_bad_payload_goes_dead_with_raw_kept(
    app: aioqueue.App, redis: Redis, payload: bytes
) -> None:
    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    queue = app.queue("q")
    await push_raw_job(redis, queue.keys, "foreign", payload)
    good = await ok.enqueue()

    worker = await run_until_idle(app, concurrency=1)
    assert worker.outcomes == {"bury": 1, "complete": 1}
    assert await good.result(timeout=1) == "ok"
    info = await dead_job(queue, "foreign")
    assert info.raw == payload
    assert info.task is None
    assert info.error is not None
    assert info.error.type == "PayloadError"
    assert info.attempts == 1


async def test_job_key_of_wrong_type_goes_dead(app: aioqueue.App, redis: Redis) -> None:
    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    queue = app.queue("q")
    await redis.set(queue.keys.job("stringy"), "i am not a hash")
    await redis.rpush(queue.keys.ready(5), "stringy")
    await redis.rpush(queue.keys.notify, 1)
    good = await ok.enqueue()

    worker = await run_until_idle(app, concurrency=1)
    assert worker.outcomes["complete"] == 1
    assert await good.result(timeout=1) == "ok"
    dead = await queue.dead_jobs()
    assert len(dead) == 1
    assert dead[0].raw == b"stringy"
    assert dead[0].error is not None
    assert "not a hash" in dead[0].error.message
    # The third party's key is left alone: aioqueue does not delete what it did not write.
    assert await redis.get(queue.keys.job("stringy")) == b"i am not a hash"


class CustomBase(BaseException):
    """A BaseException subclass that is not cancellation."""


@pytest.mark.parametrize(
    ("kind", "exc_type"),
    [
        *(("async", exc) for exc in (KeyboardInterrupt, SystemExit, CustomBase, GeneratorExit)),
        # From a thread, GeneratorExit once travelled through an asyncio Future and was
        # thrown into the worker's job task, which it killed (no ack, slot leaked).
        *(("sync", exc) for exc in (KeyboardInterrupt, SystemExit, CustomBase, GeneratorExit)),
    ],
)
async def test_handler_raising_base_exception_is_a_recorded_failure(
    app: aioqueue.App, kind: str, exc_type: type[BaseException]
) -> None:
    if kind == "async":

        @app.task(queue="q", name="boom", retries=0)
        async def boom_async() -> None:
            raise exc_type("boom")

        boom: aioqueue.Task[[], None] = boom_async
    else:

        @app.task(queue="q", name="boom", retries=0)
        def boom_sync() -> None:
            raise exc_type("boom")

        boom = boom_sync

    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    async with app.worker(lease=2) as worker:
        bad = await boom.enqueue()
        await wait_until(lambda: is_dead(bad), timeout=2)
        good = await ok.enqueue()
        assert await good.result(timeout=5) == "ok"
    assert worker.outcomes == {"bury": 1, "complete": 1}
    with pytest.raises(aioqueue.JobFailed) as raised:
        await bad.result(timeout=1)
    assert raised.value.error_type == exc_type.__name__
    assert "boom" in raised.value.traceback


async def test_foreign_bytes_in_schedule_go_dead_with_raw_kept(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task(queue="q")
    async def ok() -> str:
        return "ok"

    """Once dropped silently by promote.lua (a bare ZREM)."""
    queue = app.queue("q")
    await redis.zadd(queue.keys.schedule, {b"\xff\xfe": 0, b"stringy": 0})  # due long ago
    await redis.set(queue.keys.job("stringy"), "not a hash")
    good = await ok.enqueue()
    await run_until_idle(app)
    assert await good.result(timeout=1) == "ok"
    assert await redis.zcard(queue.keys.schedule) == 0
    dead = await queue.dead_jobs()
    assert sorted(info.raw or b"" for info in dead) == [b"stringy", b"\xff\xfe"]
    assert {info.error.type for info in dead if info.error} == {"PoisonEntry"}
