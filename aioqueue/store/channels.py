"""Listening on a pub/sub connection that may have died without a word.

A subscribed connection only listens, so a dead one (a half-open cut: a NAT or firewall
forgot it, no FIN or RST ever comes) looks exactly like a quiet one. ``listen`` PINGs
after PING_AFTER seconds of silence and raises ``ChannelSilent`` when not even the PONG
comes back within SILENCE_LIMIT: its caller then subscribes again on a new connection.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio.client import PubSub

PING_AFTER = 1.0  # seconds of silence before the listener PINGs its connection
SILENCE_LIMIT = 3.0  # seconds of silence (no message, no pong) before it reconnects


class ChannelSilent(ConnectionError):
    """The subscribed connection answers nothing, not even PING: reconnect."""


async def listen(
    pubsub: PubSub,
    heard: Callable[[dict[str, Any]], None],
    stopping: Callable[[], bool],
    *,
    poll: float = PING_AFTER,
) -> None:
    """Hand each message of ``pubsub`` (PONGs included) to ``heard`` until ``stopping()``
    holds, which is checked at least every ``poll`` seconds."""
    loop = asyncio.get_running_loop()
    heard_at = pinged = loop.time()
    while not stopping():
        message = await pubsub.get_message(timeout=min(poll, PING_AFTER))
        now = loop.time()
        if message is not None:
            heard_at = now
            heard(message)
        elif now - heard_at > SILENCE_LIMIT:
            raise ChannelSilent(f"no reply to PING for {now - heard_at:.1f}s")
        elif now - max(heard_at, pinged) >= PING_AFTER:
            await pubsub.ping()
            pinged = now
