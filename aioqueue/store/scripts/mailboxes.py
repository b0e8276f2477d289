"""Mailboxes and groups (``client/messaging``): ``channel_post.lua``, ``channel_commit.lua``,
``channel_join.lua``, ``channel_leave.lua``. Ordinary redis-py calls, KEYS and ARGV built
by name from each header (``core/keys.ChannelKeys`` gives the keys)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..loader import Script

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from ...core.keys import ChannelKeys

_CHANNEL_POST = Script("channel_post")
_CHANNEL_COMMIT = Script("channel_commit")
_CHANNEL_JOIN = Script("channel_join")
_CHANNEL_LEAVE = Script("channel_leave")
SCRIPTS = (_CHANNEL_POST, _CHANNEL_COMMIT, _CHANNEL_JOIN, _CHANNEL_LEAVE)


async def channel_post(
    redis: Redis,
    keys: ChannelKeys,
    bodies: Sequence[bytes],
    *,
    sender: str,
    members_only: bool,
    max_messages: int,
) -> int | None:
    """Append messages; the first one's id (the rest follow), or None if ``members_only``
    and the sender is not a reader of the channel (nothing written)."""
    args = _CHANNEL_POST.layout.args(
        sender=sender,
        members=int(members_only),
        max=max_messages,
        posted_channel=keys.posted_channel,
        bodies=list(bodies),
    )
    first = await _CHANNEL_POST(redis, _CHANNEL_POST.layout.keys(keys), args)
    return None if int(first) < 0 else int(first)


async def channel_commit(
    redis: Redis, keys: ChannelKeys, reader: str, upto: int, *, members_only: bool
) -> int | None:
    """Acknowledge up to ``upto``; the reader's cursor after it, or None if not a member."""
    args = _CHANNEL_COMMIT.layout.args(reader=reader, upto=upto, members=int(members_only))
    cursor = await _CHANNEL_COMMIT(redis, _CHANNEL_COMMIT.layout.keys(keys), args)
    return None if int(cursor) < 0 else int(cursor)


async def channel_join(redis: Redis, keys: ChannelKeys, member: str, *, history: bool) -> bool:
    """Join a group; False if a member already."""
    args = _CHANNEL_JOIN.layout.args(member=member, history=int(history))
    return bool(await _CHANNEL_JOIN(redis, _CHANNEL_JOIN.layout.keys(keys), args))


async def channel_leave(redis: Redis, keys: ChannelKeys, member: str) -> bool:
    """Leave a group; False if not a member."""
    args = _CHANNEL_LEAVE.layout.args(member=member)
    return bool(await _CHANNEL_LEAVE(redis, _CHANNEL_LEAVE.layout.keys(keys), args))
