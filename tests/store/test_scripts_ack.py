"""lua/ack.lua through ``leasing.ack``: every outcome, lost leases, idempotence, result TTL.

fakeredis[lua] is faithful for what this script uses (TIME, HMGET, HINCRBY, PEXPIRE, PTTL,
ZADD, LPUSH/RPUSH), so every test runs on both fakeredis and the real server. Leases are
expired by rewriting their deadline, never by waiting.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from aioqueue.client.enqueue import new_job_id
from aioqueue.core import lifecycle
from aioqueue.core.ids import done_slot
from aioqueue.core.keys import QueueKeys
from aioqueue.store.loader import Script
from aioqueue.store.scripts import enqueues, leasing
from tests.helpers import in_done_set
from tests.store.script_helpers import lease, put, redis_now_ms, settle

TTL = 60_000


async def test_complete_stores_the_result_with_a_ttl(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a")
    before = await redis_now_ms(db)

    assert await leasing.ack(db, keys, [settle(job, "complete", b"42")], result_ttl_ms=TTL) == [
        True
    ]

    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"complete"
    assert record[b"r"] == b"42"
    assert int(record[b"ft"]) >= before
    assert 0 < await db.pttl(keys.job("a")) <= TTL
    assert await db.zscore(keys.active, "a") is None


@pytest.mark.parametrize(
    ("outcome", "state", "field"),
    [("fail", "failed", b"e"), ("abort", "cancelled", b"e")],
)
async def test_fail_and_abort_finish_with_the_error(
    db: Redis, keys: QueueKeys, outcome: lifecycle.Outcome, state: str, field: bytes
) -> None:
    job = await lease(db, keys, "a")
    error = b'{"type":"ValueError","message":"no","traceback":""}'

    assert await leasing.ack(db, keys, [settle(job, outcome, error)], result_ttl_ms=TTL) == [True]

    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == state.encode()
    assert record[field] == error
    assert b"ft" in record
    assert 0 < await db.pttl(keys.job("a")) <= TTL
    assert await db.zcard(keys.dead) == 0
    assert await db.zcard(keys.active) == 0


@pytest.mark.parametrize("outcome", ["complete", "fail", "abort"])
async def test_result_ttl_zero_deletes_the_record(
    db: Redis, keys: QueueKeys, outcome: lifecycle.Outcome
) -> None:
    job = await lease(db, keys, "a")

    assert await leasing.ack(db, keys, [settle(job, outcome, b"1")], result_ttl_ms=0) == [True]

    assert await db.exists(keys.job("a")) == 0
    assert await db.zcard(keys.active) == 0


async def test_retry_without_delay_goes_to_the_back_of_ready(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", priority=6)
    await put(db, keys, "b", priority=6)
    job = await lease(db, keys, "a")
    tokens = await db.llen(keys.notify)

    assert await leasing.ack(db, keys, [settle(job, "retry", b'"E"')], result_ttl_ms=TTL) == [True]

    assert await db.lrange(keys.ready(6), 0, -1) == [b"b", b"a"]
    assert await db.llen(keys.notify) == tokens + 1
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"queued"
    assert record[b"e"] == b'"E"'
    assert record[b"n"] == b"1", "the attempt was counted at take time"
    assert await db.pttl(keys.job("a")) == -1
    assert await db.zcard(keys.active) == 0
    # the next attempt is number 2
    await db.lpop(keys.ready(6))
    assert (await lease(db, keys, "a")).attempts == 2


async def test_retry_with_delay_schedules_and_wakes(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a", priority=2)
    before = await redis_now_ms(db)

    acked = await leasing.ack(
        db, keys, [settle(job, "retry", b'"E"', delay_ms=5_000)], result_ttl_ms=TTL
    )
    after = await redis_now_ms(db)

    assert acked == [True]
    due = await db.zscore(keys.schedule, "a")
    assert due is not None
    assert before + 5_000 <= due <= after + 5_000
    assert await db.lrange(keys.schedule_wake, 0, -1) == [str(int(due)).encode()]
    assert await db.hget(keys.job("a"), "s") == b"scheduled"
    assert await db.hget(keys.job("a"), "e") == b'"E"'
    assert await db.llen(keys.ready(2)) == 0
    assert await db.zcard(keys.active) == 0


async def test_retry_behind_an_earlier_due_job_does_not_wake(db: Redis, keys: QueueKeys) -> None:
    await enqueues.enqueue(
        db,
        keys,
        job_id="early",
        payload=b"{}",
        priority=0,
        max_attempts=0,
        delay_ms=1_000,
        due_ms=0,
    )
    await db.delete(keys.schedule_wake)  # a poller took that token
    job = await lease(db, keys, "a")

    acked = await leasing.ack(
        db, keys, [settle(job, "retry", b"", delay_ms=60_000)], result_ttl_ms=TTL
    )

    assert acked == [True]
    assert await db.zrange(keys.schedule, 0, -1) == [b"early", b"a"]
    assert await db.exists(keys.schedule_wake) == 0


async def test_bury_moves_to_dead_without_a_ttl(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a")

    assert await leasing.ack(db, keys, [settle(job, "bury", b'"E"')], result_ttl_ms=TTL) == [True]

    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == b"dead"
    assert record[b"e"] == b'"E"'
    assert await db.zscore(keys.dead, "a") == int(record[b"ft"])
    assert await db.pttl(keys.job("a")) == -1
    assert await db.zcard(keys.active) == 0


async def test_release_returns_to_the_front_uncounted(db: Redis, keys: QueueKeys) -> None:
    await put(db, keys, "a", priority=1)
    await put(db, keys, "b", priority=1)
    job = await lease(db, keys, "a")
    tokens = await db.llen(keys.notify)

    assert await leasing.ack(db, keys, [settle(job, "release")], result_ttl_ms=TTL) == [True]

    assert await db.lrange(keys.ready(1), 0, -1) == [b"a", b"b"]
    assert await db.llen(keys.notify) == tokens + 1
    assert await db.hget(keys.job("a"), "s") == b"queued"
    assert await db.hget(keys.job("a"), "n") == b"0"
    assert await db.zcard(keys.active) == 0
    assert (await lease(db, keys, "a")).attempts == 1


async def test_a_wrong_lease_token_is_not_settled(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a")
    deadline = await db.zscore(keys.active, "a")
    forged = lifecycle.Settlement(job.id, "w:someone-else", "complete", b"1")

    assert await leasing.ack(db, keys, [forged], result_ttl_ms=TTL) == [False]

    assert await db.hget(keys.job("a"), "s") == b"active"
    assert await db.hget(keys.job("a"), "w") == job.lease.encode()
    assert await db.zscore(keys.active, "a") == deadline


async def test_an_ack_after_reclaim_is_not_settled(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a", max_attempts=3)
    await db.zadd(keys.active, {"a": 0}, xx=True)  # the lease expired
    reclaimed = await leasing.reclaim(db, keys, limit=10, default_max_attempts=3)
    assert reclaimed == lifecycle.Reclaimed(requeued=1, buried=0)

    assert await leasing.ack(db, keys, [settle(job, "complete", b"1")], result_ttl_ms=TTL) == [
        False
    ]

    assert await db.hget(keys.job("a"), "s") == b"queued"
    assert await db.lrange(keys.ready(0), 0, -1) == [b"a"]


async def test_an_old_lease_cannot_settle_the_next_attempt(db: Redis, keys: QueueKeys) -> None:
    first = await lease(db, keys, "a")
    await leasing.ack(db, keys, [settle(first, "retry", b"")], result_ttl_ms=TTL)
    second = await lease(db, keys, "a")

    assert await leasing.ack(db, keys, [settle(first, "complete", b"1")], result_ttl_ms=TTL) == [
        False
    ]
    assert await db.hget(keys.job("a"), "s") == b"active"
    assert await db.hget(keys.job("a"), "w") == second.lease.encode()


@pytest.mark.parametrize("outcome", ["complete", "retry", "bury", "fail", "abort", "release"])
async def test_repeating_an_ack_is_harmless(
    db: Redis, keys: QueueKeys, outcome: lifecycle.Outcome
) -> None:
    job = await lease(db, keys, "a")
    first = await leasing.ack(db, keys, [settle(job, outcome, b"1")], result_ttl_ms=TTL)
    record = await db.hgetall(keys.job("a"))
    lists = [await db.lrange(key, 0, -1) for key in (*keys.ready_lists(), keys.notify)]
    sets = [await db.zrange(key, 0, -1) for key in (keys.schedule, keys.dead, keys.active)]

    again = await leasing.ack(db, keys, [settle(job, outcome, b"2")], result_ttl_ms=TTL)

    assert first == again == [True]
    assert await db.hgetall(keys.job("a")) == record
    assert [await db.lrange(key, 0, -1) for key in (*keys.ready_lists(), keys.notify)] == lists
    assert [await db.zrange(key, 0, -1) for key in (keys.schedule, keys.dead, keys.active)] == sets


async def test_repeating_an_ack_is_harmless_when_results_are_not_kept(
    db: Redis, keys: QueueKeys
) -> None:
    job = await lease(db, keys, "a")
    assert await leasing.ack(db, keys, [settle(job, "complete", b"1")], result_ttl_ms=0) == [True]

    assert await leasing.ack(db, keys, [settle(job, "complete", b"1")], result_ttl_ms=0) == [True]


async def test_a_batch_reports_each_job_in_order(db: Redis, keys: QueueKeys) -> None:
    a = await lease(db, keys, "a")
    b = await lease(db, keys, "b")
    c = await lease(db, keys, "c")
    batch = [
        settle(a, "complete", b"1"),
        lifecycle.Settlement(b.id, "w:stale", "complete", b"2"),
        settle(c, "bury", b'"E"'),
    ]

    assert await leasing.ack(db, keys, batch, result_ttl_ms=TTL) == [True, False, True]

    assert await db.hget(keys.job("a"), "s") == b"complete"
    assert await db.hget(keys.job("b"), "s") == b"active"
    assert await db.hget(keys.job("c"), "s") == b"dead"
    assert await db.zrange(keys.active, 0, -1) == [b"b"]


async def test_an_empty_batch_is_a_no_op(db: Redis, keys: QueueKeys) -> None:
    assert await leasing.ack(db, keys, [], result_ttl_ms=TTL) == []


async def test_a_job_id_that_is_not_utf8_is_settled_too(db: Redis, keys: QueueKeys) -> None:
    """Acks travel as one JSON argument, which cannot carry such an id: the script's
    one-argument-per-field form takes over."""
    raw_id = b"\xff\xfe-id"
    await db.hset(
        keys.job_prefix.encode() + raw_id,
        mapping={"s": "queued", "p": b'{"t":"x"}', "n": 0, "m": 0, "pr": 0},
    )
    await db.rpush(keys.ready(0), raw_id)
    taken = await leasing.take(db, keys, lease="w:raw", lease_ms=30_000, limit=1)
    assert [job.id for job in taken.jobs] == [raw_id]

    done = lifecycle.Settlement(raw_id, "w:raw", "complete", b'"ok"')
    assert await leasing.ack(db, keys, [done], result_ttl_ms=60_000) == [True]
    assert await db.hget(keys.job_prefix.encode() + raw_id, "s") == b"complete"


async def test_a_complete_record_keeps_what_status_and_result_need(
    db: Redis, keys: QueueKeys
) -> None:
    """The payload is most of a record: a complete job drops it (and its stale retry
    error) but keeps its task's name (field t, read from the payload) and its priority;
    failed and dead ones keep everything."""
    job = await lease(db, keys, "a")
    await db.hset(keys.job("a"), "e", b'{"type":"Earlier","message":"","traceback":""}')
    assert await leasing.ack(db, keys, [settle(job, "complete", b"42")], result_ttl_ms=TTL) == [
        True
    ]
    record = await db.hgetall(keys.job("a"))
    assert sorted(record) == [b"et", b"ft", b"m", b"n", b"pr", b"r", b"s", b"st", b"t", b"w"]
    assert record[b"r"] == b"42" and record[b"t"] == b"a"


@pytest.mark.parametrize(
    ("payload", "task"),
    [
        (b'{"t":"send_email","a":[1]}', b"send_email"),
        (b'{"a":[1],"t":"written \\"elsewhere\\""}', b'written "elsewhere"'),
        (b"not json", None),
    ],
)
async def test_a_complete_record_names_its_task_whoever_wrote_the_payload(
    db: Redis, keys: QueueKeys, payload: bytes, task: bytes | None
) -> None:
    """orjson writes the task's name first; another client's payload may not: the name is
    found either way, and a payload that is not JSON leaves none (the ack still settles)."""
    job = await lease(db, keys, "a")
    await db.hset(keys.job("a"), "p", payload)
    assert await leasing.ack(db, keys, [settle(job, "complete", b"1")], result_ttl_ms=TTL) == [True]
    assert await db.hget(keys.job("a"), "t") == task


async def test_a_complete_record_can_keep_its_payload(db: Redis, keys: QueueKeys) -> None:
    job = await lease(db, keys, "a")
    settled = await leasing.ack(
        db, keys, [settle(job, "complete", b"42")], result_ttl_ms=TTL, keep_payload=True
    )
    assert settled == [True]
    assert await db.hget(keys.job("a"), "p") == b'{"t":"a"}'


async def test_a_job_with_no_result_keeps_only_its_id_for_its_own_time(
    db: Redis, keys: QueueKeys
) -> None:
    """A complete job that returned None leaves no record, only its id's fingerprint in a
    done set (where ids.done_slot() says, in the generation of the Redis clock)."""
    job = await lease(db, keys, "a")
    now = await redis_now_ms(db)
    settled = await leasing.ack(
        db, keys, [settle(job, "complete", b"null")], result_ttl_ms=TTL, kept_ms=5_000
    )
    assert settled == [True]
    assert await db.exists(keys.job("a")) == 0
    generations = {now // 5_000, (now + 1_000) // 5_000}  # the ack ran a moment later
    done = [keys.done(5_000, g, done_slot(b"a")) for g in generations]
    assert [await in_done_set(db, key, "a") for key in done].count(True) == 1
    assert await leasing.ack(db, keys, [settle(job, "complete", b"null")], result_ttl_ms=TTL) == [
        True
    ]  # a resent ack finds it settled
    again = await put(db, keys, "a", check_created=False, span_ms=5_000)
    assert again == lifecycle.Enqueued(created=False, state="complete")


async def test_jobs_made_in_one_millisecond_are_remembered_in_one_done_set(
    db: Redis, keys: QueueKeys
) -> None:
    """Generated ids of one millisecond share a done set: one ack marks them all there,
    with the generation's expiry, and each is found again by its id."""
    ids = [f"0Q8S_rgM{n:012d}" for n in range(30)]  # the shape of new_job_id()'s
    for job_id in ids:
        await put(db, keys, job_id)
    taken = await leasing.take(db, keys, lease="w:batch", lease_ms=60_000, limit=30)
    assert len(taken.jobs) == 30
    now = await redis_now_ms(db)
    settlements = [settle(job, "complete", b"null") for job in taken.jobs]
    assert await leasing.ack(db, keys, settlements, result_ttl_ms=TTL, kept_ms=5_000) == [True] * 30
    assert len({done_slot(job_id.encode()) for job_id in ids}) == 1
    sets = [key.decode() for key in cast("list[bytes]", await db.keys(f"{keys.done_prefix}*"))]
    assert len(sets) == 1 and await db.scard(sets[0]) == 30
    assert 0 < await db.pttl(sets[0]) <= 10_000
    assert sets[0] in {
        keys.done(5_000, g, done_slot(ids[0].encode())) for g in (now // 5_000, now // 5_000 + 1)
    }
    for job_id in ids:
        again = await put(db, keys, job_id, check_created=False, span_ms=5_000)
        assert again == lifecycle.Enqueued(created=False, state="complete")


async def test_a_job_with_no_result_keeps_nothing_without_a_window(
    db: Redis, keys: QueueKeys
) -> None:
    job = await lease(db, keys, "a")
    assert await leasing.ack(
        db, keys, [settle(job, "complete", b"null")], result_ttl_ms=TTL, kept_ms=0
    ) == [True]
    assert await db.exists(keys.job("a")) == 0
    assert await db.keys(f"{keys.done_prefix}*") == []


@pytest.mark.parametrize(("outcome", "state"), [("fail", b"failed"), ("bury", b"dead")])
async def test_failed_and_dead_records_keep_everything(
    db: Redis, keys: QueueKeys, outcome: lifecycle.Outcome, state: bytes
) -> None:
    job = await lease(db, keys, "a")
    error = b'{"type":"ValueError","message":"no","traceback":""}'
    assert await leasing.ack(db, keys, [settle(job, outcome, error)], result_ttl_ms=TTL) == [True]
    record = await db.hgetall(keys.job("a"))
    assert record[b"s"] == state
    assert record[b"p"] == b'{"t":"a"}' and b"pr" in record


@pytest.mark.parametrize(
    "job_id",
    [
        "a",
        "ab",
        "0f8e6c2a-1b7d-4e5f-9a3b-c4d5e6f7a8b9",
        "welcome-42",
        "\u00e9t\u00e9-2026",
        "x" * 200,
        "generated",  # a fresh generated id (made in the test: ids must match across runs)
        "0Q8S_r~z" + "x" * 12,  # a generated id's shape
        "0Q8S_-=\u00e9" + "x" * 11,  # that shape in length, with characters outside its alphabet
    ],
)
async def test_python_and_lua_agree_on_a_done_slot(db: Redis, keys: QueueKeys, job_id: str) -> None:
    if job_id == "generated":
        job_id = new_job_id()  # goes by its millisecond
    job = await lease(db, keys, job_id)
    now = await redis_now_ms(db)
    await leasing.ack(db, keys, [settle(job, "complete", b"null")], result_ttl_ms=TTL, kept_ms=TTL)
    slot = done_slot(job_id.encode())
    found = [
        await in_done_set(db, keys.done(TTL, g, slot), job_id) for g in (now // TTL, now // TTL + 1)
    ]
    assert True in found  # Python and Lua agree on its slot and on its fingerprint


class _Recorder:
    """Stands in for ``routing.Lines``: keeps the packed calls, answers ``reply``."""

    def __init__(self, reply: list[Any]) -> None:
        self.sent: list[bytes] = []
        self._reply = reply

    async def send(self, key: str, script: Script, commands: list[bytes]) -> list[Any]:
        self.sent += commands
        return [self._reply]


def _redis_py(*command: Any) -> bytes:
    return b"".join(Connection().pack_command(*command))


async def test_the_packed_ack_is_the_command_redis_py_would_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = QueueKeys.for_queue("p", "q")
    recorder = _Recorder([1, -2])
    monkeypatch.setattr(leasing, "lines_for", lambda _: recorder)
    script_keys = [
        keys.active, keys.schedule, keys.dead, keys.notify, keys.schedule_wake,
        keys.job_prefix, keys.done_prefix, *keys.ready_lists(), keys.history_prefix,
        *keys.links(), keys.completed, keys.tenants,
    ]  # fmt: skip
    sha = leasing._ACK.sha
    done = lifecycle.Settlement(b"a", "w:1", "complete", b"null")
    retry = lifecycle.Settlement(b"\xff", "w:2", "retry", b'"E"', 1500)
    redis = cast("Redis", object())

    assert await leasing.ack(redis, keys, [done], result_ttl_ms=TTL, kept_ms=5) == [True, False]
    json = b'[["a","w:1","complete","null",0]]'
    args = [TTL, 5, 0, 0, keys.settled_channel, "json", json]
    assert recorder.sent.pop() == _redis_py("EVALSHA", sha, 25, *script_keys, *args)

    await leasing.ack(redis, keys, [done, retry], result_ttl_ms=TTL, keep_payload=True)
    fields = [b"a", "w:1", "complete", b"null", 0, b"\xff", "w:2", "retry", b'"E"', 1500]
    args = [TTL, TTL, 1, 0, keys.settled_channel, "args", *fields]
    assert recorder.sent.pop() == _redis_py("EVALSHA", sha, 25, *script_keys, *args)


async def test_the_packed_offer_is_the_command_redis_py_would_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = QueueKeys.for_queue("p", "q")
    recorder = _Recorder([])
    monkeypatch.setattr(leasing, "lines_for", lambda _: recorder)
    token = "o:\u00e9"
    await leasing.idle(cast("Redis", object()), keys, token, lease_ms=30, hold_ms=5, forget=["a"])
    script_keys = [
        keys.idle,
        keys.direct(token),
        keys.taken(token),
        keys.job_prefix,
        keys.taken_prefix,
    ]
    command = ("EVALSHA", leasing._IDLE.sha, 5, *script_keys, f"30 {token}", 5, "a")
    assert recorder.sent == [_redis_py(*command)]
