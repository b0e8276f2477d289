"""The batched writes of the scripts (enqueue's one RPUSH per ready list, take's one ZADD
of leases, ack's one ZREM), mark_done's per-call key prefix, and the shorter payloads and
records: FIFO across calls, the concurrency cap and a resent take, an ack batch mixing
retries, a release, a repeat and a lost lease, the largest calls, old payloads decoding."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.errors import PayloadError
from aioqueue.core.ids import done_slot
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import NewJob
from aioqueue.core.payload import Payload, encode_payload
from aioqueue.store.scripts import enqueues, leasing
from tests.helpers import in_done_set, wait_until
from tests.store.script_helpers import LEASE_MS, put, redis_now_ms, settle

TTL = 60_000


def _job(job_id: str, priority: int = 0) -> NewJob:
    return NewJob(job_id, b'{"t":"%s"}' % job_id.encode(), priority)


async def _take(db: Redis, keys: QueueKeys, limit: int, lease: str) -> lifecycle.TakeResult:
    return await leasing.take(db, keys, lease=lease, lease_ms=LEASE_MS, limit=limit)


async def test_an_id_whose_key_is_not_a_hash_is_skipped_not_fatal(
    redis: Redis, keys: QueueKeys
) -> None:
    """A record key that is not a hash (a queue edited by hand) would make the enqueue
    script's HGET raise part way through a batch, and the jobs before it would keep queued
    records whose ready entries wait for the end of the call: it reports that id as
    existing ('foreign') and writes the others."""
    await redis.set(keys.job("b"), "not a hash")
    results = await enqueues.enqueue_many(redis, keys, [_job("a"), _job("b"), _job("c")])
    assert results == [
        lifecycle.Enqueued(True, "queued"),
        lifecycle.Enqueued(False, "foreign"),
        lifecycle.Enqueued(True, "queued"),
    ]
    assert await redis.lrange(keys.ready(0), 0, -1) == [b"a", b"c"]
    assert await redis.get(keys.job("b")) == b"not a hash"


# -- the batched writes: cases worth keeping (these pass) ----------------------------


async def test_fifo_within_each_priority_across_batched_enqueue_calls(
    db: Redis, keys: QueueKeys
) -> None:
    first = [_job("a1", 5), _job("b1", 9), _job("a2", 5), _job("a1", 5), _job("b2", 9)]
    second = [_job("b3", 9), _job("a3", 5), _job("c1", 0)]
    # two script calls in one write (chunk=5), a duplicate id inside the first
    results = await enqueues.enqueue_many(db, keys, first + second, chunk=5)
    assert [r.created for r in results] == [True, True, True, False, True, True, True, True]

    assert await db.lrange(keys.ready(5), 0, -1) == [b"a1", b"a2", b"a3"]
    assert await db.lrange(keys.ready(9), 0, -1) == [b"b1", b"b2", b"b3"]
    assert await db.llen(keys.notify) == 7
    taken = (await _take(db, keys, 10, "w:1")).jobs
    assert [job.id for job in taken] == [b"b1", b"b2", b"b3", b"a1", b"a2", b"a3", b"c1"]
    # a queued record has no attempts field; the take writes 1
    assert [job.attempts for job in taken] == [1] * 7


async def test_a_take_at_the_concurrency_cap_and_its_resend(db: Redis, keys: QueueKeys) -> None:
    for n in range(6):
        await put(db, keys, f"j{n}")
    await db.hset(keys.limits, "c", 3)
    assert [job.id for job in (await _take(db, keys, 2, "w:1")).jobs] == [b"j0", b"j1"]

    result = await _take(db, keys, 5, "w:2")  # room for one only

    assert [job.id for job in result.jobs] == [b"j2"]
    assert result.held == -1
    assert await db.zcard(keys.active) == 3
    leases = await db.zrange(keys.active, 0, -1, withscores=True)
    assert len({pair[1] for pair in leases}) <= 2  # one deadline per take call
    resent = await _take(db, keys, 5, "w:2")  # a resend: the same job, nothing more
    assert [job.id for job in resent.jobs] == [b"j2"]
    assert (await _take(db, keys, 5, "w:3")).jobs == []
    assert await db.zcard(keys.active) == 3
    assert await db.lrange(keys.ready(0), 0, -1) == [b"j3", b"j4", b"j5"]


async def test_one_ack_batch_with_retries_a_release_a_repeat_and_a_lost_lease(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(5):
        await put(db, keys, f"j{n}")
    await put(db, keys, "later")
    j0, j1, j2, j3, j4 = (await _take(db, keys, 5, "w:1")).jobs
    # j4's lease was lost: reclaimed and taken again by another worker
    await db.zadd(keys.active, {"j4": 0})
    await leasing.reclaim(db, keys, limit=10, default_max_attempts=5)
    [again] = (await _take(db, keys, 1, "w:2")).jobs
    assert again.id == b"j4"

    batch = [
        settle(j0, "retry", b'"E"'),  # zero delay: back of ready
        settle(j1, "release"),  # front of ready
        settle(j2, "complete", b"null"),  # its record goes (kept in a done hash)
        settle(j2, "complete", b"null"),  # the same settlement twice in one batch
        settle(j3, "retry", b'"E"', delay_ms=60_000),
        settle(j4, "complete", b"1"),  # lease lost: -2
    ]
    codes = await leasing.ack(db, keys, batch, result_ttl_ms=TTL)

    assert codes == [True, True, True, True, True, False]
    assert await db.zrange(keys.active, 0, -1) == [b"j4"]  # only the live lease
    assert await db.lrange(keys.ready(0), 0, -1) == [b"j1", b"later", b"j0"]
    assert await db.hmget(keys.job("j0"), "s", "n") == [b"queued", b"1"]
    assert await db.hmget(keys.job("j1"), "s", "n") == [b"queued", b"0"]
    assert await db.exists(keys.job("j2")) == 0
    assert await db.hget(keys.job("j3"), "s") == b"scheduled"
    assert await db.hmget(keys.job("j4"), "s", "w") == [b"active", b"w:2"]
    # taken again, j1 and j0 are leased once each
    retaken = (await _take(db, keys, 5, "w:3")).jobs
    assert [(job.id, job.attempts) for job in retaken] == [(b"j1", 1), (b"later", 1), (b"j0", 2)]
    assert await db.zcard(keys.active) == 4


async def test_the_biggest_calls_fit_in_one_command(redis: Redis, keys: QueueKeys) -> None:
    """MAX_ENQUEUE_BATCH jobs in one RPUSH, MAX_TAKE leases in one ZADD (2000 arguments),
    MAX_ACK_BATCH ids in one ZREM: within Lua 5.1's unpack limit on the real server."""
    from aioqueue.worker.acks import MAX_ACK_BATCH
    from aioqueue.worker.consumer import MAX_TAKE

    jobs = [_job(f"j{n:04}") for n in range(enqueues.MAX_ENQUEUE_BATCH)]
    await enqueues.enqueue_many(redis, keys, jobs)
    assert await redis.llen(keys.ready(0)) == len(jobs)
    taken = (await _take(redis, keys, MAX_TAKE, "w:1")).jobs
    assert [job.id for job in taken] == [job.id.encode() for job in jobs[:MAX_TAKE]]
    assert await redis.zcard(keys.active) == MAX_TAKE
    codes = await leasing.ack(
        redis, keys, [settle(job, "complete", b"1") for job in taken[:MAX_ACK_BATCH]],
        result_ttl_ms=TTL,
    )  # fmt: skip
    assert all(codes)
    assert await redis.zcard(keys.active) == MAX_TAKE - MAX_ACK_BATCH


async def test_mark_done_prefix_is_not_kept_from_an_earlier_call(
    redis: Redis, keys: QueueKeys
) -> None:
    """done.lua's cached key prefix is a local of one script call: a later call, in a
    later generation, writes to that generation's set (were it kept, as a Redis Function
    would keep it, the id would land in an old set that expires early)."""
    span = 200
    for job_id in ("a", "b"):
        await put(redis, keys, job_id)
    [a] = (await _take(redis, keys, 1, "w:1")).jobs
    await leasing.ack(
        redis, keys, [settle(a, "complete", b"null")], result_ttl_ms=TTL, kept_ms=span
    )
    first = await redis_now_ms(redis) // span

    async def later_generation() -> bool:
        return await redis_now_ms(redis) // span >= first + 3

    await wait_until(later_generation, timeout=5)
    [b] = (await _take(redis, keys, 1, "w:2")).jobs
    await leasing.ack(
        redis, keys, [settle(b, "complete", b"null")], result_ttl_ms=TTL, kept_ms=span
    )
    generation = await redis_now_ms(redis) // span

    found = [
        g
        for g in range(first, generation + 1)
        if await in_done_set(redis, f"{keys.done_prefix}{span}:{g}:{done_slot(b'b')}", "b")
    ]
    assert len(found) == 1 and found[0] >= first + 3


# -- payloads: the short form, and what older versions wrote --------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"v":1,"t":"f","a":[],"k":{}}',  # written before 0024a92
        b'{"t":"f"}',
    ],
)
def test_payloads_old_and_new_decode_alike(raw: bytes) -> None:
    payload = Payload.decode(raw)
    assert (payload.task, list(payload.args), dict(payload.kwargs)) == ("f", [], {})


def test_a_payload_leaves_out_the_defaults_and_rejects_another_version() -> None:
    assert orjson.loads(encode_payload("f", (), {}, None, 1000)) == {"t": "f"}
    assert orjson.loads(encode_payload("f", (1,), {"x": 2}, None, 1000)) == {
        "t": "f", "a": [1], "k": {"x": 2},
    }  # fmt: skip
    with pytest.raises(PayloadError):
        Payload.decode(b'{"v":2,"t":"f"}')
