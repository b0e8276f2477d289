"""Topics: durable fan-out. Every subscriber group sees every message; the workers of one
group share its messages, each handled under the rules of a task (lease, retry, timeout,
dead letter).

A topic is a Redis stream (one Cluster slot: ``{topic:<name>}``); each subscriber group
is a consumer group on it, created by the first worker that serves it (or by
``topic.add_group``) at the start of what the log keeps, so a group that comes late still
gets what was published before it. A message delivered to a worker is in the group's
pending list under that worker's name: its lease, renewed while it runs. A worker that
dies leaves it there; once the lease has run out, another worker claims it
(``XAUTOCLAIM``), so nothing is lost (at-least-once). Settling is one fenced script per
batch (``topic_ack.lua``): acknowledged, dead-lettered, or parked in the pending list
until its retry is due.

What every group has processed is trimmed from the log; a bound (``max_messages``,
default 100,000) keeps a group that stopped reading from pinning memory: past it the
oldest messages go even if a group had not processed them (counted in
``info().dropped``; that group skips them).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import ResponseError

from ..core.errors import ConfigError
from ..core.keys import TopicKeys, validate_name
from ..core.records import ErrorInfo
from ..core.settings import DEFAULT_MAX_MESSAGES
from ..store import reads
from ..store.posting import PostBatcher
from ..store.scripts import topics
from ..store.streams import create_group
from .messaging import encode_bodies

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from redis.asyncio import Redis

    from .messaging import MessagingHost

PUBLISH_CHUNK = 1000  # messages per publish call: bounds one script's run time in Redis


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One subscriber group of a topic: messages delivered and not yet settled
    (``pending``: running, or waiting for a retry), and messages not yet delivered
    (``lag``; None when Redis cannot tell after a trim)."""

    name: str
    consumers: int
    pending: int
    lag: int | None
    last_delivered: str


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's figures: messages kept, the last id given, its subscriber groups,
    messages trimmed by the length bound before every group had processed them, and
    dead letters kept."""

    size: int
    last_id: str
    groups: dict[str, GroupInfo]
    dropped: int
    dead: int


@dataclass(frozen=True, slots=True)
class DeadMessage:
    """A message a subscriber group gave up on: its id, the group, the attempts made,
    why (``error``), and its body (None, with ``raw``, when it is not JSON)."""

    id: str
    group: str
    attempts: int
    error: ErrorInfo | None
    body: Any
    raw: bytes


class Topic:
    """A topic: ``app.topic("logs")``. Publish to it; subscriber groups
    (``@app.subscriber``) each process every message."""

    def __init__(
        self, host: MessagingHost, name: str, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> None:
        if max_messages < 0:
            raise ConfigError("max_messages must be >= 0 (0: no bound)")
        self._host = host
        self.name = name
        self.keys = TopicKeys.of(host.settings.prefix, name)
        self.max_messages = max_messages
        self._posts = PostBatcher(self._publish)  # concurrent publishes share a call

    def __repr__(self) -> str:
        return f"Topic({self.name!r})"

    async def publish(self, body: Any) -> str:
        """Append a message (any JSON value); its id. Concurrent publishes share one
        round trip (``store/posting``)."""
        encoded = encode_bodies([body], self._host.settings.max_payload_bytes)
        ids, offset = await self._posts.post("", encoded)
        return ids[offset]

    async def _publish(self, _sender: str, encoded: list[bytes]) -> list[str]:
        redis = await self._host.client()
        return await topics.topic_publish(redis, self.keys, encoded, max_messages=self.max_messages)

    async def publish_many(self, bodies: Iterable[Any]) -> list[str]:
        """Append messages in order (one round trip per 1,000); their ids. Every body is
        checked first: one that JSON cannot hold, or too large, raises with nothing
        written."""
        encoded = encode_bodies(bodies, self._host.settings.max_payload_bytes)
        ids: list[str] = []
        for start in range(0, len(encoded), PUBLISH_CHUNK):
            ids += await self._publish("", encoded[start : start + PUBLISH_CHUNK])
        return ids

    async def add_group(self, group: str) -> bool:
        """Create subscriber group ``group`` now, at the start of what the log keeps (a
        worker serving it does this too): messages published from now on wait for it
        even before its first worker starts. False if it existed."""
        return await create_group(await self._host.client(), self.keys, group)

    async def wait_processed(
        self, timeout: float | None = None, *, groups: Sequence[str] | None = None
    ) -> None:
        """Wait until every subscriber group (or each of ``groups``, which must exist
        or come to) has processed, dead-lettered or dropped every message published
        before this call. Woken by the acks' announcements, not by polling (a missed
        one is caught by a look every second). TimeoutError after ``timeout`` seconds."""
        for group in groups or ():
            validate_name("subscriber group", group)
        redis = await self._host.client()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        channel = self.keys.processed_channel
        async with self._host.settled_listener().waiting(channel, "*") as processed:
            last = await _last_id(redis, self.keys)
            while True:
                processed.clear()
                behind = await self._behind(redis, last, groups)
                if not behind:
                    return
                left = 1.0 if deadline is None else min(1.0, deadline - loop.time())
                if left <= 0:
                    raise TimeoutError(
                        f"topic {self.name!r}: not processed within {timeout}s by "
                        + ", ".join(sorted(behind))
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(processed.wait(), left)

    async def _behind(
        self, redis: Redis, last: str | None, groups: Sequence[str] | None
    ) -> list[str]:
        """The groups that have not yet processed everything up to ``last``."""
        infos = await _groups(redis, self.keys)
        names = list(infos) if groups is None else list(groups)
        if last is None:
            return [name for name in names if name not in infos]
        behind = []
        for name in names:
            info = infos.get(name)
            if info is None or _id_less(info.last_delivered, last):
                behind.append(name)
            elif info.pending:
                oldest = await redis.xpending_range(self.keys.log, name, "-", last, 1)
                if oldest:
                    behind.append(name)
        return behind

    async def info(self) -> TopicInfo:
        """Messages kept, the last id, each subscriber group's figures, messages dropped
        by the length bound, dead letters kept."""
        redis = await self._host.client()
        async with redis.pipeline(transaction=False) as pipe:
            pipe.xlen(self.keys.log)
            pipe.get(self.keys.dropped)
            pipe.xlen(self.keys.dead)
            size, dropped, dead = await pipe.execute()
        return TopicInfo(
            int(size),
            await _last_id(redis, self.keys) or "0-0",
            await _groups(redis, self.keys),
            int(dropped or 0),
            int(dead),
        )

    async def dead_letters(self, limit: int = 100) -> list[DeadMessage]:
        """The newest ``limit`` dead letters, oldest first."""
        redis = await self._host.client()
        entries = await reads.topic_dead_entries(redis, self.keys, limit)
        return [_dead_message(fields) for _, fields in entries]


async def topic_names(host: MessagingHost, known: Iterable[str] = ()) -> list[str]:
    """Every topic with a subscriber group under the host's prefix, and ``known``, sorted."""
    redis = await host.client()
    listed = await reads.channel_names(redis, host.settings.prefix)
    return sorted(
        {raw.partition(":")[2] for raw in listed if raw.startswith("topic:")} | set(known)
    )


async def _last_id(redis: Redis, keys: TopicKeys) -> str | None:
    try:
        info = await redis.xinfo_stream(keys.log)
    except ResponseError:  # no such key: nothing was ever published
        return None
    last = _text(info["last-generated-id"])
    return None if last == "0-0" else last


async def _groups(redis: Redis, keys: TopicKeys) -> dict[str, GroupInfo]:
    try:
        groups = await redis.xinfo_groups(keys.log)
    except ResponseError:
        return {}
    found = {}
    for group in groups:
        name = _text(group["name"])
        lag = group.get("lag")
        found[name] = GroupInfo(
            name,
            int(group["consumers"]),
            int(group["pending"]),
            None if lag is None else int(lag),
            _text(group["last-delivered-id"]),
        )
    return dict(sorted(found.items()))


def _dead_message(fields: dict[bytes, bytes]) -> DeadMessage:
    raw = fields.get(b"b", b"")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    error = fields.get(b"e")
    return DeadMessage(
        _text(fields.get(b"m", b"")),
        _text(fields.get(b"g", b"")),
        int(fields.get(b"n", b"0")),
        ErrorInfo.decode(error) if error else None,
        body,
        raw,
    )


def _id_less(a: str, b: str) -> bool:
    a_ms, _, a_seq = a.partition("-")
    b_ms, _, b_seq = b.partition("-")
    return (int(a_ms), int(a_seq or 0)) < (int(b_ms), int(b_seq or 0))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
