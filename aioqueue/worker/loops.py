"""What the worker's components have in common: loops that run until asked to stop.

A component starts its own loops, ends them when asked (``stop``, then ``unblock`` for any
wait it has inside Redis: a token on its own wake-up list, never a cancelled redis-py
call), and says when they are done (``join``). A loop that crashes is logged, not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..core.errors import describe

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

RETRY_PAUSE = 0.5  # seconds a loop pauses after a Redis error before it tries again

CLIENT_FAILURES: tuple[type[Exception], ...] = (RedisError, OSError, AttributeError, TypeError)
"""What a call through redis-py raises when Redis or the network fails: its own errors, and
from its asyncio writer a TypeError or AttributeError when the peer closed the connection
under a write (redis-py #3546, #4287: seen here while a Cluster slot moved). The loops that
hold the guarantees (acks, takes, leases, promotion, hand-offs) log these and go on."""
WAKE_TOKEN_TTL_MS = 60_000  # a wake-up token nobody popped (its loop had ended) expires


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``; True if it was set."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def ring(redis: Redis, wake_key: str, what: str) -> None:
    """Leave a token on a loop's own wake-up list, so that its BLPOP returns now; if Redis
    fails, the BLPOP returns at its timeout instead."""
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.rpush(wake_key, "stop")
            pipe.pexpire(wake_key, WAKE_TOKEN_TTL_MS)
            await pipe.execute()
    except RedisError as exc:
        logger.warning("could not wake %s: %s", what, describe(exc))


async def wait_first(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    if any(event.is_set() for event in events):
        return
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class Component:
    """A part of the worker that runs loops of its own until it is stopped."""

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def loops(self) -> Sequence[Coroutine[Any, Any, None]]:
        """The coroutines to run, one task each."""
        raise NotImplementedError

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(coro) for coro in self.loops()]
        for task in self._tasks:
            task.add_done_callback(_log_crash)

    def stop(self) -> None:
        """Ask the loops to end: set ``stopping`` and end any in-process wait."""
        self.stopping.set()

    async def unblock(self) -> None:
        """End waits inside Redis (a blocking pop) at once; by default there are none."""

    async def join(self) -> None:
        """Return when every loop has ended."""
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def stop_all(components: Sequence[Component]) -> None:
    """Stop components together: ask all, wake all, then wait for all."""
    for component in components:
        component.stop()
    await asyncio.gather(*(component.unblock() for component in components))
    await asyncio.gather(*(component.join() for component in components))


def _log_crash(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        if (exc := task.exception()) is not None:
            logger.error("worker loop crashed: %s", describe(exc), exc_info=exc)
