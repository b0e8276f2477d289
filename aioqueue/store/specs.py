"""Periodic specs, stored per queue (``periodic`` HASH: spec name -> JSON), so that specs
added or removed at run time reach every worker serving the queue."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from ..core.errors import describe
from ..core.periodic import Periodic
from .slots import transaction

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    from ..core.keys import QueueKeys

logger = logging.getLogger(__name__)


async def load(redis: Redis, keys: QueueKeys) -> list[Periodic]:
    """The queue's periodic specs; unusable ones are logged and skipped."""
    raw = cast("dict[bytes, bytes]", await redis.hgetall(keys.periodic))
    specs = []
    for name, body in raw.items():
        try:
            specs.append(Periodic.decode(body))
        except (ValueError, TypeError) as exc:
            logger.error("periodic spec %s of %s is unusable: %s", name, keys.name, describe(exc))
    return specs


async def add(redis: Redis, keys: QueueKeys, spec: Periodic) -> None:
    """Store a spec, and leave a token on the schedule-wake list: every promoter waiting
    on it wakes its periodic scheduler, which re-reads the specs at once."""

    def store(pipe: Pipeline) -> None:
        pipe.hset(keys.periodic, spec.name, spec.encode())
        pipe.rpush(keys.schedule_wake, 0)
        pipe.ltrim(keys.schedule_wake, -1, -1)

    await transaction(redis, keys.base, store)


async def remove(redis: Redis, keys: QueueKeys, name: str) -> bool:
    """Remove a spec; True if there was one."""
    return int(await redis.hdel(keys.periodic, name)) > 0


async def sync_declared(redis: Redis, keys: QueueKeys, declared: Sequence[Periodic]) -> None:
    """Store the specs declared in code; drop declared ones the code no longer has.
    Specs added at run time are left alone."""
    names = {spec.name for spec in declared}
    stale = [spec.name for spec in await load(redis, keys)
             if spec.declared and spec.name not in names]  # fmt: skip

    def store(pipe: Pipeline) -> None:
        for spec in declared:
            pipe.hset(keys.periodic, spec.name, spec.encode())
        if stale:
            pipe.hdel(keys.periodic, *stale)

    await transaction(redis, keys.base, store)
