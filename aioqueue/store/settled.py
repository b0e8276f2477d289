"""Hearing that jobs finished, so ``Job.result()`` returns at once without polling.

The scripts that finish jobs (ack, reclaim, cancel) announce their ids on the queue's
settled channel, one message per call (``lua/include/settled.lua``). One listener per App
holds one subscribed connection, subscribes to a queue's channel when someone first waits
on one of its jobs, and wakes the waiters of each id it hears. A waiter then reads the
record itself: a message only says "look now".

Pub/sub delivers at most once: a message sent while the connection is down is lost. So
after a reconnect the listener wakes every waiter (each reads its job's status again), and
waiters look again every few seconds in any case (``Job.result``'s ``poll_interval``): a
missed message delays a result; it never loses one. A silent connection (half-open) is
found by PING after a second of quiet, as the abort listener does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisClusterException, RedisError

from ..core.errors import AioqueueError, describe
from . import deadline
from .pubsub import PING_AFTER, PubSubConnection
from .routing import is_cluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

RETRY_PAUSE = 0.5  # after a failed connection, before the next try
CONFIRM_WITHIN = 2.0  # how long a waiter waits for its subscription to be confirmed
CLOSE_WAIT = PING_AFTER * 2  # seconds a close waits for the reader (it looks every PING_AFTER)
_LOST = (RedisError, RedisClusterException, OSError)  # the connection (or slot map) failed


def parse_ids(message: bytes) -> list[bytes]:
    """The ids in a settled message: netstrings ``<length>:<id>``, back to back."""
    ids, at = [], 0
    while at < len(message):
        colon = message.index(b":", at)
        length = int(message[at:colon])
        ids.append(message[colon + 1 : colon + 1 + length])
        at = colon + 1 + length
    return ids


class SettledListener:
    """One subscribed connection per App, shared by every waiting ``Job.result()``."""

    def __init__(self, client: Callable[[], Awaitable[Redis]], wake_channel: str) -> None:
        self._client = client
        self._waiters: dict[tuple[bytes, bytes], set[asyncio.Event]] = {}
        self._channels: dict[bytes, asyncio.Event] = {}  # channel -> its SUBSCRIBE confirmed
        self._wake_channel = (
            wake_channel.encode()
        )  # this listener's own (keys.listener_wake_channel)
        self._subscriber: PubSubConnection | None = None
        self._restart = False  # end this round of listening and start another
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._connected = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    @contextlib.asynccontextmanager
    async def waiting(self, channel: str, job_id: str) -> AsyncIterator[asyncio.Event]:
        """Within the block, the event is set whenever ``job_id`` may have finished (its
        id was announced on ``channel``, or announcements may have been missed). The
        subscription is confirmed before the block starts (or CONFIRM_WITHIN has passed:
        Redis is away, and the caller's periodic look is all there is), so an
        announcement made after the caller first reads the job's status is not missed."""
        key = (channel.encode(), job_id.encode())
        event = asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._subscribe(key[0]), CONFIRM_WITHIN)
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    async def _subscribe(self, channel: bytes) -> None:
        confirmed = self._channels.get(channel)
        if confirmed is None:
            confirmed = self._channels[channel] = asyncio.Event()
            if self._reader is None:
                self._reader = asyncio.get_running_loop().create_task(self._run())
            elif self._subscriber is not None and self._connected.is_set():
                await self._send_subscribe(self._subscriber, [channel])
        await confirmed.wait()

    async def _send_subscribe(self, subscriber: PubSubConnection, channels: list[bytes]) -> None:
        try:
            if not await subscriber.subscribe(channels):
                self._restart = True  # a cluster node this round has no connection to
        except _LOST as exc:  # the reader finds the broken connection and starts over
            logger.debug("subscribing to %s failed: %s", channels, describe(exc))

    async def close(self) -> None:
        """Stop listening (without cancelling a redis-py call: a message on the
        listener's own wake channel ends its wait, or it ends by itself within PING_AFTER).
        Bounded when Redis does not answer: the wake-up is not waited for, and a reader
        still in a call after CLOSE_WAIT is left to end at its own timeout."""
        self._closing = True
        reader, self._reader = self._reader, None
        if reader is None:
            return
        until = self.loop.time() + CLOSE_WAIT
        wake = deadline.detach(self._wake_reader(), CLOSE_WAIT)
        await asyncio.wait({reader}, timeout=CLOSE_WAIT)
        await asyncio.wait({wake}, timeout=max(0.0, until - self.loop.time()))  # (its reply)
        self._wake_all()

    async def _wake_reader(self) -> None:
        with contextlib.suppress(*_LOST):
            client = await self._client()
            if not is_cluster(client):  # (sharded listening checks _closing often)
                await client.publish(self._wake_channel, b"stop")

    async def _run(self) -> None:
        while not self._closing:
            failed = True
            try:
                await self._listen()
                failed = False  # (a new round was asked for)
            except (*_LOST, AioqueueError) as exc:
                logger.debug("settled channel lost: %s; subscribing again", describe(exc))
            except Exception:  # a bug: waiters fall back to looking now and then
                logger.exception("the settled listener failed; subscribing again")
            finally:
                self._connected.clear()
                for confirmed in self._channels.values():
                    confirmed.clear()
            self._wake_all()  # announcements may have been missed meanwhile
            if failed and not self._closing:
                await asyncio.sleep(RETRY_PAUSE)

    async def _listen(self) -> None:
        subscriber = self._subscriber = PubSubConnection(await self._client())
        self._restart = False
        try:
            sent = list(self._channels)
            wake = [] if subscriber.sharded else [self._wake_channel]
            await subscriber.subscribe([*wake, *sent])
            self._connected.set()
            if added := [channel for channel in self._channels if channel not in sent]:
                # asked for while the first was under way
                await self._send_subscribe(subscriber, added)
            await subscriber.listen(self._heard, lambda: self._closing or self._restart)
        finally:
            self._subscriber = None
            await subscriber.aclose()

    def _heard(self, message: dict[str, Any]) -> None:
        if message.get("channel") is None:  # a PONG
            return
        channel = bytes(message["channel"])
        if message["type"] == "subscribe":
            confirmed = self._channels.get(channel)
            if confirmed is not None:
                confirmed.set()
            return
        if message["type"] != "message" or channel == self._wake_channel:
            return
        try:
            ids = parse_ids(bytes(message["data"]))
        except ValueError:
            logger.warning("unreadable message on %s: %r", channel, message["data"][:100])
            return
        for job_id in ids:
            for event in self._waiters.get((channel, job_id), ()):
                event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
