"""The clock-driven scripts: promotion (lua/take.lua, which leasing.promote calls taking
nothing), lua/reclaim.lua and lua/extend.lua.

fakeredis[lua] is faithful for what these scripts use (TIME, ZRANGEBYSCORE with LIMIT,
ZRANGE WITHSCORES read back with tonumber, redis.pcall error tables, ZADD XX, cjson), so
every test runs on both fakeredis and the real server. No test waits for time to pass:
due times and lease deadlines are moved into the past by rewriting their ZSET scores.
"""

from __future__ import annotations

import json

import pytest
from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store.scripts import admin, leasing
from tests.store.script_helpers import lease, put, take

FAR = 3_600_000  # an hour: "not due" for as long as any test runs


async def make_due(db: Redis, keys: QueueKeys, dues: dict[str, int]) -> None:
    """Move scheduled jobs' due times into the past (as if that time had passed)."""
    assert await db.zadd(keys.schedule, dues, xx=True, ch=True) == len(dues)


async def expire_leases(db: Redis, keys: QueueKeys, *job_ids: str) -> None:
    """Move leases' deadlines into the past (as if the worker had died)."""
    assert await db.zadd(keys.active, dict.fromkeys(job_ids, 1), xx=True, ch=True) == len(job_ids)


# -- promote -------------------------------------------------------------------------


async def test_promote_moves_due_jobs_in_due_order_across_priorities(
    db: Redis, keys: QueueKeys
) -> None:
    for job_id, priority in [("a", 2), ("b", 7), ("c", 2), ("d", 7), ("future", 5)]:
        await put(db, keys, job_id, priority=priority, delay_ms=FAR)
    await make_due(db, keys, {"c": 1_000, "a": 2_000, "d": 3_000, "b": 4_000})
    future_due = await db.zscore(keys.schedule, "future")

    promoted = await leasing.promote(db, keys, limit=100)

    assert promoted.count == 4
    assert promoted.next_due_ms == int(future_due or 0)  # the due ms; a fraction orders ties
    assert promoted.now_ms > 0
    assert await db.lrange(keys.ready(2), 0, -1) == [b"c", b"a"]
    assert await db.lrange(keys.ready(7), 0, -1) == [b"d", b"b"]
    assert await db.llen(keys.ready(5)) == 0
    assert await db.zrange(keys.schedule, 0, -1) == [b"future"]
    assert await db.llen(keys.notify) == 4
    for job_id in "abcd":
        assert await db.hget(keys.job(job_id), "s") == b"queued"
    assert await db.hget(keys.job("future"), "s") == b"scheduled"
    assert await take(db, keys, limit=10) == [b"d", b"b", b"c", b"a"]


async def test_a_take_can_promote_first_and_lease_what_it_promoted(
    db: Redis, keys: QueueKeys
) -> None:
    for job_id in ("a", "b", "c", "future"):
        await put(db, keys, job_id, delay_ms=FAR)
    await make_due(db, keys, {"a": 1_000, "b": 2_000, "c": 3_000})

    result = await leasing.take(db, keys, lease="w:1", lease_ms=30_000, limit=1, promote=10)

    assert [job.job_id for job in result.jobs] == ["a"]  # due first, leased in the same call
    assert result.promoted.count == 3
    assert result.promoted.next_due_ms == int(await db.zscore(keys.schedule, "future") or 0)
    assert await db.hget(keys.job("a"), "s") == b"active"
    assert await db.zscore(keys.active, "a") is not None
    assert await db.lrange(keys.ready(0), 0, -1) == [b"b", b"c"]
    assert await db.llen(keys.notify) == 2  # tokens for the two left for other workers


async def test_a_take_promotes_nothing_unless_asked(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "due", delay_ms=FAR)
    await make_due(db, keys, {"due": 1_000})

    result = await leasing.take(db, keys, lease="w:1", lease_ms=30_000, limit=5)

    assert (result.jobs, result.promoted.count, result.promoted.next_due_ms) == ([], 0, None)
    assert await db.zrange(keys.schedule, 0, -1) == [b"due"]


async def test_promote_respects_its_limit(db: Redis, keys: QueueKeys) -> None:
    for job_id in "abc":
        await put(db, keys, job_id, delay_ms=FAR)
    await make_due(db, keys, {"a": 100, "b": 200, "c": 300})

    first = await leasing.promote(db, keys, limit=2)

    assert first.count == 2
    assert first.next_due_ms == 300, "the next due time says more is due already"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a", b"b"]
    second = await leasing.promote(db, keys, limit=2)
    assert (second.count, second.next_due_ms) == (1, None)
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a", b"b", b"c"]
    assert await db.llen(keys.notify) == 3


async def test_promote_on_an_empty_schedule(db: Redis, keys: QueueKeys) -> None:
    promoted = await leasing.promote(db, keys, limit=10)

    assert (promoted.count, promoted.next_due_ms) == (0, None)
    assert promoted.now_ms > 0
    assert await db.exists(keys.notify) == 0


async def test_promote_leaves_jobs_that_are_not_due(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", delay_ms=FAR)
    due = await db.zscore(keys.schedule, "a")

    promoted = await leasing.promote(db, keys, limit=10)

    assert (promoted.count, promoted.next_due_ms) == (0, due)
    assert promoted.next_due_ms is not None
    assert promoted.next_due_ms > promoted.now_ms
    assert await db.hget(keys.job("a"), "s") == b"scheduled"
    assert await db.llen(keys.ready(0)) == 0


async def test_promote_drops_entries_that_are_not_scheduled_jobs(
    db: Redis, keys: QueueKeys
) -> None:
    await db.set(keys.job("wrong-type"), "x")
    await put(db, keys, "queued-already")
    await db.zadd(keys.schedule, {"no-record": 1, "wrong-type": 2, "queued-already": 3})
    tokens = await db.llen(keys.notify)

    promoted = await leasing.promote(db, keys, limit=10)

    assert (promoted.count, promoted.next_due_ms) == (0, None)
    assert await db.zcard(keys.schedule) == 0
    assert await db.lrange(keys.ready(0), 0, -1) == [b"queued-already"]
    assert await db.llen(keys.notify) == tokens
    assert await db.get(keys.job("wrong-type")) == b"x"


# -- reclaim -------------------------------------------------------------------------


async def test_reclaim_requeues_at_the_front(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", priority=3, max_attempts=3)
    await put(db, keys, "b", priority=3)
    assert await take(db, keys) == [b"a"]
    await expire_leases(db, keys, "a")
    tokens = await db.llen(keys.notify)

    reclaimed = await leasing.reclaim(db, keys, limit=10, default_max_attempts=5)

    assert reclaimed == lifecycle.Reclaimed(requeued=1, buried=0)
    assert await db.lrange(keys.ready(3), 0, -1) == [b"a", b"b"]
    assert await db.llen(keys.notify) == tokens + 1
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"queued"
    assert b"w" not in record
    assert record[b"n"] == b"1"
    assert await db.zcard(keys.active) == 0


async def test_reclaim_buries_at_the_jobs_own_max_attempts(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", priority=4, max_attempts=1)
    assert await take(db, keys) == [b"a"]
    await expire_leases(db, keys, "a")

    reclaimed = await leasing.reclaim(db, keys, limit=10, default_max_attempts=5)

    assert reclaimed == lifecycle.Reclaimed(requeued=0, buried=1)
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"dead"
    assert b"w" not in record
    assert await db.zscore(keys.dead, "a") == int(record[b"ft"])
    error = json.loads(record[b"e"])
    assert error["type"] == "LeaseExpired"
    assert "1 time(s)" in error["message"]
    assert await db.llen(keys.ready(4)) == 0
    assert await db.zcard(keys.active) == 0


@pytest.mark.parametrize(
    ("m", "default", "expected"),
    [
        (0, 1, lifecycle.Reclaimed(requeued=0, buried=1)),  # no own max: the default applies
        (0, 2, lifecycle.Reclaimed(requeued=1, buried=0)),
        (5, 1, lifecycle.Reclaimed(requeued=1, buried=0)),  # the job's own max wins
    ],
)
async def test_reclaim_max_attempts_falls_back_to_the_default(
    db: Redis, keys: QueueKeys, m: int, default: int, expected: lifecycle.Reclaimed
) -> None:
    await put(db, keys, "a", max_attempts=m)
    assert await take(db, keys) == [b"a"]
    await expire_leases(db, keys, "a")

    assert await leasing.reclaim(db, keys, limit=10, default_max_attempts=default) == expected


async def test_reclaim_leaves_live_leases_alone(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")
    assert await take(db, keys) == [b"a"]
    deadline = await db.zscore(keys.active, "a")

    assert await leasing.reclaim(db, keys, limit=10, default_max_attempts=3) == (
        lifecycle.Reclaimed(0, 0)
    )
    assert await db.zscore(keys.active, "a") == deadline
    assert await db.hget(keys.job("a"), "s") == b"active"


async def test_reclaim_respects_its_limit(db: Redis, keys: QueueKeys) -> None:
    for job_id in "abc":
        await put(db, keys, job_id, max_attempts=5)
    assert await take(db, keys, limit=3) == [b"a", b"b", b"c"]
    await expire_leases(db, keys, "a", "b", "c")

    assert await leasing.reclaim(db, keys, limit=2, default_max_attempts=3) == (
        lifecycle.Reclaimed(2, 0)
    )
    assert await db.zcard(keys.active) == 1
    assert await db.llen(keys.ready(0)) == 2


async def test_reclaim_drops_stale_active_entries(db: Redis, keys: QueueKeys) -> None:
    await db.zadd(keys.active, {"ghost": 1})

    assert await leasing.reclaim(db, keys, limit=10, default_max_attempts=3) == (
        lifecycle.Reclaimed(0, 0)
    )
    assert await db.zcard(keys.active) == 0
    assert await db.zcard(keys.dead) == 0
    assert await db.exists(keys.notify) == 0


# -- extend --------------------------------------------------------------------------


async def test_extend_renews_held_leases(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")
    await put(db, keys, "b")
    taken = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=2)

    extended = await leasing.extend(db, keys, [(b"a", "w:1"), (b"b", "w:1")], lease_ms=FAR)

    assert extended == lifecycle.Extended(lost=[], aborted=[])
    for job_id in ("a", "b"):
        deadline = await db.zscore(keys.active, job_id)
        assert deadline is not None
        assert deadline >= taken.now_ms + FAR


async def test_extend_returns_the_leases_no_longer_held(db: Redis, keys: QueueKeys) -> None:
    for job_id in ("held", "wrong-token", "reclaimed", "done"):
        await put(db, keys, job_id, max_attempts=5)
    assert len(await take(db, keys, limit=4)) == 4
    await expire_leases(db, keys, "reclaimed")
    assert (await leasing.reclaim(db, keys, limit=10, default_max_attempts=5)).requeued == 1
    done = lifecycle.Settlement(b"done", "w:1", "complete", b"1")
    assert await leasing.ack(db, keys, [done], result_ttl_ms=60_000) == [True]
    wrong_token_deadline = await db.zscore(keys.active, "wrong-token")

    extended = await leasing.extend(
        db,
        keys,
        [
            (b"held", "w:1"),
            (b"wrong-token", "w:2"),
            (b"reclaimed", "w:1"),
            (b"done", "w:1"),
            (b"never-existed", "w:1"),
        ],
        lease_ms=FAR,
    )

    # "done" was settled by this very lease (its ack's reply may still be on the way) and
    # "never-existed" has no record: neither is a lease lost to someone else.
    assert extended.lost == [b"wrong-token", b"reclaimed"]
    assert extended.aborted == []
    assert await db.zscore(keys.active, "wrong-token") == wrong_token_deadline
    assert set(await db.zrange(keys.active, 0, -1)) == {b"held", b"wrong-token"}
    held = await db.zscore(keys.active, "held")
    assert held is not None
    assert wrong_token_deadline is not None
    assert held > wrong_token_deadline


async def test_extend_with_nothing_to_renew(db: Redis, keys: QueueKeys) -> None:
    assert await leasing.extend(db, keys, [], lease_ms=1_000) == lifecycle.Extended([], [])


async def test_extend_reports_held_jobs_whose_abort_was_requested(
    db: Redis, keys: QueueKeys
) -> None:
    await put(db, keys, "a")
    await put(db, keys, "b")
    assert len(await take(db, keys, limit=2)) == 2
    assert (await admin.cancel(db, keys, "b", result_ttl_ms=FAR))[0] == "aborting"

    extended = await leasing.extend(db, keys, [(b"a", "w:1"), (b"b", "w:1")], lease_ms=FAR)

    assert extended == lifecycle.Extended(lost=[], aborted=[b"b"])


async def test_reclaim_ends_a_job_whose_abort_was_requested_as_cancelled(
    db: Redis, keys: QueueKeys
) -> None:
    await put(db, keys, "a", max_attempts=5)
    assert await take(db, keys) == [b"a"]
    assert (await admin.cancel(db, keys, "a", result_ttl_ms=FAR))[0] == "aborting"
    await expire_leases(db, keys, "a")

    result = await leasing.reclaim(db, keys, limit=10, default_max_attempts=5, result_ttl_ms=FAR)

    assert result == lifecycle.Reclaimed(requeued=0, buried=1)
    assert await db.hget(keys.job("a"), "s") == b"cancelled"
    assert await db.llen(keys.ready(0)) == 0


async def test_reclaim_never_buries_a_job_that_retries_forever(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", max_attempts=-1)
    for attempt in range(1, 6):
        job = await lease(db, keys, "a")
        assert job.attempts == attempt
        await expire_leases(db, keys, "a")
        reclaimed = await leasing.reclaim(db, keys, limit=10, default_max_attempts=3)
        assert reclaimed == lifecycle.Reclaimed(requeued=1, buried=0)
    assert await db.hget(keys.job("a"), "s") == b"queued"
