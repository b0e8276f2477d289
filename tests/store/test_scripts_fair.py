"""Tenants (lua/include/fair.lua, take.lua's rings): turns within a priority, weights, caps
and rates held for every caller, and what every script that makes a job ready or ends a
lease does for a tenant's job. On fakeredis and the real server (``db``)."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import cast

from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import LinkedJob, NewJob, Settlement
from aioqueue.core.limits import TenantLimits
from aioqueue.core.records import TenantCount
from aioqueue.store import listing, reads, tenants
from aioqueue.store.scripts import admin, leasing, links
from tests.helpers import wait_until
from tests.store.script_helpers import LEASE_MS, lua_constant, put, redis_now_ms, take

# How long a rate's state outlives its last use, as include/gcra.lua says.
GCRA_KEPT_MS = lua_constant("gcra", "GCRA_KEPT_MS")

TTL = 60_000
_leases = itertools.count(1)


async def put_tenant(
    db: Redis,
    keys: QueueKeys,
    job_id: str,
    tenant: str,
    *,
    priority: int = 5,
    delay_ms: int = 0,
    group: str = "",
) -> None:
    job = NewJob(job_id, b'{"t":"%s"}' % job_id.encode(), priority, delay_ms=delay_ms)
    [result] = await links.enqueue_linked(db, keys, [LinkedJob(job, group, tenant=tenant)])
    assert result.created


async def take_one_by_one(db: Redis, keys: QueueKeys, count: int) -> list[bytes]:
    taken = []
    for _ in range(count):
        taken += await take(db, keys, 1, lease=f"t:{next(_leases)}")
    return taken


async def limit(db: Redis, keys: QueueKeys, tenant: str, limits: TenantLimits) -> None:
    await db.hset(keys.tenant_key("limits"), tenant, limits.to_field() or "")


async def tenant_keys(db: Redis, keys: QueueKeys) -> list[bytes]:
    return sorted(cast("list[bytes]", await db.keys(keys.tenants + "*")))


async def redis_clock_past(db: Redis, ms: int) -> None:
    async def past() -> bool:
        return await redis_now_ms(db) > ms

    await wait_until(past)


async def take_jobs(
    db: Redis, keys: QueueKeys, limit: int, *, promote: int = 0
) -> lifecycle.TakeResult:
    """A take under a lease token of its own."""
    lease = f"t:{next(_leases)}"
    return await leasing.take(
        db, keys, lease=lease, lease_ms=LEASE_MS, limit=limit, promote=promote
    )


async def test_tenants_take_turns_within_a_priority(db: Redis, keys: QueueKeys) -> None:
    for n in range(4):
        await put_tenant(db, keys, f"a{n}", "A")
    await put_tenant(db, keys, "b0", "B")
    await put_tenant(db, keys, "b1", "B")
    await put_tenant(db, keys, "c0", "C")

    assert await take_one_by_one(db, keys, 3) == [b"a0", b"b0", b"c0"]
    assert await take(db, keys, 10, lease="w:all") == [b"a1", b"b1", b"a2", b"a3"]
    assert await tenant_keys(db, keys) == []  # (no limit: no running count is kept)


async def test_the_plain_ready_list_takes_turns_as_one_member(db: Redis, keys: QueueKeys) -> None:
    for n in range(3):
        await put_tenant(db, keys, f"a{n}", "A", priority=0)
    await put(db, keys, "p0")
    await put(db, keys, "p1")

    assert await take(db, keys, 10) == [b"a0", b"p0", b"a1", b"p1", b"a2"]
    assert await db.exists(keys.ready(0), keys.tenant_key("ring", 0), keys.tenant_key("turn")) == 0


async def test_priorities_come_first(db: Redis, keys: QueueKeys) -> None:
    await put_tenant(db, keys, "b0", "B", priority=0)
    await put(db, keys, "p5", priority=5)
    await put_tenant(db, keys, "a9", "A", priority=9)
    await put_tenant(db, keys, "b9", "B", priority=9)

    assert await take(db, keys, 10) == [b"a9", b"b9", b"p5", b"b0"]


async def test_a_tenant_s_weight_is_its_jobs_per_turn(db: Redis, keys: QueueKeys) -> None:
    await db.hset(keys.tenant_key("weights"), "A", 3)
    for n in range(7):
        await put_tenant(db, keys, f"a{n}", "A")
    for n in range(3):
        await put_tenant(db, keys, f"b{n}", "B")

    # a turn cut short by a take's limit goes on at the next take
    assert await take(db, keys, 2, lease="w:1") == [b"a0", b"a1"]
    assert await take(db, keys, 10, lease="w:2") == [
        b"a2", b"b0", b"a3", b"a4", b"a5", b"b1", b"a6", b"b2",
    ]  # fmt: skip


async def test_a_capped_tenant_waits_until_a_lease_of_it_ends(db: Redis, keys: QueueKeys) -> None:
    await limit(db, keys, "", TenantLimits(max_running=2))  # every tenant's
    for n in range(4):
        await put_tenant(db, keys, f"a{n}", "A")
    await put_tenant(db, keys, "b0", "B")

    first = await take_jobs(db, keys, 10)
    assert [job.id for job in first.jobs] == [b"a0", b"b0", b"a1"]
    assert await db.hget(keys.tenant_key("running"), "A") == b"2"
    assert await db.hget(keys.tenant_key("held"), "A") == b"5"
    assert await db.llen(keys.notify) == 0  # nothing else may start: no wake-up left
    assert (await take_jobs(db, keys, 10)).jobs == []

    a0 = first.jobs[0]
    await leasing.ack(
        db, keys, [Settlement(a0.id, a0.lease, "complete", b"null")], result_ttl_ms=TTL
    )
    assert await db.hexists(keys.tenant_key("held"), "A") == 0
    assert await db.llen(keys.notify) == 1  # its return wakes a worker for what may start
    assert [job.id for job in (await take_jobs(db, keys, 10)).jobs] == [b"a2"]
    assert await db.hget(keys.tenant_key("held"), "A") == b"5"


async def test_a_tenant_s_own_limits_replace_the_default(db: Redis, keys: QueueKeys) -> None:
    await limit(db, keys, "", TenantLimits(max_running=1))
    await limit(db, keys, "A", TenantLimits(max_running=3))
    for n in range(4):
        await put_tenant(db, keys, f"a{n}", "A")
        await put_tenant(db, keys, f"b{n}", "B")

    taken = [job.id for job in (await take_jobs(db, keys, 10)).jobs]
    assert taken == [b"a0", b"b0", b"a1", b"a2"]


async def test_reclaim_frees_a_capped_tenant(db: Redis, keys: QueueKeys) -> None:
    await limit(db, keys, "A", TenantLimits(max_running=1))
    await put_tenant(db, keys, "a0", "A")
    await put_tenant(db, keys, "a1", "A")
    taken = await leasing.take(db, keys, lease="w:dead", lease_ms=1, limit=10)
    assert [job.id for job in taken.jobs] == [b"a0"]

    await redis_clock_past(db, await redis_now_ms(db) + 1)
    assert (await leasing.reclaim(db, keys, limit=10, default_max_attempts=5)).requeued == 1

    assert await db.hexists(keys.tenant_key("running"), "A") == 0
    assert await db.lrange(keys.tenant_key("jobs", 5, "A"), 0, -1) == [b"a0", b"a1"]
    assert await take(db, keys, 10, lease="w:2") == [b"a0"]  # the cap holds again


async def test_a_rate_held_tenant_is_due_again_like_a_delayed_job(
    db: Redis, keys: QueueKeys
) -> None:
    await limit(db, keys, "A", TenantLimits(interval_ms=60_000.0))  # one a minute
    await put_tenant(db, keys, "a0", "A")
    await put_tenant(db, keys, "a1", "A")
    await put_tenant(db, keys, "b0", "B")

    result = await take_jobs(db, keys, 10, promote=10)
    assert [job.id for job in result.jobs] == [b"a0", b"b0"]
    due = await db.zscore(keys.tenant_key("due"), "A")
    assert due is not None and abs(due - (result.now_ms + 60_000)) <= 2
    assert await db.lrange(keys.schedule_wake, 0, -1) == [b"%d" % due]  # promoters woken
    promoted = await leasing.promote(db, keys, limit=10)
    assert promoted.next_due_ms == due  # (the schedule is empty: the tenant is next)

    await db.zadd(keys.tenant_key("due"), {"A": 0})  # its time came
    await db.delete(keys.tenant_key("rate", "A"))
    assert [job.id for job in (await take_jobs(db, keys, 10)).jobs] == [b"a1"]


async def test_a_delayed_tenant_job_enters_its_tenant_s_list_when_due(
    db: Redis, keys: QueueKeys
) -> None:
    await put_tenant(db, keys, "a0", "A", delay_ms=30)
    await put_tenant(db, keys, "b0", "B")
    assert await db.zscore(keys.schedule, "a0") is not None
    assert await db.zscore(keys.tenants, "A") is None

    await redis_clock_past(db, await redis_now_ms(db) + 30)
    promoted = await leasing.promote(db, keys, limit=10)
    assert promoted.count == 1
    assert await db.lrange(keys.tenant_key("jobs", 5, "A"), 0, -1) == [b"a0"]
    assert await db.lrange(keys.ready(5), 0, -1) == []
    assert await take(db, keys, 10) == [b"b0", b"a0"]


async def test_cancel_counts_off_a_tenant_s_queued_job(db: Redis, keys: QueueKeys) -> None:
    for n in range(3):
        await put_tenant(db, keys, f"a{n}", "A")
    code, _ = await admin.cancel(db, keys, "a1", result_ttl_ms=TTL)
    assert code == "cancelled"

    counts = await reads.counts(db, keys)
    assert (counts.ready, counts.ready_by_priority, counts.tenants) == (2, {5: 2}, 1)
    assert [(t.name, t.ready) for t in counts.top_tenants] == [("A", 2)]
    assert await take(db, keys, 10) == [b"a0", b"a2"]
    assert await db.hgetall(keys.skipped) == {}
    assert await tenant_keys(db, keys) == []


async def test_retries_and_releases_go_back_on_the_tenant_s_list(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(3):
        await put_tenant(db, keys, f"a{n}", "A")
    taken = (await take_jobs(db, keys, 2)).jobs
    await leasing.ack(
        db, keys,
        [Settlement(taken[0].id, taken[0].lease, "retry", b'"E"'),
         Settlement(taken[1].id, taken[1].lease, "release")],
        result_ttl_ms=TTL,
    )  # fmt: skip

    assert await db.lrange(keys.tenant_key("jobs", 5, "A"), 0, -1) == [b"a1", b"a2", b"a0"]
    assert await db.hexists(keys.tenant_key("running"), "A") == 0
    assert await take(db, keys, 10) == [b"a1", b"a2", b"a0"]


async def test_a_dead_tenant_job_is_requeued_on_its_tenant_s_list(
    db: Redis, keys: QueueKeys
) -> None:
    await put_tenant(db, keys, "a0", "A")
    [job] = (await take_jobs(db, keys, 1)).jobs
    await leasing.ack(db, keys, [Settlement(job.id, job.lease, "bury", b'"E"')], result_ttl_ms=TTL)
    assert (await reads.counts(db, keys)).tenants == 0

    assert (await admin.requeue(db, keys, ["a0"], limit=10)).requeued == 1
    assert await db.lrange(keys.tenant_key("jobs", 5, "A"), 0, -1) == [b"a0"]
    assert await take(db, keys, 10) == [b"a0"]


async def test_a_paused_queue_leases_no_tenant_job_and_its_resume_wakes_for_them(
    db: Redis, keys: QueueKeys
) -> None:
    await put_tenant(db, keys, "a0", "A")
    await put_tenant(db, keys, "a1", "A")
    await db.set(keys.paused, 1)
    assert await take(db, keys, 10) == []
    await db.delete(keys.notify)

    assert await admin.resume(db, keys)
    assert await db.llen(keys.notify) == 2
    assert await take(db, keys, 10) == [b"a0", b"a1"]


async def test_a_group_s_next_job_goes_on_its_tenant_s_list(db: Redis, keys: QueueKeys) -> None:
    await put_tenant(db, keys, "g0", "A", group="g")
    await put_tenant(db, keys, "g1", "A", group="g")
    assert await db.hget(keys.job("g1"), "s") == b"waiting"
    [job] = (await take_jobs(db, keys, 10)).jobs
    assert job.id == b"g0"

    await leasing.ack(
        db, keys, [Settlement(job.id, job.lease, "complete", b"1")], result_ttl_ms=TTL
    )
    assert await db.lrange(keys.tenant_key("jobs", 5, "A"), 0, -1) == [b"g1"]
    assert await take(db, keys, 10) == [b"g1"]


async def test_no_tenant_keys_are_left_once_a_tenant_is_done(db: Redis, keys: QueueKeys) -> None:
    await limit(db, keys, "", TenantLimits(max_running=1, interval_ms=1.0))
    await db.hset(keys.tenant_key("weights"), "A", 2)
    for n in range(3):
        await put_tenant(db, keys, f"a{n}", "A")
    for _ in range(3):
        [job] = (await take_jobs(db, keys, 10)).jobs
        await leasing.ack(
            db, keys, [Settlement(job.id, job.lease, "complete", b"null")], result_ttl_ms=TTL
        )
        await asyncio.sleep(0.002)  # (its rate: one start a millisecond)
        await leasing.promote(db, keys, limit=10)

    config = {keys.tenant_key("limits").encode(), keys.tenant_key("weights").encode()}
    left = set(await tenant_keys(db, keys)) - config
    assert left <= {keys.tenant_key("rate", "A").encode()}  # (a rate's state, expiring)
    if left:  # expiring (or gone since the look: -2), never kept for good (-1)
        assert await db.pttl(keys.tenant_key("rate", "A")) in range(-2, GCRA_KEPT_MS + 51)
        assert await db.pttl(keys.tenant_key("rate", "A")) != -1


async def test_the_ready_listing_is_in_the_order_take_serves(db: Redis, keys: QueueKeys) -> None:
    await db.hset(keys.tenant_key("weights"), "A", 2)
    await put(db, keys, "p9", priority=9)
    for n in range(5):
        await put_tenant(db, keys, f"a{n}", "A")
    await put_tenant(db, keys, "b0", "B")
    await put(db, keys, "p0", priority=5)
    await put(db, keys, "p1", priority=5)
    await put_tenant(db, keys, "c0", "C", priority=0)
    await take(db, keys, 2, lease="w:0")  # p9 and half of A's turn
    await admin.cancel(db, keys, "b0", result_ttl_ms=TTL)  # (left for take to skip)

    listed = [job.id for job in await listing.place(db, keys, "ready", limit=100, offset=0)]
    pages = [
        job.id
        for offset in range(0, 8, 3)
        for job in await listing.place(db, keys, "ready", limit=3, offset=offset)
    ]
    walked = await listing.find(db, keys, "ready", task=None, limit=100, offset=0, scan=100)
    found = await listing.find(db, keys, "ready", task="a3", limit=100, offset=0, scan=100)

    taken = [job_id.decode() for job_id in await take_one_by_one(db, keys, 10)]
    assert listed == pages == taken == ["a1", "p0", "a2", "a3", "p1", "a4", "c0"]
    assert [job.id for job in walked.jobs] == listed
    assert [job.id for job in found.jobs] == ["a3"]


# -- the ranking: exact counts, while takes leave the ZSET's scores high ----------------------


async def test_the_ranking_is_exact_though_takes_left_the_scores_high(
    db: Redis, keys: QueueKeys
) -> None:
    await db.hset(keys.tenant_key("weights"), "A", 10)
    for n in range(10):
        await put_tenant(db, keys, f"a{n}", "A")
    for n in range(6):
        await put_tenant(db, keys, f"b{n}", "B")
    assert len((await take_jobs(db, keys, 9)).jobs) == 9  # A's turn: 9 of its 10
    assert await db.zscore(keys.tenants, "A") == 10  # (the take left its score high)

    counts = await reads.counts(db, keys, top_tenants=1)
    assert [(t.name, t.ready) for t in counts.top_tenants] == [("B", 6)]
    assert counts.tenants == 2
    assert await db.zscore(keys.tenants, "A") == 1  # set right by the read
    assert [(t.name, t.ready) for t in await tenants_ranked(db, keys)] == [("B", 6), ("A", 1)]


async def test_a_tenant_leaves_the_ranking_with_its_last_queued_job(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(2):
        await put_tenant(db, keys, f"a{n}", "A")
    await put_tenant(db, keys, "b0", "B")
    await take(db, keys, 2)  # a0 and b0: B has nothing queued
    await admin.cancel(db, keys, "a1", result_ttl_ms=TTL)  # nor has A now
    assert await db.zcard(keys.tenants) == 0
    assert await db.exists(keys.tenant_key("count")) == 0
    assert (await reads.counts(db, keys)).top_tenants == ()


async def test_the_ranking_matches_a_recount_after_random_work(db: Redis, keys: QueueKeys) -> None:
    """Enqueues, takes of any size and cancels in a fixed random order: every ranking read
    (whole, and by pages) gives each tenant's queued jobs exactly, most first."""
    rng = random.Random(27)
    queued: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    for step in range(400):
        roll = rng.random()
        if roll < 0.6:
            tenant, job_id = f"t{rng.randrange(12)}", f"j{step}"
            await put_tenant(db, keys, job_id, tenant)
            queued.setdefault(tenant, set()).add(job_id)
            owner[job_id] = tenant
        elif roll < 0.85:
            for taken in await take(db, keys, rng.randrange(1, 8)):
                queued[owner[taken.decode()]].discard(taken.decode())
        else:
            waiting = sorted(j for jobs in queued.values() for j in jobs)
            if waiting:
                job_id = rng.choice(waiting)
                await admin.cancel(db, keys, job_id, result_ttl_ms=TTL)
                queued[owner[job_id]].discard(job_id)
        if step % 25 == 0:
            expected = sorted(
                ((t, len(jobs)) for t, jobs in queued.items() if jobs), key=lambda e: -e[1]
            )
            ranked = [(t.name, t.ready) for t in await tenants_ranked(db, keys)]
            assert sorted(ranked) == sorted(expected)
            assert [n for _, n in ranked] == [n for _, n in expected]  # most first
            paged = [(t.name, t.ready) for t in await tenants.ranked(db, keys, limit=3, offset=2)]
            assert [n for _, n in paged] == [n for _, n in expected][2:5]
            assert (await reads.counts(db, keys, top_tenants=0)).tenants == len(expected)


async def tenants_ranked(db: Redis, keys: QueueKeys) -> list[TenantCount]:
    return await tenants.ranked(db, keys, limit=100, offset=0)


# -- running counts: kept only while some limit exists -------------------------------------


async def test_running_jobs_are_counted_from_the_leases_while_no_limit_exists(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(4):
        await put_tenant(db, keys, f"a{n}", "A")
    await put_tenant(db, keys, "b0", "B")
    await take(db, keys, 3)  # a0, b0, a1
    assert not await db.exists(keys.tenant_key("running"))  # a take counts nothing...
    ranked = await tenants.ranked(db, keys, limit=10, offset=0)
    assert [(t.name, t.ready, t.running) for t in ranked] == [("A", 2, 2)]  # ...the read does
    assert await admin.recount_tenants(db, keys) == 0  # (nothing to recount: none kept)


async def test_the_first_limit_counts_the_leases_held_and_its_cap_holds(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(5):
        await put_tenant(db, keys, f"a{n}", "A")
    jobs = (await take_jobs(db, keys, 2)).jobs  # leased before any limit
    await tenants.set_limits(db, keys, None, TenantLimits(max_running=3))
    assert await db.hgetall(keys.tenant_key("running")) == {b"A": b"2"}
    assert await taken_ids(db, keys) == [b"a2"]  # one more, to the cap of 3
    first = jobs[0]
    await leasing.ack(
        db, keys, [Settlement(first.id, first.lease, "complete", b"null")], result_ttl_ms=TTL
    )
    assert await taken_ids(db, keys) == [b"a3"]  # an end of a lease lets one more start
    [held] = await tenants.ranked(db, keys, limit=10, offset=0)
    assert (held.name, held.ready, held.running, held.held) == ("A", 1, 3, True)


async def taken_ids(db: Redis, keys: QueueKeys) -> list[bytes]:
    return [job.id for job in (await take_jobs(db, keys, 10)).jobs]


async def test_a_raised_cap_lets_a_held_tenant_start_at_once(db: Redis, keys: QueueKeys) -> None:
    for n in range(4):
        await put_tenant(db, keys, f"a{n}", "A")
    await tenants.set_limits(db, keys, None, TenantLimits(max_running=1))
    assert await taken_ids(db, keys) == [b"a0"]
    assert await taken_ids(db, keys) == []  # held at its cap, a0 still running
    assert await db.hexists(keys.tenant_key("held"), "A")
    notify_before = await db.llen(keys.notify)

    await tenants.set_limits(db, keys, None, TenantLimits(max_running=3))  # no job ended
    assert not await db.hexists(keys.tenant_key("held"), "A")
    assert await db.llen(keys.notify) > notify_before  # the workers are woken for it
    assert await taken_ids(db, keys) == [b"a1", b"a2"]  # up to the new cap


async def test_removing_the_limits_lets_a_held_tenant_start_at_once(
    db: Redis, keys: QueueKeys
) -> None:
    for n in range(3):
        await put_tenant(db, keys, f"a{n}", "A")
    await tenants.set_limits(db, keys, "A", TenantLimits(max_running=1))
    assert await taken_ids(db, keys) == [b"a0"]
    assert await taken_ids(db, keys) == []

    await tenants.set_limits(db, keys, "A", TenantLimits())  # no limit: removed
    assert not await db.exists(keys.tenant_key("limits"), keys.tenant_key("running"))
    assert await taken_ids(db, keys) == [b"a1", b"a2"]
