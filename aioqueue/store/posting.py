"""Coalescing of concurrent single posts to one log (a mailbox's, a group's or a topic's).

As enqueues do (``batching``; the machinery both share is ``coalescing``): a lone post is
sent at once, from its caller's task. While one is in flight, further posts wait in a list,
and a flusher sends them as soon as the wire is free, merged: the bodies of consecutive
posts of one sender go in one script call (at most MAX_MERGED), whose messages get
consecutive ids in arrival order, so each caller gets its share of the reply. Fifty
concurrent senders cost a couple of round trips, not fifty, and Redis runs one script per
flush instead of one per message.

Each caller keeps its own outcome: a body that cannot be encoded fails its caller before
anything is queued; what the call answers for all (not a member, a Redis error) reaches
every caller of that call. A caller that gives up waiting (cancelled) before its flush has
its post left out. A merged call is no more resend-safe than the calls it replaces:
redis-py may resend a script call after a dropped connection, once, as for a lone post.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from .coalescing import Coalescer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

T = TypeVar("T")

MAX_MERGED = 1000  # bodies per merged call: bounds one script's run time in Redis


class _Post(NamedTuple, Generic[T]):
    sender: str
    bodies: list[bytes]
    future: asyncio.Future[tuple[T, int]]


class PostBatcher(Coalescer[_Post[T]]):
    """Sends the posts of one log, merging whatever arrives while one is in flight.
    ``send(sender, bodies)`` is one script call; its reply is handed to every post it
    carried, with where that post's bodies start among the call's."""

    def __init__(self, send: Callable[[str, list[bytes]], Awaitable[T]]) -> None:
        super().__init__()
        self._send = send

    async def post(self, sender: str, bodies: list[bytes]) -> tuple[T, int]:
        """Send ``bodies`` from ``sender``: the reply of the call that carried them, and
        the index of the first of them among that call's bodies."""
        if self._alone:
            self._busy = True
            try:
                return await self._send(sender, bodies), 0
            finally:
                self._busy = False
                self._start_flusher()
        future: asyncio.Future[tuple[T, int]] = asyncio.get_running_loop().create_future()
        return await self._wait_in_line(_Post(sender, bodies, future), future)

    def _batch_size(self, pending: Sequence[_Post[T]]) -> int:
        return _mergeable(pending)

    async def _send_batch(self, batch: list[_Post[T]]) -> None:
        """One call for the batch's bodies; each post's future gets the reply and its
        offset, or the error."""
        bodies = [body for post in batch for body in post.bodies]
        try:
            reply = await self._send(batch[0].sender, bodies)
        except Exception as exc:
            for post in batch:
                if not post.future.done():
                    post.future.set_exception(exc)
            return
        offset = 0
        for post in batch:
            if not post.future.done():  # its caller may have given up waiting
                post.future.set_result((reply, offset))
            offset += len(post.bodies)


def _mergeable(pending: Sequence[_Post[T]]) -> int:
    """How many of the first posts go in one call: of one sender, MAX_MERGED bodies at
    most (the first post whatever its size)."""
    sender, count = pending[0].sender, len(pending[0].bodies)
    for index, post in enumerate(pending[1:], start=1):
        count += len(post.bodies)
        if post.sender != sender or count > MAX_MERGED:
            return index
    return len(pending)
