"""Listening on a pub/sub connection that may have died without a word.

A subscribed connection only listens, so a dead one (a half-open cut: a NAT or firewall
forgot it, no FIN or RST ever comes) looks exactly like a quiet one. ``listen`` PINGs
after PING_AFTER seconds of silence and raises ``ChannelSilent`` when not even the PONG
comes back within SILENCE_LIMIT: its caller then subscribes again on a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from redis.asyncio.client import PubSub
from redis.crc import key_slot
from redis.exceptions import RedisError

from .routing import is_cluster, node_pool

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import ConnectionPool, Redis, RedisCluster

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
            raise ChannelSilent(
                f"Redis answered nothing, not even PING, for {now - heard_at:.1f}s (a stalled "
                "server, or a dead connection)"
            )
        elif now - max(heard_at, pinged) >= PING_AFTER:
            await pubsub.ping()
            pinged = now


class ChannelMoved(ConnectionError):
    """A Redis Cluster moved a subscribed channel's slot to another node: subscribe again."""


SHARDED_POLL = 0.1  # seconds: how often a sharded listener looks whether to stop (a wake-up
# reaches it sooner where it has wake channels: see `wake`)


class PubSubConnection:
    """The subscribed connection(s) of one listener, for one round of listening.

    On one Redis server: one connection, SUBSCRIBE. On a Redis Cluster: sharded pub/sub,
    one connection per master that owns a subscribed channel's slot (SSUBSCRIBE there),
    because the scripts SPUBLISH each message on the shard of its queue. Messages reach
    ``heard`` as on one server (types ``message`` and ``subscribe``); a slot that moves
    ends the round (``ChannelMoved``), as a dead connection does, and the listener
    subscribes again from the new slot map (``again``: a round after one that failed reads
    the slot map first; a first round goes by the client's, read when it connected)."""

    def __init__(self, redis: Redis, *, again: bool = True) -> None:
        self._redis = redis
        self._again = again
        self.sharded = is_cluster(redis)
        self._pubsubs: dict[str, PubSub] = {}  # node name ("" on one server) -> its pubsub
        self._pools: dict[str, ConnectionPool] = {}  # cluster: node name -> a pool of its own
        self._listening = False
        # Held while subscribing, closing, and deciding what to listen on: a connection
        # being made is never listened on (or closed) before it is ready.
        self._lock = asyncio.Lock()

    async def subscribe(self, channels: Sequence[bytes]) -> bool:
        """Subscribe to ``channels``; False when one needs a node this round has no
        connection to (while listening: end the round and start another)."""
        async with self._lock:
            return await self._subscribe(channels)

    async def _subscribe(self, channels: Sequence[bytes]) -> bool:
        if not self.sharded:
            pubsub = self._pubsubs.get("") or self._pubsubs.setdefault("", self._redis.pubsub())
            await pubsub.subscribe(*channels)
            return True
        cluster = cast("RedisCluster", self._redis)
        if not self._pubsubs and self._again:  # the slot map again (a slot may have moved)
            await cluster.nodes_manager.initialize()
        by_slot: dict[tuple[str, int], list[bytes]] = {}  # one SSUBSCRIBE per slot
        for channel in channels:
            node = cluster.get_node_from_key(channel.decode())  # (names are text)
            if node is None:
                raise ChannelMoved(f"no master serves the slot of {channel!r}")
            by_slot.setdefault((node.name, key_slot(channel)), []).append(channel)
            if node.name not in self._pubsubs:
                if self._listening:
                    return False
                pool = self._pools[node.name] = node_pool(node)  # (its own: closed after)
                self._pubsubs[node.name] = PubSub(pool, encoder=cluster.encoder)
        for (name, _), grouped in by_slot.items():
            await self._pubsubs[name].ssubscribe(*grouped)
        return True

    async def listen(
        self,
        heard: Callable[[dict[str, Any]], None],
        stopping: Callable[[], bool],
        *,
        poll: float = PING_AFTER,
    ) -> None:
        """``listen`` on every connection of this round until ``stopping()`` holds or one
        of them fails (then the others stop too and the failure is raised)."""
        async with self._lock:
            self._listening = True
            pubsubs = list(self._pubsubs.values())
        if self.sharded:
            poll = min(poll, SHARDED_POLL)
        failed: list[BaseException] = []

        def stop() -> bool:
            return bool(failed) or stopping()

        async def one(pubsub: PubSub) -> None:
            try:
                await listen(pubsub, partial(_as_unsharded, heard), stop, poll=poll)
            except Exception as exc:
                failed.append(exc)

        await asyncio.gather(*(one(pubsub) for pubsub in pubsubs))
        if failed:
            raise failed[0]

    async def aclose(self) -> None:
        async with self._lock:
            pubsubs, self._pubsubs = list(self._pubsubs.values()), {}
            pools, self._pools = list(self._pools.values()), {}
        for pubsub in pubsubs:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
        for pool in pools:
            with contextlib.suppress(RedisError, OSError):
                await pool.disconnect()


async def wake(redis: Redis, channels: Sequence[str], token: bytes = b"stop") -> None:
    """Publish ``token`` to wake a listener subscribed to ``channels``: on one server on
    the first (its one connection hears them all); on a Redis Cluster, on one channel of
    each node serving some (each node's connection hears only its own shard's)."""
    if not is_cluster(redis):
        await redis.publish(channels[0], token)
        return
    cluster = cast("RedisCluster", redis)
    by_node: dict[str, str] = {}
    for channel in channels:
        if (node := cluster.get_node_from_key(channel)) is not None:
            by_node.setdefault(node.name, channel)
    await asyncio.gather(*(cluster.spublish(channel, token) for channel in by_node.values()))


_UNSHARDED = {"smessage": "message", "ssubscribe": "subscribe"}


def _as_unsharded(heard: Callable[[dict[str, Any]], None], message: dict[str, Any]) -> None:
    kind = message.get("type")
    if kind == "sunsubscribe":  # unasked: the slot moved (or its node left)
        raise ChannelMoved(f"{message.get('channel')!r} moved to another node")
    if kind in _UNSHARDED:
        message = {**message, "type": _UNSHARDED[kind]}
    heard(message)
