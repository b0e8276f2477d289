"""The coalescing of concurrent posts (store/posting.py), on a fake send: who shares a
call, what each caller gets back, errors, cancelled callers."""

from __future__ import annotations

import asyncio

import pytest

from aioqueue.store.posting import MAX_MERGED, PostBatcher


class Log:
    """A fake log: each call appends its bodies and answers the first one's index (1-based),
    after a round trip that the test releases."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.calls: list[tuple[str, list[bytes]]] = []
        self.fail: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, sender: str, bodies: list[bytes]) -> int:
        self.calls.append((sender, bodies))
        await asyncio.sleep(0)  # (the other callers arrive meanwhile)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        first = len(self.bodies) + 1
        self.bodies += bodies
        return first


async def post(batcher: PostBatcher[int], sender: str, body: bytes) -> int:
    first, offset = await batcher.post(sender, [body])
    return first + offset


async def test_concurrent_posts_share_a_call_and_each_gets_its_own_id() -> None:
    log = Log()
    batcher = PostBatcher(log.send)
    bodies = [str(n).encode() for n in range(50)]
    ids = await asyncio.gather(*(post(batcher, "s", body) for body in bodies))
    assert [log.bodies[i - 1] for i in ids] == bodies  # each id holds its caller's body
    assert len(log.calls) == 2  # the first alone, then the 49 that came meanwhile
    assert [len(bodies) for _, bodies in log.calls] == [1, 49]


async def test_a_caller_posting_again_at_once_waits_behind_the_others() -> None:
    log = Log()
    batcher = PostBatcher(log.send)

    async def sender(name: str) -> list[int]:
        return [await post(batcher, name, f"{name}{n}".encode()) for n in range(10)]

    got = await asyncio.gather(*(sender("s") for _ in range(20)))
    assert sorted(i for ids in got for i in ids) == list(range(1, 201))
    assert len(log.calls) < 40  # not one call per post (a lone caller must not hog it)


async def test_posts_merge_only_with_the_same_senders_and_up_to_the_bound() -> None:
    log = Log()
    batcher = PostBatcher(log.send)
    log.gate.clear()
    first = asyncio.ensure_future(post(batcher, "a", b"0"))
    await asyncio.sleep(0)
    waiting = [
        asyncio.ensure_future(post(batcher, sender, b"x"))
        for sender in ["a", "a", "b", "a"] + ["c"] * (MAX_MERGED + 1)
    ]
    await asyncio.sleep(0)
    log.gate.set()
    await asyncio.gather(first, *waiting)
    assert [(sender, len(bodies)) for sender, bodies in log.calls] == [
        ("a", 1), ("a", 2), ("b", 1), ("a", 1), ("c", MAX_MERGED), ("c", 1),
    ]  # fmt: skip


async def test_an_error_reaches_every_caller_of_its_call_and_the_next_call_goes_on() -> None:
    log = Log()
    batcher = PostBatcher(log.send)
    log.gate.clear()
    first = asyncio.ensure_future(post(batcher, "s", b"0"))
    await asyncio.sleep(0)
    merged = [asyncio.ensure_future(post(batcher, "s", b"x")) for _ in range(3)]
    await asyncio.sleep(0)
    log.fail = ConnectionError("gone")
    log.gate.set()
    for call in (first, *merged):
        with pytest.raises(ConnectionError, match="gone"):
            await call
    log.fail = None
    assert await post(batcher, "s", b"y") == 1


async def test_a_caller_that_gives_up_waiting_has_its_post_left_out() -> None:
    log = Log()
    batcher = PostBatcher(log.send)
    log.gate.clear()
    first = asyncio.ensure_future(post(batcher, "s", b"0"))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(post(batcher, "s", b"gone"))
    kept = asyncio.ensure_future(post(batcher, "s", b"kept"))
    await asyncio.sleep(0)
    gone.cancel()
    log.gate.set()
    assert (await first, await kept) == (1, 2)
    assert log.bodies == [b"0", b"kept"]
