"""A queue's tenants in Redis: their weights and limits (the hashes take.lua obeys,
``lua/include/fair.lua``), and the tenants with ready jobs, most first."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..core.limits import TenantLimits
from .scripts import admin
from .slots import transaction

if TYPE_CHECKING:
    from collections.abc import Mapping

    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    from ..core.keys import QueueKeys
    from ..core.records import TenantCount

DEFAULT = ""  # the limits hash's field of every tenant without its own (no tenant is "")


async def weights(redis: Redis, keys: QueueKeys) -> dict[str, int]:
    """Each tenant's weight that is not 1 (the default)."""
    raw = cast("dict[bytes, bytes]", await redis.hgetall(keys.tenant_key("weights")))
    return {name.decode("utf-8", "replace"): int(weight) for name, weight in raw.items()}


async def set_weights(redis: Redis, keys: QueueKeys, given: Mapping[str, int]) -> None:
    """Set these tenants' weights (a weight of 1 is the default: its field goes)."""
    key = keys.tenant_key("weights")

    def store(pipe: Pipeline) -> None:
        for tenant, weight in given.items():
            if weight == 1:
                pipe.hdel(key, tenant)
            else:
                pipe.hset(key, tenant, weight)

    await transaction(redis, keys.base, store)


async def limits(redis: Redis, keys: QueueKeys, tenant: str | None) -> TenantLimits:
    """A tenant's own limits (None: the default of every tenant without its own)."""
    raw = await redis.hget(keys.tenant_key("limits"), DEFAULT if tenant is None else tenant)
    return TenantLimits.from_field(cast("bytes | None", raw))


async def all_limits(redis: Redis, keys: QueueKeys) -> dict[str | None, TenantLimits]:
    """Every limit set: each tenant's own, and the default (under None)."""
    raw = cast("dict[bytes, bytes]", await redis.hgetall(keys.tenant_key("limits")))
    return {
        (name.decode("utf-8", "replace") or None): TenantLimits.from_field(value)
        for name, value in raw.items()
    }


async def set_limits(
    redis: Redis, keys: QueueKeys, tenant: str | None, given: TenantLimits
) -> None:
    """Replace a tenant's own limits (None: the default); no limit removes them. A
    tenant's new rate starts afresh (its state goes too). Then the tenants are recounted
    (O(jobs running)): their running jobs are counted only while some limit exists (a
    take pays for none otherwise), so the first limit set counts them from the leases
    held now; and a tenant held back starts again at once if the new limits let it."""
    key, field = keys.tenant_key("limits"), DEFAULT if tenant is None else tenant
    value = given.to_field()

    def store(pipe: Pipeline) -> None:
        if value is None:
            pipe.hdel(key, field)
        else:
            pipe.hset(key, field, value)
        if tenant is not None:
            pipe.delete(keys.tenant_key("rate", tenant))

    await transaction(redis, keys.base, store)
    await admin.recount_tenants(redis, keys)


async def ranked(redis: Redis, keys: QueueKeys, *, limit: int, offset: int) -> list[TenantCount]:
    """The tenants with queued jobs, most first, from the ``offset``-th (one call)."""
    return (await admin.top_tenants(redis, keys, offset + limit))[offset:]


async def fair_order(redis: Redis, keys: QueueKeys, level: int, want: int) -> list[bytes]:
    """The first ``want`` entries of priority ``level``'s lists (the plain ready list and
    the tenants'), in the order take serves them: the ring's members turn by turn, each
    its weight's worth (the head what is left of its turn), the plain list as one more
    member; then the tenants their limits hold, one after another. Entries of cancelled
    jobs included (take skips them). A few round trips; reads at most ``want`` tenants."""
    if want <= 0:
        return []
    members, used, held = await _members(redis, keys, level, want)
    slices = _turns(members, want, used)
    for key, length in held:  # (served once their limits let them: after the others)
        taken = sum(stop - start + 1 for _, start, stop in slices)
        if taken >= want:
            break
        slices.append((key, 0, min(length, want - taken) - 1))
    async with redis.pipeline(transaction=False) as pipe:
        for key, start, stop in slices:
            pipe.lrange(key, start, stop)
        pages = cast("list[list[bytes]]", await pipe.execute())
    return [entry for page in pages for entry in page]


# (list key, entries, jobs per turn)
Member = tuple[bytes, int, int]


async def _members(
    redis: Redis, keys: QueueKeys, level: int, want: int
) -> tuple[list[Member], int, list[tuple[bytes, int]]]:
    """The members of ``level``'s ring in turn order (the plain list one of them if it
    has jobs), how much of its turn the head had, and the held tenants' lists there."""
    ring, plain = keys.tenant_key("ring", level), keys.ready(level).encode()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lrange(ring, 0, want - 1)
        pipe.hmget(keys.tenant_key("turn"), [str(level), f"plain:{level}"])
        pipe.llen(plain)
        pipe.hgetall(keys.tenant_key("held"))
        names, (used, joined), plain_length, held = await pipe.execute()
    if plain_length and not joined:
        names.append(b"")  # (the next take adds it at the back)
    held_names = [name for name, levels in held.items() if str(level).encode() in levels]
    tenant_names = [name for name in (*names, *held_names) if name]
    prefix = keys.tenant_key("jobs", level, "").encode()
    async with redis.pipeline(transaction=False) as pipe:
        for name in tenant_names:
            pipe.llen(prefix + name)
        pipe.hmget(keys.tenant_key("weights"), tenant_names or [b""])
        *lengths, weights = await pipe.execute()
    length = dict(zip(tenant_names, lengths, strict=True))
    weight = dict(zip(tenant_names, weights, strict=False))
    members = [
        (prefix + name, int(length[name]), int(weight[name] or 1)) if name
        else (plain, int(plain_length), 1)
        for name in names
    ]  # fmt: skip
    held_lists = [(prefix + name, int(length[name])) for name in held_names]
    return members, int(used or 0), held_lists


def _turns(members: list[Member], want: int, used: int) -> list[tuple[bytes, int, int]]:
    """The slices (key, start, stop) of the members' lists that ``want`` jobs taken turn
    by turn fill, in order; the head has ``used`` of its first turn already."""
    slices: list[tuple[bytes, int, int]] = []
    read = [0] * len(members)
    total, live, first = 0, list(range(len(members))), True
    while total < want and live:
        for index in live:
            key, length, weight = members[index]
            turn = max(0, weight - used) if first and index == 0 else weight
            count = min(turn, length - read[index], want - total)
            if count > 0:
                slices.append((key, read[index], read[index] + count - 1))
                read[index] += count
                total += count
            if total >= want:
                break
        first = False
        live = [index for index in live if read[index] < members[index][1]]
    return slices
