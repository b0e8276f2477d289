"""Pull messaging: mailboxes (one reader) and groups (many members, each with a cursor).

A mailbox or a group is a log of messages with dense ids (1, 2, 3, ...) and a cursor per
reader: the last id it acknowledged. Reading changes nothing; ``ack(upto)`` moves the
reader's cursor, and the messages that every reader has acknowledged are deleted. So a
reader that crashes between reading and acknowledging reads the same messages again
(at-least-once); one that acknowledges before handling gets at-most-once.

Each mailbox and each group lives in one Redis Cluster slot, and every change is one Lua
script (``store/lua/channel_*.lua``); a read is a plain ZSCORE and XRANGE. A fetch that
waits for messages is woken by the post's announcement (published on the pub/sub
channel ``keys.posted_channel``, heard by the App's one subscription, the one
``Job.result()`` uses: ``store/settled.py``), so every waiting member wakes.
A member's list of groups lives in the member's own slot: ``app.unread(member)`` reads it,
then every group's count at once (two round trips). Joining writes it after the group
(another slot, so another call): if that second write fails, the member is in the group
but ``unread`` does not list it until the member joins again (which keeps its cursor and
repairs the list).

Memory is bounded: each log keeps at most ``max_messages`` (default 100,000); beyond that
the oldest are trimmed, even if a reader had not read them yet (a laggard then skips
them), and counted in ``info().dropped``.

"Channel", here and in ``app.channels()`` and ``ChannelInfo``, means a mailbox or a group
(``core.keys.ChannelKeys``); Redis pub/sub is ``store/pubsub.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson

from ..core.errors import ConfigError, NotAMember, PayloadTooLarge
from ..core.keys import ChannelKeys, channels_registry, member_groups, validate_name
from ..core.payload import encode_json
from ..core.settings import DEFAULT_MAX_MESSAGES
from ..store import reads
from ..store.posting import PostBatcher
from ..store.scripts import mailboxes

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from redis.asyncio import Redis

    from ..core.settings import AppSettings
    from ..store.settled import SettledListener

MAILBOX_READER = ""  # a mailbox's one reader, in its cursors ZSET


class MessagingHost(Protocol):
    """What mailboxes and groups need from their App."""

    @property
    def settings(self) -> AppSettings: ...

    async def client(self) -> Redis: ...

    def settled_listener(self) -> SettledListener: ...


class Message(NamedTuple):
    """One message as a reader gets it. ``body`` is the sent JSON value. An entry that is
    not an aioqueue message (written by something else) comes back with ``body`` None,
    its bytes in ``raw`` (its fields, for an entry without a body) and the reason in
    ``error``, so that a reader can skip it.
    (A tuple, and the send time kept in ms: a fetch builds thousands of these.)"""

    id: int
    body: Any
    sent_ms: int | None  # when it was sent, epoch ms on the Redis clock
    sender: str | None
    raw: bytes | None = None
    error: str | None = None

    @property
    def sent_at(self) -> datetime | None:
        """When it was sent (UTC), by the Redis clock."""
        return None if self.sent_ms is None else datetime.fromtimestamp(self.sent_ms / 1000, UTC)


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """A mailbox's or group's figures: messages kept, the last id given, each reader's
    cursor and lag (a mailbox's one reader is ``""``), and messages trimmed unread."""

    size: int
    last_id: int
    cursors: dict[str, int]
    dropped: int

    def lag(self, reader: str) -> int:
        """How many messages ``reader`` has not acknowledged yet."""
        return self.last_id - self.cursors.get(reader, 0)


def parse_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> Message:
    """A log entry: stream id ``<id>-0``, fields s (sender), t (sent ms), b (JSON body)."""
    message_id = int(entry_id.partition(b"-")[0])
    body, sent_ms = fields.get(b"b"), fields.get(b"t", b"")
    if body is None or not sent_ms.isdigit():
        raw = b" ".join(field + b"=" + value for field, value in fields.items())
        return Message(message_id, None, None, None, raw, "not an aioqueue message")
    sent = int(sent_ms)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return Message(message_id, None, sent, None, body, f"body is not JSON: {exc}")
    sender = fields.get(b"s", b"").decode("utf-8", "replace") or None
    return Message(message_id, value, sent, sender)


def encode_bodies(bodies: Iterable[Any], max_bytes: int) -> list[bytes]:
    """Every body as JSON, checked before anything is sent (an error writes nothing)."""
    encoded = []
    for body in bodies:
        raw = encode_json(body, "message body")
        if len(raw) > max_bytes:
            raise PayloadTooLarge(len(raw), max_bytes, "message")
        encoded.append(raw)
    return encoded


def _check_limit(limit: int) -> int:
    if limit < 1:
        raise ConfigError(f"limit must be at least 1, not {limit}")
    return limit


def _check_timeout(timeout: float) -> None:
    """A fetch waits 0 seconds (not at all) or more (``math.inf``: until a message comes)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigError(
            f"timeout must be 0 (do not wait) or a positive number of seconds, not {timeout!r}"
        )


def _upto(upto: int | Message | Sequence[Message]) -> int:
    """The id to acknowledge up to: an id, a message, or the last of a batch."""
    if isinstance(upto, Message):
        return upto.id
    if isinstance(upto, int):
        return upto
    return max((message.id for message in upto), default=0)


class _Channel:
    """What mailboxes and groups share: a log, cursors, and waiting for new messages."""

    _members_only = False  # only readers send (groups)

    def __init__(self, host: MessagingHost, kind: str, name: str, max_messages: int) -> None:
        if max_messages < 0:
            raise ConfigError("max_messages must be >= 0 (0: no bound)")
        self._host = host
        self.name = name
        self.keys = ChannelKeys.of(host.settings.prefix, kind, name)
        self.max_messages = max_messages
        self._posts = PostBatcher(self._send)  # concurrent single sends share a call

    async def _post(self, bodies: Iterable[Any], sender: str) -> list[int]:
        encoded = encode_bodies(bodies, self._host.settings.max_payload_bytes)
        if not encoded:
            return []
        if len(encoded) == 1:
            first, offset = await self._posts.post(sender, encoded)
        else:
            first, offset = await self._send(sender, encoded), 0
        if first is None:
            raise NotAMember(self.name, sender)
        first += offset
        if first == 1:  # the channel's first message: list it (groups: at the first join)
            await self._register()
        return list(range(first, first + len(encoded)))

    async def _send(self, sender: str, encoded: list[bytes]) -> int | None:
        """One post call: the first message's id, or None if the sender may not post."""
        return await mailboxes.channel_post(
            await self._host.client(), self.keys, encoded,
            sender=sender, members_only=self._members_only, max_messages=self.max_messages,
        )  # fmt: skip

    async def _register(self) -> None:
        """Add this mailbox or group to the prefix's list (another slot: its own call)."""
        redis = await self._host.client()
        await redis.sadd(channels_registry(self._host.settings.prefix), self.registry_name)

    @property
    def registry_name(self) -> str:
        return f"{self.keys.kind}:{self.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    async def _fetch(
        self, reader: str, limit: int, timeout: float, members_only: bool
    ) -> list[Message]:
        _check_limit(limit)
        _check_timeout(timeout)
        if timeout == 0:
            return await self._read(reader, limit, members_only)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Subscribed before the first read: a post after any read sets the event.
        async with self._host.settled_listener().waiting(self.keys.posted_channel, "*") as posted:
            while True:
                posted.clear()
                messages = await self._read(reader, limit, members_only)
                left = deadline - loop.time()
                if messages or left <= 0:
                    return messages
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(posted.wait(), left)

    async def _read(self, reader: str, limit: int, members_only: bool) -> list[Message]:
        entries = await reads.channel_entries(
            await self._host.client(), self.keys, reader, limit=limit, members_only=members_only
        )
        if entries is None:
            raise NotAMember(self.name, reader)
        return [parse_entry(entry_id, fields) for entry_id, fields in entries]

    async def _commit(self, reader: str, upto: int, members_only: bool) -> int:
        cursor = await mailboxes.channel_commit(
            await self._host.client(), self.keys, reader, upto, members_only=members_only
        )
        if cursor is None:
            raise NotAMember(self.name, reader)
        return cursor

    async def info(self) -> ChannelInfo:
        """Messages kept, the last id, each reader's cursor, messages trimmed unread (one
        round trip)."""
        redis = await self._host.client()
        async with redis.pipeline(transaction=False) as pipe:
            pipe.xlen(self.keys.log)
            pipe.get(self.keys.seq)
            pipe.zrange(self.keys.cursors, 0, -1, withscores=True)
            pipe.get(self.keys.dropped)
            size, last, cursors, dropped = await pipe.execute()
        return ChannelInfo(
            int(size),
            int(last or 0),
            {_text(member): int(score) for member, score in cursors},
            int(dropped or 0),
        )


class Mailbox(_Channel):
    """One recipient's mailbox: anyone sends, its one reader fetches and acknowledges.

    ``app.mailbox("user-42")``; several processes reading one mailbox see the same
    messages (it has one cursor): give each reader its own mailbox, or use a group."""

    def __init__(
        self, host: MessagingHost, name: str, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> None:
        super().__init__(host, "mailbox", name, max_messages)

    async def send(self, body: Any, *, sender: str | None = None) -> int:
        """Append a message (any JSON value); its id."""
        return (await self.send_many([body], sender=sender))[0]

    async def send_many(self, bodies: Iterable[Any], *, sender: str | None = None) -> list[int]:
        """Append messages in order, in one round trip; their ids."""
        return await self._post(bodies, _sender(sender))

    async def fetch(self, limit: int = 100, timeout: float = 0) -> list[Message]:
        """The oldest ``limit`` messages not acknowledged yet, waiting up to ``timeout``
        seconds for the first one. Fetching again before ``ack`` returns them again."""
        return await self._fetch(MAILBOX_READER, limit, timeout, members_only=False)

    async def ack(self, upto: int | Message | Sequence[Message]) -> int:
        """Acknowledge every message up to this id (or message, or batch); they are
        deleted. Returns the cursor (the last id acknowledged)."""
        return await self._commit(MAILBOX_READER, _upto(upto), members_only=False)

    async def unread(self) -> int:
        """How many messages the reader has not acknowledged (one round trip)."""
        return (await self.info()).lag(MAILBOX_READER)


class Group(_Channel):
    """A group of members who each read every message: ``app.group("room-7")``.

    Only members send. Each member reads after its own cursor and acknowledges what it
    read; a message every member has acknowledged is deleted. A member that never
    reads holds messages only up to ``max_messages``."""

    _members_only = True

    def __init__(
        self, host: MessagingHost, name: str, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> None:
        super().__init__(host, "group", name, max_messages)

    async def join(self, member: str, *, history: bool = True) -> bool:
        """Add ``member`` (False if it was one already: its cursor is kept). With
        ``history`` (the default) it reads what the group still keeps; without, only
        messages sent from now on."""
        validate_name("member", member)
        redis = await self._host.client()
        joined = await mailboxes.channel_join(redis, self.keys, member, history=history)
        await redis.sadd(member_groups(self._host.settings.prefix, member), self.name)
        await self._register()
        return joined

    async def leave(self, member: str) -> None:
        """Remove ``member``; what only it had left to read is deleted. NotAMember if
        it was not one."""
        validate_name("member", member)
        redis = await self._host.client()
        left = await mailboxes.channel_leave(redis, self.keys, member)
        await redis.srem(member_groups(self._host.settings.prefix, member), self.name)
        if not left:
            raise NotAMember(self.name, member)

    async def send(self, sender: str, body: Any) -> int:
        """Append a message from ``sender`` (a member: else NotAMember); its id. A sender
        who had acknowledged everything has read its own message too."""
        return (await self.send_many(sender, [body]))[0]

    async def send_many(self, sender: str, bodies: Iterable[Any]) -> list[int]:
        """Append messages from ``sender`` in order, in one round trip; their ids."""
        return await self._post(bodies, _member(sender))

    async def fetch(self, member: str, limit: int = 100, timeout: float = 0) -> list[Message]:
        """The oldest ``limit`` messages after ``member``'s cursor, waiting up to
        ``timeout`` seconds for one. Nothing moves until ``ack``."""
        return await self._fetch(_member(member), limit, timeout, members_only=True)

    async def ack(self, member: str, upto: int | Message | Sequence[Message]) -> int:
        """Move ``member``'s cursor to this id (never back); messages every member has
        acknowledged are deleted. Returns the cursor."""
        return await self._commit(_member(member), _upto(upto), members_only=True)

    async def members(self) -> dict[str, int]:
        """Each member and its cursor."""
        return (await self.info()).cursors


async def channels(host: MessagingHost) -> list[Mailbox | Group]:
    """Every mailbox that was sent to and every group that was joined under this prefix,
    by kind and name. The list is written after a mailbox's first post and at each join
    (another call: a mailbox whose first post lost its connection before the listing is
    missing from it)."""
    found: list[Mailbox | Group] = []
    for entry in await reads.channel_names(await host.client(), host.settings.prefix):
        kind, _, name = entry.partition(":")
        if kind == "mailbox":
            found.append(Mailbox(host, name))
        elif kind == "group":
            found.append(Group(host, name))
    return found


async def unread(host: MessagingHost, member: str) -> dict[str, int]:
    """How many messages ``member`` has not acknowledged, in each group it belongs to:
    its list of groups, then every group's last id and its cursor (two round trips)."""
    redis = await host.client()
    prefix = host.settings.prefix
    joined = await redis.smembers(member_groups(prefix, member))
    names = sorted(_text(name) for name in joined)
    if not names:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            keys = ChannelKeys.of(prefix, "group", name)
            pipe.get(keys.seq)
            pipe.zscore(keys.cursors, member)
        replies = await pipe.execute()
    counts = {}
    for index, name in enumerate(names):
        last, cursor = replies[2 * index], replies[2 * index + 1]
        if cursor is not None:  # left meanwhile: not one of its groups any more
            counts[name] = int(last or 0) - int(cursor)
    return counts


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _member(member: str) -> str:
    return validate_name("member", member)


def _sender(sender: str | None) -> str:
    return "" if sender is None else _member(sender)
