"""Concurrent enqueues coalesce into few script calls; the bulk API sends thousands at once."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ResponseError

import aioqueue
from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import NewJob
from aioqueue.store import batching
from aioqueue.store.scripts import enqueues, leasing


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


async def _evalsha_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.real_redis("counts the server's INFO commandstats")
async def test_gathered_enqueues_share_round_trips_and_keep_their_order(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    await noop.enqueue(-1)  # connect and load the scripts first
    before = await _evalsha_calls(redis)
    jobs = await asyncio.gather(*(noop.enqueue(n) for n in range(500)))
    calls = await _evalsha_calls(redis) - before
    assert all(job.created for job in jobs)
    assert calls <= 10, f"{calls} script calls for 500 concurrent enqueues"
    ready = await redis.lrange(app.queue().keys.ready(5), 0, -1)
    assert [_text(raw) for raw in ready[1:]] == [job.id for job in jobs], "arrival order"


async def test_a_failing_call_of_a_flush_fails_only_its_own_callers(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    queue = app.queue()
    await noop.enqueue(-1)
    await redis.set(queue.keys.ready(3), "not a list")  # the script's RPUSH there fails
    calls = [noop.enqueue(n) for n in range(250)]
    calls[150] = noop.enqueue(150).options(priority=3)
    results = await asyncio.gather(*calls, return_exceptions=True)
    failed = [i for i, result in enumerate(results) if isinstance(result, BaseException)]
    assert 150 in failed
    assert len(failed) <= batching.FLUSH_CHUNK, "only the script call that met the bad key"
    assert max(failed) < 249, "the calls after it still landed"
    assert all(isinstance(results[i], ResponseError) for i in failed)
    assert all(job.created for job in results if isinstance(job, aioqueue.Job))


@pytest.mark.real_redis("counts the server's INFO commandstats")
async def test_a_lone_enqueue_is_one_script_call(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    before = await _evalsha_calls(redis)
    await noop.enqueue()
    assert await _evalsha_calls(redis) - before == 1


@pytest.mark.real_redis("counts the server's INFO commandstats")
async def test_bulk_enqueue_writes_thousands_in_order(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    queue = app.queue()
    await noop.enqueue(-1)
    before = await _evalsha_calls(redis)
    jobs = await queue.enqueue_many(noop.enqueue(n) for n in range(2500))
    assert await _evalsha_calls(redis) - before == 3  # 1000 + 1000 + 500, one pipeline
    assert len(jobs) == 2500 and all(job.created for job in jobs)
    assert (await queue.counts()).ready == 2501
    ready = await redis.lrange(queue.keys.ready(5), 1, -1)
    assert [_text(raw) for raw in ready] == [job.id for job in jobs]
    dup = await queue.enqueue_many([noop.enqueue(0).options(id=jobs[0].id)])
    assert dup[0].created is False and dup[0].id == jobs[0].id
    assert await queue.enqueue_many([]) == []


async def test_bulk_enqueue_validates_everything_before_writing(app: aioqueue.App) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    @app.task(queue="other")
    async def elsewhere() -> None: ...

    queue = app.queue()
    with pytest.raises(aioqueue.InvalidArguments):
        await queue.enqueue_many([noop.enqueue(1), noop.enqueue("x", "too many")])  # type: ignore[call-arg,arg-type]
    with pytest.raises(aioqueue.ConfigError, match="got a job for 'other'"):
        await queue.enqueue_many([noop.enqueue(1), elsewhere.enqueue()])
    assert (await queue.counts()).ready == 0


def test_the_packed_enqueue_is_the_command_redis_py_would_send() -> None:
    keys = QueueKeys.for_queue("p", "q")
    jobs = [
        NewJob("a", b'{"x":1}', 5),
        NewJob("\u00e9-\u00fc", b"\x00\xff" * 40, 9, 3, 1500, 1_700_000_000_000),
        NewJob("c", b"", 0, max_attempts=12, due_ms=-86_400_000),  # at= before 1970
    ]
    for batch in ([jobs[0]], jobs, jobs[::-1]):
        script_keys, args = enqueues._enqueue_call(keys, batch)
        command = ("EVALSHA", enqueues._ENQUEUE.sha, len(script_keys), *script_keys, *args)
        assert enqueues._pack_enqueue(keys, batch) == b"".join(Connection().pack_command(*command))
    with pytest.raises(ValueError, match="priority"):
        enqueues._pack_enqueue(keys, [NewJob("a", b"", 10)])


async def test_enqueues_carry_on_after_their_connection_is_killed(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    queue = app.queue()
    await noop.enqueue(0)
    await redis.client_kill_filter(_type="normal", skipme=True)  # the app's connections
    await noop.enqueue(1)  # resent by the client's retry, on a new connection
    await asyncio.gather(*(noop.enqueue(n) for n in range(2, 50)))
    await redis.client_kill_filter(_type="normal", skipme=True)
    await asyncio.gather(*(noop.enqueue(n) for n in range(50, 100)))
    await queue.enqueue_many(noop.enqueue(n) for n in range(100, 110))
    assert (await queue.counts()).ready == 110


@pytest.mark.real_redis("counts the server's INFO errorstats")
async def test_enqueues_load_the_script_again_after_a_script_flush(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    async def refusals() -> int:
        stats = await redis.info("errorstats")
        return int(stats.get("errorstat_NOSCRIPT", {}).get("count", 0))

    queue = app.queue()
    await noop.enqueue(0)
    before = await refusals()
    await redis.script_flush()
    assert (await noop.enqueue(1)).created
    await redis.script_flush()
    assert all(job.created for job in await asyncio.gather(*(noop.enqueue(n) for n in range(100))))
    await redis.script_flush()
    jobs = await queue.enqueue_many(noop.enqueue(n) for n in range(2500))  # three calls, one write
    assert all(job.created for job in jobs)
    assert (await queue.counts()).ready == 2602
    assert await refusals() - before == 5  # lone 1, gathered 1 (the rest waited), bulk 3


async def test_an_app_closed_and_used_again_enqueues_on_a_new_connection(app: aioqueue.App) -> None:
    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    await app.close()  # closes the connection the queue kept for its enqueues
    await noop.enqueue()
    await asyncio.gather(noop.enqueue(), noop.enqueue())
    assert (await app.queue().counts()).ready == 4


async def test_a_resent_enqueue_finds_a_fresh_job_that_already_completed(
    app: aioqueue.App,
) -> None:
    """A generated id is new on its first send, so the script does not look for it (one
    command less per job). A resend may come after the job ran, completed with no result
    and left only its id in a done hash: the resend is marked, so the id is looked for and
    the job is not written again."""
    from aioqueue.store import wire

    keys = app.queue().keys
    redis = await app.internal_client()
    job = NewJob("0f8e6c2a-1b7d-4e5f-9a3b-c4d5e6f7a8b9", b'{"t":"x"}', 5, fresh=True)
    span = 60_000
    before, first_send, after = enqueues._pack_enqueue_parts(keys, [job], span)
    connection = await wire.checkout(redis.connection_pool)
    try:
        [created] = await wire.send(connection, enqueues._ENQUEUE, [before + first_send + after])
        assert created == [1, b"queued"]
        taken = await leasing.take(redis, keys, lease="w:1", lease_ms=30_000, limit=1)
        done = lifecycle.Settlement(taken.jobs[0].id, "w:1", "complete", b"null")
        await leasing.ack(redis, keys, [done], result_ttl_ms=span, kept_ms=span)
        assert await redis.exists(keys.job(job.id)) == 0
        resend = before + enqueues._RESEND + after
        [again] = await wire.send(connection, enqueues._ENQUEUE, [resend])
        assert again == [0, b"complete"]
    finally:
        await redis.connection_pool.release(connection)


async def test_a_job_that_waits_for_replicas_does_not_hold_up_its_neighbours(
    redis_url: str, prefix: str
) -> None:
    # The suite's server has no replica: WAIT 1 times out with 0, and that job alone fails.
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, replica_timeout=0.05)

    @app.task
    async def noop(n: int) -> None:
        return None

    try:
        calls = [noop.enqueue(n) for n in range(30)]
        calls[15] = noop.enqueue(15).options(replicas=1, id="needs-a-replica")
        results = await asyncio.gather(*calls, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert len(failed) == 1 and isinstance(failed[0], aioqueue.NotReplicated)
        assert failed[0].job_id == "needs-a-replica"
        assert (await app.queue().counts()).ready == 30  # it landed: only unconfirmed
    finally:
        await app.close()


async def test_two_batchers_of_one_queue_on_one_client_keep_one_connection(
    app: aioqueue.App,
) -> None:
    """Each flush keeps its connection under the queue's key; when two batchers (two Apps
    given one client, say) send for the same queue at once, the connection one of them
    kept is replaced: it goes back to the pool (it was left checked out, for ever)."""
    redis = await app.internal_client()
    keys = QueueKeys.for_queue(app.settings.prefix, "shared")
    one, two = (batching.EnqueueBatcher(app.internal_client, keys) for _ in range(2))
    pool = redis.connection_pool
    in_use = len(pool._in_use_connections)  # (the App's own: none of this queue's)
    for _ in range(5):
        await asyncio.gather(
            *(one.submit(NewJob(f"a{n}", b"{}", 5)) for n in range(20)),
            *(two.submit(NewJob(f"b{n}", b"{}", 5)) for n in range(20)),
        )
    assert len(pool._in_use_connections) - in_use == 1  # the one kept for the queue


@pytest.mark.real_redis("counts the server's INFO commandstats")
async def test_a_caller_enqueueing_again_at_once_waits_behind_the_others(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    async def producer() -> None:
        for n in range(10):
            await noop.enqueue(n)

    await noop.enqueue(-1)  # connect and load the scripts first
    before = await _evalsha_calls(redis)
    await asyncio.gather(*(producer() for _ in range(20)))
    calls = await _evalsha_calls(redis) - before
    assert calls < 40, calls  # not one call per job: a lone caller must not hog the wire
