"""Outcomes of workflow children for parents on other queues: read from a queue's handoff
ZSET, delivered with ``scripts/links.deliver``, then removed (``lua/include/links.lua``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.lifecycle import HandedOff

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys

logger = logging.getLogger(__name__)


async def pending(redis: Redis, keys: QueueKeys, limit: int) -> list[HandedOff]:
    """The oldest ``limit`` outcomes waiting in ``keys``' handoff ZSET. A malformed entry
    (written by hand) is logged and removed: it can never be delivered."""
    entries: list[bytes] = await redis.zrange(keys.handoff, 0, limit - 1)  # type: ignore[assignment]
    found, malformed = [], []
    for entry in entries:
        parsed = HandedOff.parse(entry)
        if parsed is None:
            malformed.append(entry)
        else:
            found.append(parsed)
    if malformed:
        logger.error("queue %s: dropping %d malformed hand-off entries", keys.name, len(malformed))
        await redis.zrem(keys.handoff, *malformed)
    return found


async def count(redis: Redis, keys: QueueKeys) -> int:
    """How many outcomes wait in ``keys``' handoff ZSET."""
    return int(await redis.zcard(keys.handoff))


async def remove(redis: Redis, keys: QueueKeys, delivered: Sequence[HandedOff]) -> None:
    """Remove delivered outcomes (only these: later ones stay, whoever reads them)."""
    if delivered:
        await redis.zrem(keys.handoff, *(outcome.entry for outcome in delivered))
