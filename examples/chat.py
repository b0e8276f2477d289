"""Chat: rooms are groups, direct messages go to mailboxes, unread counts in one call.

Run it (a private redis-server is started when ``AIOQUEUE_REDIS_URL`` is unset)::

    python -m examples.chat

Every member of a room reads every message after their own cursor and acknowledges what
they read; what all members have read is deleted. Reading is at-least-once: a client that
crashes between fetching and acknowledging gets the same messages again.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from collections.abc import Callable

USERS = ("alice", "bob", "carol")
ROOMS = {"general": USERS, "random": ("alice",)}  # carol joins #random later
OPENING = [  # (room, sender, text)
    ("general", "alice", "morning all!"),
    ("general", "bob", "hi alice"),
    ("random", "alice", "anyone up for lunch?"),
]
LATER = [("random", "alice", "noon, usual place"), ("general", "carol", "standup in 5")]


@dataclass
class ChatDemo:
    """What run_demo() saw, for the tests to check."""

    unread: dict[str, dict[str, int]] = field(default_factory=dict)  # user -> room -> count
    crashed: list[int] = field(default_factory=list)  # ids bob's phone fetched, never acked
    redelivered: list[int] = field(default_factory=list)  # the same room, on bob's laptop
    sizes_read: dict[str, int] = field(default_factory=dict)  # kept once alice and bob read
    size_after_leave: int = -1  # #random once carol, who never read it, has left
    direct: list[str] = field(default_factory=list)  # carol's mailbox, as she read it
    inbox_size: int = -1  # carol's mailbox after her ack
    sizes_end: dict[str, int] = field(default_factory=dict)  # kept once everyone has read
    unread_end: dict[str, dict[str, int]] = field(default_factory=dict)


async def read_rooms(
    app: aioqueue.App, user: str, say: Callable[[str], None]
) -> dict[str, list[int]]:
    """A user's client: ask which rooms have unread messages, fetch, show, acknowledge.
    The ids it read, by room."""
    say(f"{user} reads:")
    read = {}
    for room, count in (await app.unread(user)).items():
        if count == 0:
            continue
        messages = await app.group(room).fetch(user)
        for message in messages:
            say(f"    #{room:<8} {message.id}  {message.sender}: {message.body['text']}")
        await app.group(room).ack(user, messages)  # after showing them: at-least-once
        read[room] = [message.id for message in messages]
    return read


async def send(
    app: aioqueue.App, say: Callable[[str], None], lines: list[tuple[str, str, str]]
) -> None:
    for room, sender, text in lines:
        await app.group(room).send(sender, {"text": text})
        say(f"    {sender} -> #{room}: {text}")


async def run_demo(app: aioqueue.App, say: Callable[[str], None] = print) -> ChatDemo:
    """Three users, two rooms, a crash, a leaver and a direct message."""
    demo = ChatDemo()
    for room, members in ROOMS.items():
        for user in members:
            await app.group(room).join(user)
        say(f"#{room}: {', '.join(members)} joined")
    await send(app, say, OPENING)
    await app.group("random").join("carol", history=False)
    say("carol joins #random (history=False: only what is said from now on)")
    await send(app, say, LATER)

    say("unread, one call per user (a sender who was caught up has read its own message):")
    for user in USERS:
        demo.unread[user] = await app.unread(user)
        say(f"    {user:<6} {demo.unread[user]}")

    crashed = await app.group("general").fetch("bob")
    demo.crashed = [message.id for message in crashed]
    say(f"bob's phone fetches {len(crashed)} from #general and crashes before acknowledging")
    say("bob opens his laptop (a new connection)")
    async with aioqueue.App(redis_url=app.redis_url, prefix=app.settings.prefix) as laptop:
        demo.redelivered = (await read_rooms(laptop, "bob", say))["general"]
    say(f"    (#general {demo.redelivered} again: read at least once, never lost)")
    await read_rooms(app, "alice", say)
    demo.sizes_read = {room: (await app.group(room).info()).size for room in ROOMS}
    info = await app.group("random").info()
    say(f"kept: {demo.sizes_read} (carol has read neither room; #random lag {info.lag('carol')})")
    await app.group("random").leave("carol")
    demo.size_after_leave = (await app.group("random").info()).size
    say(f"carol leaves #random without reading it; kept in #random: {demo.size_after_leave}")

    inbox = app.mailbox("carol")
    waiting = asyncio.create_task(inbox.fetch(timeout=10))  # carol's client, waiting
    await inbox.send({"text": "can you run standup?"}, sender="alice")
    say("alice -> carol (direct): can you run standup?")
    messages = await waiting
    demo.direct = [f"{message.sender}: {message.body['text']}" for message in messages]
    await inbox.ack(messages)
    demo.inbox_size = (await inbox.info()).size
    say(f"carol's inbox: {demo.direct}; kept after her ack: {demo.inbox_size}")
    await read_rooms(app, "carol", say)
    demo.sizes_end = {room: (await app.group(room).info()).size for room in ROOMS}
    say(f"everyone has read everything; kept: {demo.sizes_end}")
    for user in USERS:
        demo.unread_end[user] = await app.unread(user)
        say(f"    {user:<6} {demo.unread_end[user]}")
    return demo


async def _run(app: aioqueue.App) -> ChatDemo:
    async with app:
        return await run_demo(app)


def main() -> None:
    # A prefix of this run's own: a second run on the same server starts from empty rooms.
    app = aioqueue.App(prefix=f"chat-{uuid.uuid4().hex[:8]}")
    with contextlib.ExitStack() as stack:
        if app.redis_url is None:
            server = stack.enter_context(EmbeddedServer())
            app.set_redis_url(server.url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {server.url}")
        asyncio.run(_run(app))


if __name__ == "__main__":
    main()
