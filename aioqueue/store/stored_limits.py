"""A queue's limits in Redis: the hash take.lua obeys (``core/limits.QueueLimits``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.limits import QueueLimits
from .slots import transaction

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    from ..core.keys import QueueKeys


async def read(redis: Redis, keys: QueueKeys) -> QueueLimits:
    """The queue's limits; fields are None where there is none."""
    return QueueLimits.from_fields(await redis.hgetall(keys.limits))


async def write(redis: Redis, keys: QueueKeys, limits: QueueLimits) -> None:
    """Replace the queue's limits (a new rate starts afresh: its state goes too)."""
    fields = limits.to_fields()

    def replace(pipe: Pipeline) -> None:
        pipe.delete(keys.limits, keys.rate)
        if fields:
            pipe.hset(keys.limits, mapping=fields)  # type: ignore[arg-type]

    await transaction(redis, keys.base, replace)
