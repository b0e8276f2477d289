"""A topic's plain stream commands (its scripts are in ``scripts/topics``): creating a
subscriber group, which is a consumer group on the topic's log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from ..core.keys import validate_name

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ..core.keys import TopicKeys

DEAD_MAX = 10_000  # dead letters kept per topic (approximately)


async def create_group(redis: Redis, keys: TopicKeys, group: str) -> bool:
    """Create a subscriber group at the start of the log (and the log if need be), so it
    gets every message the log still keeps, and list the topic in the prefix's registry
    (another slot: its own call); False if the group existed."""
    validate_name("subscriber group", group)
    created = True
    try:
        await redis.xgroup_create(keys.log, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
        created = False
    await redis.sadd(keys.registry, f"topic:{keys.name}")
    return created
