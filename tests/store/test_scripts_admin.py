"""The admin scripts: lua/cancel.lua, lua/requeue.lua and lua/purge.lua.

fakeredis[lua] is faithful for what these scripts use (TIME, cjson, HMGET, HDEL, PEXPIRE,
ZREM, ZRANGE), so the script-logic tests run on both fakeredis and the real server. The one
test that needs a TTL to really run out uses only the real server (STYLE: no timing on
fakeredis), and waits for it with ``wait_until``.
"""

from __future__ import annotations

import json

import pytest
from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import admin, leasing
from tests.helpers import wait_until
from tests.store.script_helpers import lease, put, settle, take

TTL = 60_000


async def bury(db: Redis, keys: QueueKeys, job_id: str, *, priority: int = 0) -> None:
    """Enqueue, take and bury one job (the queue must have nothing else ready)."""
    job = await lease(db, keys, job_id, priority=priority)
    assert await leasing.ack(db, keys, [settle(job, "bury", b'"E"')], result_ttl_ms=TTL) == [True]


async def make_poison(db: Redis, keys: QueueKeys, raw: bytes) -> bytes:
    """Bury a foreign ready entry through take; return its minted id."""
    await db.rpush(keys.ready(0), raw)
    assert await take(db, keys) == []
    newest = await db.zrange(keys.dead, -1, -1)
    assert len(newest) == 1
    poison = newest[0]
    assert isinstance(poison, bytes)
    assert poison.startswith(b"poison-")
    return poison


# -- cancel --------------------------------------------------------------------------


async def test_cancel_a_queued_job(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")

    assert await admin.cancel(db, keys, "a", result_ttl_ms=TTL) == ("cancelled", "cancelled")

    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"cancelled"
    assert int(record[b"ft"]) > 0
    assert json.loads(record[b"e"])["type"] == "JobCancelled"
    assert await db.pttl(keys.job("a")) == -1, "kept while its ready entry exists"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a"], "O(1): the entry stays, take skips it"
    assert await take(db, keys, result_ttl_ms=TTL) == []
    assert 0 < await db.pttl(keys.job("a")) <= TTL, "skipped: it expires like a finished job"


async def test_cancel_a_scheduled_job_removes_it_from_the_schedule(
    db: Redis, keys: QueueKeys
) -> None:
    await put(db, keys, "a", delay_ms=TTL)
    await put(db, keys, "b", delay_ms=TTL)

    assert await admin.cancel(db, keys, "a", result_ttl_ms=TTL) == ("cancelled", "cancelled")

    assert await db.zrange(keys.schedule, 0, -1) == [b"b"]
    assert await db.hget(keys.job("a"), "s") == b"cancelled"
    assert await db.hget(keys.job("b"), "s") == b"scheduled"


async def test_cancel_with_result_ttl_zero_sets_no_ttl(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")

    assert (await admin.cancel(db, keys, "a", result_ttl_ms=0))[0] == "cancelled"

    assert await db.hget(keys.job("a"), "s") == b"cancelled"
    assert await db.pttl(keys.job("a")) == -1


async def test_cancel_an_active_job_requests_its_abort(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")
    assert await take(db, keys) == [b"a"]
    pubsub = db.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.abort_channel)

    assert await admin.cancel(db, keys, "a", result_ttl_ms=TTL) == ("aborting", "active")

    assert await db.hget(keys.job("a"), "s") == b"active", "the worker settles it"
    assert await db.hget(keys.job("a"), "ab") == b"1"
    assert await db.pttl(keys.job("a")) == -1
    message = None
    for _ in range(50):  # bounded: the message is already on the wire
        message = await pubsub.get_message(timeout=0.1)
        if message is not None:
            break
    assert message is not None and message["data"] == b"a"
    await pubsub.aclose()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("outcome", ["complete", "bury", "cancel"])
async def test_cancel_a_finished_job_is_too_late(db: Redis, keys: QueueKeys, outcome: str) -> None:
    if outcome == "cancel":
        await put(db, keys, "a")
        await admin.cancel(db, keys, "a", result_ttl_ms=TTL)
        expected = "cancelled"
    elif outcome == "bury":
        await bury(db, keys, "a")
        expected = "dead"
    else:
        await put(db, keys, "a")
        await take(db, keys)
        done = lifecycle.Settlement(b"a", "w:1", "complete", b"1")
        await leasing.ack(db, keys, [done], result_ttl_ms=TTL)
        expected = "complete"
    record = await db.hgetall(keys.job("a"))

    assert await admin.cancel(db, keys, "a", result_ttl_ms=TTL) == ("too_late", expected)
    assert await db.hgetall(keys.job("a")) == record


async def test_cancel_an_unknown_job(db: Redis, keys: QueueKeys) -> None:
    assert await admin.cancel(db, keys, "nope", result_ttl_ms=TTL) == ("not_found", "")
    assert await db.exists(keys.job("nope")) == 0


async def test_cancelled_entry_is_skipped_after_its_record_expired(
    redis: Redis, prefix: str
) -> None:
    keys = QueueKeys.for_queue(prefix, "q")
    await put(redis, keys, "a")
    assert (await admin.cancel(redis, keys, "a", result_ttl_ms=1))[0] == "cancelled"

    async def ttl_ran_out_or_none_set() -> bool:
        return await redis.pttl(keys.job("a")) < 0  # -2 gone, -1 kept without a TTL

    await wait_until(ttl_ran_out_or_none_set, timeout=5)
    assert await take(redis, keys) == []

    assert await redis.zcard(keys.dead) == 0, "a cancelled job is not poison"


async def test_cancelled_record_without_ttl_goes_when_it_would_have_run(
    db: Redis, keys: QueueKeys
) -> None:
    await put(db, keys, "a")
    assert (await admin.cancel(db, keys, "a", result_ttl_ms=0))[0] == "cancelled"

    assert await take(db, keys, result_ttl_ms=0) == []

    assert await db.exists(keys.job("a")) == 0


# -- requeue -------------------------------------------------------------------------


async def test_requeue_gives_a_dead_job_a_fresh_start(db: Redis, keys: QueueKeys) -> None:
    await bury(db, keys, "a", priority=5)
    await put(db, keys, "b", priority=5)
    tokens = await db.llen(keys.notify)

    assert await admin.requeue(db, keys, ["a"], limit=10) == lifecycle.Requeued(1, 0)

    assert await db.zcard(keys.dead) == 0
    assert await db.lrange(keys.ready(5), 0, -1) == [b"b", b"a"]
    assert await db.llen(keys.notify) == tokens + 1
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"queued"
    assert record[b"n"] == b"0"
    for stale in (b"w", b"ft", b"st"):
        assert stale not in record
    assert await take(db, keys, limit=2) == [b"b", b"a"]
    assert await db.hget(keys.job("a"), "n") == b"1"


async def test_requeue_without_ids_takes_the_oldest(db: Redis, keys: QueueKeys) -> None:
    for job_id in "abc":
        await bury(db, keys, job_id)
    await db.zadd(keys.dead, {"c": 1, "a": 2, "b": 3}, xx=True)

    assert await admin.requeue(db, keys, [], limit=2) == lifecycle.Requeued(2, 0)

    assert await db.zrange(keys.dead, 0, -1) == [b"b"]
    assert await db.lrange(keys.ready(0), 0, -1) == [b"c", b"a"]


async def test_requeue_skips_poison_entries(db: Redis, keys: QueueKeys) -> None:
    poison = await make_poison(db, keys, b"\xffforeign")
    await bury(db, keys, "a")

    assert await admin.requeue(db, keys, [poison.decode()], limit=10) == lifecycle.Requeued(0, 1)
    assert await admin.requeue(db, keys, [], limit=10) == lifecycle.Requeued(1, 1)

    assert await db.zrange(keys.dead, 0, -1) == [poison]
    assert await db.hget(keys.job_prefix + poison.decode(), "raw") == b"\xffforeign"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a"]


async def test_requeue_skips_jobs_that_are_not_dead(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "queued")

    assert await admin.requeue(db, keys, ["queued", "unknown"], limit=10) == (
        lifecycle.Requeued(0, 2)
    )
    assert await db.lrange(keys.ready(0), 0, -1) == [b"queued"]
    assert await db.exists(keys.job("unknown")) == 0


# -- purge ---------------------------------------------------------------------------


async def test_purge_deletes_named_dead_jobs(db: Redis, keys: QueueKeys) -> None:
    await bury(db, keys, "a")
    await bury(db, keys, "b")
    await put(db, keys, "queued")

    assert await admin.purge(db, keys, ["a", "queued", "unknown"], limit=10) == 1

    assert await db.exists(keys.job("a")) == 0
    assert await db.zrange(keys.dead, 0, -1) == [b"b"]
    assert await db.hget(keys.job("b"), "s") == b"dead"
    assert await db.hget(keys.job("queued"), "s") == b"queued"


async def test_purge_without_ids_takes_the_oldest(db: Redis, keys: QueueKeys) -> None:
    for job_id in "abc":
        await bury(db, keys, job_id)
    poison = await make_poison(db, keys, b"junk")
    await db.zadd(keys.dead, {poison.decode(): 1, "c": 2, "a": 3, "b": 4}, xx=True)

    assert await admin.purge(db, keys, [], limit=3) == 3

    assert await db.zrange(keys.dead, 0, -1) == [b"b"]
    for gone in (poison.decode(), "c", "a"):
        assert await db.exists(keys.job_prefix + gone) == 0
    assert await db.hget(keys.job("b"), "s") == b"dead"
    assert await admin.purge(db, keys, [], limit=3) == 1
    assert await admin.purge(db, keys, [], limit=3) == 0


async def test_enqueueing_a_dead_id_returns_the_dead_job(db: Redis, keys: QueueKeys) -> None:
    await bury(db, keys, "a")
    again = await put(db, keys, "a", check_created=False)  # requeue_dead is the way back
    assert again == lifecycle.Enqueued(created=False, state="dead")
    assert await db.zrange(keys.dead, 0, -1) == [b"a"]


async def test_purge_spares_a_live_record_left_in_the_dead_set(db: Redis, keys: QueueKeys) -> None:
    await bury(db, keys, "a")
    await db.hset(keys.job("a"), "s", "queued")  # e.g. a hand repair left the dead entry

    await admin.purge(db, keys, [], limit=10)

    assert await db.zcard(keys.dead) == 0
    assert await db.hget(keys.job("a"), "s") == b"queued"
