"""Mailboxes and groups on a real Redis: order, dense ids, at-least-once reads, cleanup
of what every reader acknowledged, the length bound, unread counts, and bad input."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.keys import ChannelKeys
from tests.helpers import wait_until

# -- mailboxes -----------------------------------------------------------------------------


async def test_a_mailbox_delivers_in_order_until_acknowledged(app: aioqueue.App) -> None:
    inbox = app.mailbox("user-42")
    ids = [await inbox.send({"n": n}, sender="shop") for n in range(3)]
    assert ids == [1, 2, 3]
    assert await inbox.send_many([{"n": 3}, {"n": 4}]) == [4, 5]

    first = await inbox.fetch(limit=2)
    assert [(m.id, m.body, m.sender) for m in first] == [
        (1, {"n": 0}, "shop"),
        (2, {"n": 1}, "shop"),
    ]
    assert all(m.sent_at is not None and m.error is None for m in first)
    # not acknowledged: a reader that crashed here gets the same messages again
    assert [m.id for m in await inbox.fetch(limit=2)] == [1, 2]

    assert await inbox.ack(first) == 2
    rest = await inbox.fetch()
    assert [m.body["n"] for m in rest] == [2, 3, 4]
    assert rest[-1].sender is None
    await inbox.ack(rest[-1])
    info = await inbox.info()
    assert (info.size, info.last_id, info.lag("")) == (0, 5, 0)  # acknowledged = deleted
    assert await inbox.fetch() == []


async def test_a_new_app_reads_what_the_crashed_reader_left(
    app: aioqueue.App, redis_url: str, prefix: str
) -> None:
    await app.mailbox("crashy").send_many(["a", "b", "c"])
    await app.mailbox("crashy").fetch()  # read, then "crash" before the ack
    await app.close()
    async with aioqueue.App(redis_url=redis_url, prefix=prefix) as again:
        assert [m.body for m in await again.mailbox("crashy").fetch()] == ["a", "b", "c"]


async def test_fetch_waits_for_the_first_message(app: aioqueue.App) -> None:
    inbox = app.mailbox("waiting")
    empty_reads: list[int] = []
    read = inbox._read

    async def counted(reader: str, limit: int, members_only: bool) -> list[aioqueue.Message]:
        messages = await read(reader, limit, members_only)
        empty_reads.extend([] if messages else [1])
        return messages

    inbox._read = counted  # type: ignore[method-assign]
    waiting = asyncio.create_task(inbox.fetch(timeout=10))

    async def found_nothing() -> bool:
        return bool(empty_reads)

    await wait_until(found_nothing)
    await app.mailbox("waiting").send("hello")
    messages = await asyncio.wait_for(waiting, 10)
    assert [m.body for m in messages] == ["hello"]
    assert await inbox.fetch(timeout=0.2) == messages  # still unacknowledged
    await inbox.ack(messages)
    assert await inbox.fetch(timeout=0.2) == []  # the deadline passed with nothing new


async def test_ack_never_moves_back_nor_past_the_last_id(app: aioqueue.App) -> None:
    inbox = app.mailbox("bounds")
    await inbox.send_many(range(5))
    assert await inbox.ack(3) == 3
    assert await inbox.ack(1) == 3
    assert await inbox.ack(99) == 5
    assert (await inbox.info()).size == 0


async def test_the_length_bound_trims_the_oldest_and_counts_them(app: aioqueue.App) -> None:
    inbox = app.mailbox("small", max_messages=3)
    await inbox.send_many(range(5))
    assert [m.body for m in await inbox.fetch()] == [2, 3, 4]
    info = await inbox.info()
    assert (info.size, info.dropped, info.lag("")) == (3, 2, 5)


async def test_bad_bodies_raise_and_write_nothing(app: aioqueue.App) -> None:
    inbox = app.mailbox("strict")
    with pytest.raises(aioqueue.SerializationError, match="not JSON-serializable"):
        await inbox.send_many([1, object()])
    with pytest.raises(aioqueue.SerializationError, match=r"holds nan at \['x'\]\[1\]"):
        await inbox.send_many([1, {"x": [0.5, float("nan")]}])  # (JSON would write null)
    with pytest.raises(aioqueue.PayloadTooLarge, match="encoded message is"):
        await inbox.send("x" * (app.settings.max_payload_bytes + 1))
    assert (await inbox.info()).last_id == 0
    for bad in ("", "a:b", "{x}", "a b"):
        with pytest.raises(aioqueue.ConfigError):
            app.mailbox(bad)
    with pytest.raises(aioqueue.ConfigError):
        await inbox.fetch(limit=0)
    with pytest.raises(aioqueue.ConfigError):
        await inbox.send("x", sender="not:valid")


async def test_foreign_entries_come_back_marked_and_can_be_skipped(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    inbox = app.mailbox("mixed")
    await inbox.send("before")
    keys = ChannelKeys.of(prefix, "mailbox", "mixed")
    await redis.incr(keys.seq)
    await redis.xadd(keys.log, {b"\xff": b"\xfe no body"}, id="2-0")
    await redis.incr(keys.seq)
    await redis.xadd(keys.log, {b"t": b"1700000000000", b"b": b"{not json"}, id="3-0")
    await inbox.send("after")
    messages = await inbox.fetch()
    assert [m.id for m in messages] == [1, 2, 3, 4]
    assert [m.body for m in messages] == ["before", None, None, "after"]
    assert messages[1].raw == b"\xff=\xfe no body"  # the entry's fields, as they are
    assert messages[1].error == "not an aioqueue message"
    assert messages[2].error is not None and messages[2].error.startswith("body is not JSON")
    assert messages[2].raw == b"{not json" and messages[2].sent_at is not None
    await inbox.ack(messages)
    assert (await inbox.info()).size == 0


# -- groups --------------------------------------------------------------------------------


async def test_every_member_reads_every_message_and_all_read_is_deleted(
    app: aioqueue.App,
) -> None:
    room = app.group("room-7")
    assert await room.join("alice") is True
    assert await room.join("bob") is True
    assert await room.join("bob") is False  # its cursor is kept
    await room.send("alice", {"text": "hello"})
    await room.send_many("bob", [{"text": "hi"}, {"text": "how are you"}])

    everything = [("alice", "hello"), ("bob", "hi"), ("bob", "how are you")]
    assert [(m.sender, m.body["text"]) for m in await room.fetch("bob")] == everything
    # alice had read everything when she sent: her own message is read; bob had not
    # (his cursor stays, or acknowledging his own would skip hers)
    assert [(m.sender, m.body["text"]) for m in await room.fetch("alice")] == everything[1:]
    await room.ack("alice", 3)
    assert (await room.info()).size == 3  # bob has not acknowledged any
    await room.ack("bob", 2)
    info = await room.info()
    assert (info.size, info.cursors, info.lag("bob")) == (1, {"alice": 3, "bob": 2}, 1)
    assert [m.id for m in await room.fetch("bob")] == [3]


async def test_members_only(app: aioqueue.App) -> None:
    room = app.group("private")
    await room.join("alice")
    with pytest.raises(aioqueue.NotAMember, match="'mallory' is not a member of group 'private'"):
        await room.send("mallory", "hi")
    assert (await room.info()).last_id == 0  # nothing written
    with pytest.raises(aioqueue.NotAMember):
        await room.fetch("mallory")
    with pytest.raises(aioqueue.NotAMember):
        await room.ack("mallory", 1)
    await room.leave("alice")
    with pytest.raises(aioqueue.NotAMember):
        await room.leave("alice")  # leaving twice


async def test_concurrent_sends_each_get_the_id_of_their_own_message(
    app: aioqueue.App,
) -> None:
    inbox, room = app.mailbox("busy"), app.group("busy")
    await room.join("alice")
    await room.join("bob")
    ids = await asyncio.gather(*(inbox.send({"n": n}) for n in range(60)))
    assert sorted(ids) == list(range(1, 61))
    by_id = {m.id: m.body for m in await inbox.fetch(limit=100)}
    assert [by_id[i] for i in ids] == [{"n": n} for n in range(60)]
    # in a group, the sends of a non-member fail alone: the members' land
    sends = [room.send("mallory" if n % 3 == 0 else "alice", n) for n in range(30)]
    outcomes = await asyncio.gather(*sends, return_exceptions=True)
    refused = [n for n, got in enumerate(outcomes) if isinstance(got, aioqueue.NotAMember)]
    assert refused == list(range(0, 30, 3))
    landed = {m.id: m.body for m in await room.fetch("bob", limit=100)}
    assert {n: landed[got] for n, got in enumerate(outcomes) if isinstance(got, int)} == {
        n: n for n in range(30) if n % 3
    }


async def test_joining_with_or_without_history(app: aioqueue.App) -> None:
    room = app.group("history")
    await room.join("alice")
    await room.join("dave")  # has read nothing: the group keeps what it sends
    await room.send_many("alice", ["one", "two"])
    await room.join("bob")  # history (the default): what the group still keeps
    await room.join("carol", history=False)  # only what comes next
    await room.send("alice", "three")
    assert [m.body for m in await room.fetch("bob")] == ["one", "two", "three"]
    assert [m.body for m in await room.fetch("carol")] == ["three"]


async def test_leaving_releases_what_only_the_leaver_held(app: aioqueue.App) -> None:
    room = app.group("leavers")
    await room.join("alice")
    await room.join("bob")
    await room.send_many("alice", range(4))
    await room.ack("alice", 4)
    assert (await room.info()).size == 4  # bob holds them
    await room.leave("bob")
    assert (await room.info()).size == 0
    await room.send("alice", "alone")
    await room.leave("alice")  # nobody left: nothing kept
    info = await room.info()
    assert (info.size, info.cursors, info.last_id) == (0, {}, 5)


async def test_unread_across_a_members_groups(app: aioqueue.App) -> None:
    for name in ("a", "b", "c"):
        await app.group(name).join("alice")
        await app.group(name).join("bob")
    await app.group("a").send_many("bob", range(3))
    await app.group("b").send("bob", "x")
    await app.group("a").ack("alice", 1)
    assert await app.unread("alice") == {"a": 2, "b": 1, "c": 0}
    await app.group("c").leave("alice")
    assert await app.unread("alice") == {"a": 2, "b": 1}
    assert await app.unread("nobody") == {}


async def test_a_member_who_never_reads_holds_at_most_the_bound(app: aioqueue.App) -> None:
    room = app.group("laggard", max_messages=10)
    await room.join("reader")
    await room.join("sleeper")
    for n in range(5):
        ids = await room.send_many("reader", range(n * 10, n * 10 + 10))
        await room.ack("reader", ids[-1])
    info = await room.info()
    assert (info.size, info.dropped, info.lag("sleeper")) == (10, 40, 50)
    assert [m.body for m in await room.fetch("sleeper", limit=3)] == [40, 41, 42]


async def test_one_post_wakes_every_waiting_member(app: aioqueue.App) -> None:
    room = app.group("waiters")
    for member in ("alice", "bob", "carol"):
        await room.join(member)
    reads: list[str] = []
    read = room._read

    async def counted(reader: str, limit: int, members_only: bool) -> list[aioqueue.Message]:
        messages = await read(reader, limit, members_only)
        reads.append(reader)
        return messages

    room._read = counted  # type: ignore[method-assign]
    waiting = [asyncio.create_task(room.fetch(member, timeout=10)) for member in ("bob", "carol")]

    async def both_found_nothing() -> bool:
        return sorted(reads) == ["bob", "carol"]

    await wait_until(both_found_nothing)  # both now wait on the announcement
    await app.group("waiters").send("alice", "wake up")
    got = await asyncio.wait_for(asyncio.gather(*waiting), 10)
    assert [[m.body for m in messages] for messages in got] == [["wake up"], ["wake up"]]
    assert len(reads) == 4  # each read once more, woken: none waited out its timeout


async def test_joining_with_history_after_deletions_counts_only_what_is_kept(
    app: aioqueue.App,
) -> None:
    room = app.group("late")
    await room.join("alice")
    await room.join("sleepy")
    await room.send_many("sleepy", range(5))  # sleepy was caught up: read by it
    await room.ack("alice", 3)  # 1..3 read by both: deleted; 4, 5 kept
    await room.join("bob")
    assert await app.unread("bob") == {"late": 2}
    assert [m.body for m in await room.fetch("bob")] == [3, 4]
    await room.leave("alice")
    await room.leave("sleepy")
    await room.leave("bob")  # nobody left: nothing kept
    await room.join("carol")
    assert (await room.info()).lag("carol") == 0  # nothing to read, nothing counted


async def test_the_app_lists_its_mailboxes_and_groups(app: aioqueue.App) -> None:
    assert await app.channels() == []
    assert await app.mailbox("quiet").fetch() == []  # read, never sent to: not listed
    await app.mailbox("inbox").send("hi")
    await app.group("room").join("alice")
    listed = [(channel.keys.kind, channel.name) for channel in await app.channels()]
    assert listed == [("group", "room"), ("mailbox", "inbox")]
