"""lua/take.lua through ``leasing.take``: order, leases, stale and poison entries, tokens.

fakeredis[lua] is faithful for what this script uses (TIME, LPOP with a count, redis.pcall
error tables on WRONGTYPE, cjson, INCR, LTRIM, ZADD), so every test runs on both fakeredis
and the real server.
"""

from __future__ import annotations

import json

import pytest
from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import PRIORITY_LEVELS, QueueKeys
from aioqueue.store.scripts import admin, leasing
from tests.store.script_helpers import LEASE_MS, put, take


async def ready_entries(db: Redis, keys: QueueKeys) -> int:
    return sum([await db.llen(key) for key in keys.ready_lists()])


async def test_take_leases_a_job(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", priority=4, max_attempts=5)

    result = await leasing.take(db, keys, lease="w:7", lease_ms=30_000, limit=10)

    assert result.now_ms > 0
    assert result.jobs == [lifecycle.Taken(b"a", b'{"t":"a"}', 1, 5, "w:7")]
    assert result.jobs[0].job_id == "a"
    assert await db.zscore(keys.active, "a") == result.now_ms + 30_000
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"active"
    assert record[b"w"] == b"w:7"
    assert record[b"n"] == b"1"
    assert int(record[b"st"]) == result.now_ms
    assert await ready_entries(db, keys) == 0


async def test_higher_priority_first_and_fifo_within_a_level(db: Redis, keys: QueueKeys) -> None:
    for job_id, priority in [("a0", 0), ("b5", 5), ("c9", 9), ("d5", 5), ("e0", 0), ("f9", 9)]:
        await put(db, keys, job_id, priority=priority)

    assert await take(db, keys, 10) == [b"c9", b"f9", b"b5", b"d5", b"a0", b"e0"]


async def test_limit_caps_one_call_across_levels(db: Redis, keys: QueueKeys) -> None:
    for job_id, priority in [("a0", 0), ("b9", 9), ("c0", 0)]:
        await put(db, keys, job_id, priority=priority)

    assert await take(db, keys, 2) == [b"b9", b"a0"]
    assert await db.lrange(keys.ready(0), 0, -1) == [b"c0"]
    assert await take(db, keys, 2, lease="w:2") == [b"c0"]
    assert await take(db, keys, 2, lease="w:3") == []


async def test_a_resent_take_returns_the_same_jobs(db: Redis, keys: QueueKeys) -> None:
    """A client resend after a lost reply must not strand the first call's jobs."""
    for job_id in ("a", "b", "c"):
        await put(db, keys, job_id)
    assert await take(db, keys, 2, lease="w:9") == [b"a", b"b"]

    assert await take(db, keys, 2, lease="w:9") == [b"a", b"b"], "the same jobs again"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"c"], "and nothing more taken"
    assert await db.hget(keys.job("a"), "n") == b"1", "no attempt counted twice"
    assert 0 < await db.pttl(keys.taken("w:9")) <= 30_000


async def test_every_priority_level_is_read(db: Redis, keys: QueueKeys) -> None:
    for priority in range(PRIORITY_LEVELS):
        await put(db, keys, f"p{priority}", priority=priority)

    expected = [f"p{p}".encode() for p in reversed(range(PRIORITY_LEVELS))]
    assert await take(db, keys, 100) == expected


async def test_attempts_count_from_the_record(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")
    await db.hset(keys.job("a"), "n", 2)  # as after two earlier attempts

    result = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=1)

    assert result.jobs[0].attempts == 3
    assert result.jobs[0].max_attempts == 0
    assert await db.hget(keys.job("a"), "n") == b"3"


async def test_a_cancelled_entry_is_skipped(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "gone")
    await put(db, keys, "b")
    code, _ = await admin.cancel(db, keys, "gone", result_ttl_ms=60_000)
    assert code == "cancelled"

    assert await take(db, keys, 1) == [b"b"]
    assert await db.hget(keys.job("gone"), "s") == b"cancelled"
    assert await db.zscore(keys.active, "gone") is None
    assert await db.zcard(keys.dead) == 0
    assert await ready_entries(db, keys) == 0


async def test_a_duplicate_entry_of_a_running_job_is_skipped(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a")
    assert await take(db, keys, 1) == [b"a"]
    await db.rpush(keys.ready(0), "a")  # e.g. a stray second entry

    assert await take(db, keys, 1, lease="w:2") == []
    assert await db.hget(keys.job("a"), "w") == b"w:1"
    assert await db.zcard(keys.dead) == 0


async def _poison(db: Redis, keys: QueueKeys, poison_id: str) -> dict[bytes | str, bytes | str]:
    assert await db.zscore(keys.dead, poison_id) is not None
    record = await db.hgetall(keys.job_prefix + poison_id)
    assert record[b"s"] == b"dead"
    assert record[b"n"] == b"0"
    assert int(record[b"ft"]) == int(record[b"et"]) > 0
    return record


async def test_an_entry_without_a_record_is_buried_as_poison(db: Redis, keys: QueueKeys) -> None:
    raw = b"\xff\xfe not utf-8 \x00"
    await db.rpush(keys.ready(3), raw)
    await put(db, keys, "good")

    assert await take(db, keys, 1) == [b"good"], "poison must not stop the take"

    record = await _poison(db, keys, "poison-1")
    assert record[b"raw"] == raw
    error = json.loads(record[b"e"])
    assert error["type"] == "PoisonEntry"
    assert error["message"] == "ready entry has no job record"
    assert await db.zrange(keys.dead, 0, -1) == [b"poison-1"]


async def test_a_record_of_the_wrong_type_is_buried_as_poison(db: Redis, keys: QueueKeys) -> None:
    await db.set(keys.job("str"), "not a hash")
    await db.rpush(keys.ready(0), "str")
    await db.rpush(keys.ready(0), "missing")

    assert await take(db, keys, 5) == []

    first = await _poison(db, keys, "poison-1")
    assert first[b"raw"] == b"str"
    assert json.loads(first[b"e"])["message"] == "job record is not a hash"
    second = await _poison(db, keys, "poison-2")  # ids come from the seq counter
    assert second[b"raw"] == b"missing"
    assert await db.get(keys.job("str")) == b"not a hash", "the foreign key is left alone"
    assert await db.zcard(keys.dead) == 2


async def test_tokens_match_entries_after_a_partial_take(db: Redis, keys: QueueKeys) -> None:
    for i in range(5):
        await put(db, keys, f"j{i}", priority=i % 2)
    assert await db.llen(keys.notify) == 5

    assert len(await take(db, keys, 2)) == 2

    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 3


async def test_woken_trims_one_token_fewer(db: Redis, keys: QueueKeys) -> None:
    for i in range(5):
        await put(db, keys, f"j{i}")
    assert await db.lpop(keys.notify) == b"1"  # the worker's BLPOP consumed one token

    assert len(await take(db, keys, 2, woken=True)) == 2

    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 3


async def test_skipped_and_poison_entries_consume_their_tokens(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "cancelled")
    await admin.cancel(db, keys, "cancelled", result_ttl_ms=60_000)
    await put(db, keys, "a")
    await put(db, keys, "b")
    await put(db, keys, "c")

    assert await take(db, keys, 1) == [b"a"]

    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 2


@pytest.mark.parametrize("woken", [False, True])
async def test_notify_is_deleted_when_drained(db: Redis, keys: QueueKeys, woken: bool) -> None:
    await put(db, keys, "a")
    await put(db, keys, "b")
    await db.rpush(keys.notify, 1, 1)  # stray tokens, e.g. from a crashed producer

    assert await take(db, keys, 10, woken=woken) == [b"a", b"b"]

    assert await db.exists(keys.notify) == 0


async def test_take_on_an_empty_queue_clears_stray_tokens(db: Redis, keys: QueueKeys) -> None:
    await db.rpush(keys.notify, 1, 1, 1)

    result = await leasing.take(db, keys, lease="w:1", lease_ms=30_000, limit=5)

    assert result.jobs == []
    assert result.now_ms > 0
    assert await db.exists(keys.notify) == 0
    assert await db.zcard(keys.active) == 0


# -- plans ---------------------------------------------------------------------------


async def test_default_plan_is_strict(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "low", priority=0)
    await put(db, keys, "high", priority=9)
    strict = [(p, 10) for p in reversed(range(PRIORITY_LEVELS))]

    result = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=10, plan=strict)

    assert [job.id for job in result.jobs] == [b"high", b"low"]


async def test_quotas_first_then_fill_in_plan_order(db: Redis, keys: QueueKeys) -> None:
    for job_id, priority in [("l1", 0), ("l2", 0), ("l3", 0), ("h1", 9), ("h2", 9), ("h3", 9)]:
        await put(db, keys, job_id, priority=priority)
    plan = [(0, 1), *((p, 1) for p in range(1, 9)), (9, 2)]  # low level visited first

    result = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=5, plan=plan)

    # first pass: 1 low, 2 high; second pass fills the limit in the same order: 2 more low
    assert [job.id for job in result.jobs] == [b"l1", b"h1", b"h2", b"l2", b"l3"]
    assert await db.lrange(keys.ready(9), 0, -1) == [b"h3"]
    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 1


async def test_full_quotas_need_no_second_pass(db: Redis, keys: QueueKeys) -> None:
    for job_id, priority in [("l1", 0), ("h1", 9), ("h2", 9)]:
        await put(db, keys, job_id, priority=priority)
    plan = [(p, 2) for p in range(PRIORITY_LEVELS)]  # ascending, quotas == limit

    result = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=2, plan=plan)

    assert [job.id for job in result.jobs] == [b"l1", b"h1"]
    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 1


async def test_a_plan_without_every_level_keeps_the_others_tokens(
    db: Redis, keys: QueueKeys
) -> None:
    await put(db, keys, "low", priority=0)
    await put(db, keys, "high", priority=9)

    result = await leasing.take(db, keys, lease="w:1", lease_ms=1_000, limit=5, plan=[(9, 5)])

    assert [job.id for job in result.jobs] == [b"high"]
    assert await db.llen(keys.notify) == await ready_entries(db, keys) == 1


def test_the_packed_take_is_the_command_redis_py_would_send() -> None:
    from redis.asyncio.connection import Connection

    keys = QueueKeys.for_queue("p", "q")
    for lease, numbers, pairs, forget in [
        ("w:1", (30_000, 10, 0, 86_400_000, 0, 0, 86_400_000), [(9, 10), (5, 3), (0, 10)], ["w:0"]),
        ("h\u00e9-2:17", (1, 0, 1, 0, 1000, 1, 0), [], []),  # promote only: no plan
    ]:
        script_keys: list[str] = [
            keys.active, keys.notify, keys.dead, keys.seq, keys.job_prefix,
            *keys.ready_lists(), keys.schedule, keys.skipped, keys.done_prefix,
            keys.paused, keys.limits, keys.rate, keys.schedule_wake, keys.tenants,
            keys.taken_prefix, keys.taken(lease),
        ]  # fmt: skip
        args: list[str | int] = [
            lease,
            *numbers,
            " ".join(forget),
            *(n for pair in pairs for n in pair),
        ]
        command = ("EVALSHA", leasing._TAKE.sha, len(script_keys), *script_keys, *args)
        expected = b"".join(Connection().pack_command(*command))
        assert leasing._pack_take(keys, lease, numbers, pairs, forget) == expected


async def test_a_take_forgets_the_lists_of_earlier_takes(db: Redis, keys: QueueKeys) -> None:
    """A take's list of what it took serves only a resend of that very call: once the
    reply is read, the next take deletes it (it would hold every id for a lease)."""
    for job_id in "abc":
        await put(db, keys, job_id)
    await leasing.take(db, keys, lease="w:1", lease_ms=LEASE_MS, limit=1)
    await leasing.take(db, keys, lease="w:2", lease_ms=LEASE_MS, limit=1)
    assert await db.exists(keys.taken("w:1"), keys.taken("w:2")) == 2
    await leasing.take(db, keys, lease="w:3", lease_ms=LEASE_MS, limit=1, forget=["w:1", "w:2"])
    assert await db.exists(keys.taken("w:1"), keys.taken("w:2"), keys.taken("w:3")) == 1
