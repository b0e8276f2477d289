"""lua/enqueue.lua through ``enqueues.enqueue``: every branch of its header.

fakeredis[lua] is faithful for what this script uses (TIME, HSET/HGET, RPUSH, ZADD, ZRANGE,
LLEN, DEL, PTTL), so every test runs on both fakeredis and the real server. Nothing here
waits on the clock: due times are compared against Redis TIME read around the call.
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import leasing
from tests.store.script_helpers import lease, put, redis_now_ms


async def test_enqueue_writes_a_queued_record(db: Redis, keys: QueueKeys) -> None:
    before = await redis_now_ms(db)
    result = await put(db, keys, "a", priority=0, max_attempts=4, payload=b'{"x":1}')
    after = await redis_now_ms(db)

    assert result == lifecycle.Enqueued(created=True, state="queued")
    record = await db.hgetall(keys.job("a"))
    assert record[b"p"] == b'{"x":1}'
    assert record[b"s"] == b"queued"
    assert b"n" not in record  # attempts: none until taken (absent reads as 0)
    assert record[b"m"] == b"4"
    assert record[b"pr"] == b"0"
    assert before <= int(record[b"et"]) <= after
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a"]
    assert await db.lrange(keys.notify, 0, -1) == [b"1"]
    assert await db.zcard(keys.schedule) == 0
    assert await db.pttl(keys.job("a")) == -1


async def test_enqueue_uses_the_ready_list_of_its_priority(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "hi", priority=7)
    await put(db, keys, "lo", priority=0)
    await put(db, keys, "hi2", priority=7)

    assert await db.lrange(keys.ready(7), 0, -1) == [b"hi", b"hi2"]
    assert await db.lrange(keys.ready(0), 0, -1) == [b"lo"]
    assert await db.hget(keys.job("hi"), "pr") == b"7"
    assert await db.llen(keys.notify) == 3


async def test_delay_schedules_on_the_redis_clock(db: Redis, keys: QueueKeys) -> None:
    before = await redis_now_ms(db)
    result = await put(db, keys, "a", priority=3, delay_ms=60_000)
    after = await redis_now_ms(db)

    assert result == lifecycle.Enqueued(created=True, state="scheduled")
    due = await db.zscore(keys.schedule, "a")
    assert due is not None
    assert before + 60_000 <= due <= after + 60_000
    assert await db.hget(keys.job("a"), "s") == b"scheduled"
    assert await db.hget(keys.job("a"), "pr") == b"3"
    assert await db.llen(keys.ready(3)) == 0
    assert await db.exists(keys.notify) == 0
    assert await db.lrange(keys.schedule_wake, 0, -1) == [str(int(due)).encode()]


async def test_due_ms_schedules_at_that_epoch_time(db: Redis, keys: QueueKeys) -> None:
    due = await redis_now_ms(db) + 3_600_000
    assert (await put(db, keys, "a", due_ms=due)).state == "scheduled"
    assert await db.zscore(keys.schedule, "a") == due


async def test_the_later_of_delay_and_due_wins(db: Redis, keys: QueueKeys) -> None:
    now = await redis_now_ms(db)
    await put(db, keys, "due-later", delay_ms=1_000, due_ms=now + 3_600_000)
    await put(db, keys, "delay-later", delay_ms=3_600_000, due_ms=now + 1_000)

    assert await db.zscore(keys.schedule, "due-later") == now + 3_600_000
    delay_due = await db.zscore(keys.schedule, "delay-later")
    assert delay_due is not None
    assert delay_due >= now + 3_600_000


@pytest.mark.parametrize(("delay_ms", "past"), [(0, True), (-5, True), (0, False)])
async def test_no_future_due_time_means_queued_now(
    db: Redis, keys: QueueKeys, delay_ms: int, past: bool
) -> None:
    due_ms = (await redis_now_ms(db) - 10_000) if past else 0
    result = await put(db, keys, "a", delay_ms=delay_ms, due_ms=due_ms)

    assert result.state == "queued"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a"]
    assert await db.zcard(keys.schedule) == 0


async def test_schedule_wake_only_when_the_head_moves_earlier(db: Redis, keys: QueueKeys) -> None:
    now = await redis_now_ms(db)
    await put(db, keys, "first", due_ms=now + 20_000)
    assert await db.lrange(keys.schedule_wake, 0, -1) == [str(now + 20_000).encode()]

    await put(db, keys, "later", due_ms=now + 30_000)  # not the head: no new token
    assert await db.llen(keys.schedule_wake) == 1

    await db.delete(keys.schedule_wake)  # a poller consumed the token
    await put(db, keys, "even-later", due_ms=now + 40_000)
    assert await db.llen(keys.schedule_wake) == 0

    await put(db, keys, "earliest", due_ms=now + 10_000)  # new head: wake the poller
    assert await db.lrange(keys.schedule_wake, 0, -1) == [str(now + 10_000).encode()]

    await put(db, keys, "earlier-still", due_ms=now + 5_000)  # head, but a token is pending
    assert await db.llen(keys.schedule_wake) == 1


@pytest.mark.parametrize("state", ["queued", "scheduled", "active"])
async def test_unfinished_id_is_not_written_again(db: Redis, keys: QueueKeys, state: str) -> None:
    if state == "active":
        await lease(db, keys, "a")
    else:
        await put(db, keys, "a", delay_ms=60_000 if state == "scheduled" else 0)
    record_before = await db.hgetall(keys.job("a"))
    ready_before = await db.llen(keys.ready(0))
    tokens_before = await db.llen(keys.notify)
    scheduled_before = await db.zrange(keys.schedule, 0, -1, withscores=True)

    again = await put(db, keys, "a", payload=b'{"new":true}', priority=0, check_created=False)

    assert again == lifecycle.Enqueued(created=False, state=state)
    assert await db.hgetall(keys.job("a")) == record_before
    assert await db.llen(keys.ready(0)) == ready_before
    assert await db.llen(keys.notify) == tokens_before
    assert await db.zrange(keys.schedule, 0, -1, withscores=True) == scheduled_before


async def test_a_finished_id_is_not_run_again_while_its_record_lasts(
    db: Redis, keys: QueueKeys
) -> None:
    """An id is an idempotency key: a resend or retry after the job ran must not rerun it."""
    await lease(db, keys, "a", token="w:1")
    settled = lifecycle.Settlement(b"a", "w:1", "complete", b'"old result"')
    assert await leasing.ack(db, keys, [settled], result_ttl_ms=60_000) == [True]
    ttl = await db.pttl(keys.job("a"))

    again = await put(
        db, keys, "a", payload=b'{"new":true}', priority=2, max_attempts=9, check_created=False
    )

    assert again == lifecycle.Enqueued(created=False, state="complete")
    record = await db.hgetall(keys.job("a"))
    assert record[b"r"] == b'"old result"'
    assert 0 < await db.pttl(keys.job("a")) <= ttl
    assert await db.llen(keys.ready(2)) == 0


async def test_an_id_is_free_again_once_its_record_expired(db: Redis, keys: QueueKeys) -> None:
    await lease(db, keys, "a", token="w:1")
    settled = lifecycle.Settlement(b"a", "w:1", "complete", b"1")
    assert await leasing.ack(db, keys, [settled], result_ttl_ms=60_000) == [True]
    await db.delete(keys.job("a"))  # as its TTL would

    assert await put(db, keys, "a") == lifecycle.Enqueued(created=True, state="queued")
