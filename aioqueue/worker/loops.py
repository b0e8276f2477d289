"""What the worker's components have in common: loops that run until asked to stop.

A component starts its own loops, ends them when asked (``stop``, then ``unblock`` for any
wait it has inside Redis: a token on its own wake-up list, never a cancelled redis-py
call), and says when they are done (``join``). A loop that crashes is logged, not lost.

A stop is bounded even when Redis does not answer (stalled or gone): a stalled server
delivers neither a wake-up token nor the reply of the call a loop waits in, so the stop
waits for each component its ``stop_wait`` at most, then leaves its loops behind (never
cancelled: cancelling calls that share a client can leave them stuck in its pool), to end
at their own socket timeout and say nothing more (``outages``). What a loop left behind
leaves undone is safe: whatever it holds is leased, and a lease that is not renewed
expires and gives the job back (at-least-once). The component says what it left
(``left_behind``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..core.errors import describe
from ..store import deadline

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
STOP_WAIT = 1.0  # seconds a stop waits for a component's loops before leaving them behind


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``; True if it was set."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def ring(redis: Redis, wake_key: str) -> None:
    """Leave a token on a loop's own wake-up list, so that its BLPOP returns now (if Redis
    does not take it, the BLPOP ends at its timeout instead: ``stop_all``)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.rpush(wake_key, "stop")
        pipe.pexpire(wake_key, WAKE_TOKEN_TTL_MS)
        await pipe.execute()


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

    name = "a worker component"  # for log lines ("the promoter of emails")
    stop_wait = STOP_WAIT  # seconds a stop waits for the loops before leaving them behind

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
        """End waits inside Redis (a blocking pop) at once; by default there are none.
        Raises what Redis raised (``stop_all`` does not wait long for it)."""

    async def join(self, timeout: float | None = None) -> bool:
        """Return when every loop has ended (True), or after ``timeout`` seconds (False)."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(self._tasks, timeout=timeout)
        return not pending

    def left_behind(self) -> str | None:
        """The stop leaves the loops behind (see the module's docstring): what that leaves
        undone, for ``stop_all``'s line (None: nothing worth saying), or said here."""
        return self.name


async def stop_all(components: Sequence[Component]) -> None:
    """Stop components together: ask all, wake all, then wait for all, each its
    ``stop_wait`` at most; the loops still running then are left behind (see the module's
    docstring), in one line."""
    loop = asyncio.get_running_loop()
    until = loop.time() + STOP_WAIT
    for component in components:
        component.stop()
    wakes = {deadline.detach(_wake(component), STOP_WAIT) for component in components}
    ended = await asyncio.gather(*(c.join(c.stop_wait) for c in components))
    if wakes:  # (their replies come with the loops' own: not left in flight)
        await asyncio.wait(wakes, timeout=max(0.0, until - loop.time()))
    left = [c.left_behind() for c, done in zip(components, ended, strict=True) if not done]
    if names := [name for name in left if name]:
        logger.warning(
            "stopping without waiting for %s: Redis does not answer (their calls end at "
            "their socket timeout)", ", ".join(names),
        )  # fmt: skip


async def _wake(component: Component) -> None:
    """Wake the component's waits inside Redis; if Redis does not take the token, the
    stop does not wait for it (a stalled server would not deliver it either)."""
    try:
        await component.unblock()
    except CLIENT_FAILURES as exc:
        logger.debug("could not wake %s: %s", component.name, describe(exc))


def _log_crash(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        if (exc := task.exception()) is not None:
            logger.error("worker loop crashed: %s", describe(exc), exc_info=exc)
