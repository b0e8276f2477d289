"""A worker's first contact with Redis: waited for, and given up at once on a stop.

A worker started while Redis is down (or restarting, or stalled) waits for it, saying why
each time, as it does for a later outage. A stop requested meanwhile (SIGTERM) ends the
wait at once, an attempt under way included: that attempt is the worker's own connect
(nothing else shares it), so it is cancelled, and what it opened is closed; the worker
does not wait more than STOP_CONTACT_WAIT for that, and says nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import ServerRefused, ServerUnavailable, describe
from ..core.settings import mask_url
from .loops import wait_event

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

FIRST_CONTACT_PAUSE = 0.5  # seconds before trying an unreachable Redis again, doubling...
MAX_CONTACT_PAUSE = 10.0  # ...up to this
STOP_CONTACT_WAIT = 1.0  # seconds a stop waits for a cancelled attempt to clean up


class Reachable(Protocol):
    @property
    def redis_url(self) -> str | None: ...

    async def internal_client(self) -> Redis: ...


class _StopRequested(Exception):
    """A stop was requested while the worker was still reaching Redis."""


async def reach_redis(host: Reachable, stop_requested: asyncio.Event) -> Redis | None:
    """The app's client once Redis answers; None if asked to stop first. A refused
    password or permission is no outage: it raises."""
    pause = FIRST_CONTACT_PAUSE
    while not stop_requested.is_set():
        try:
            return await _attempt(host, stop_requested)
        except (AuthenticationError, NoPermissionError, ServerRefused):
            raise
        except _StopRequested:
            break
        except (ServerUnavailable, RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if stop_requested.is_set():
                break  # (nothing to say: it was told to stop)
            cause = exc.__cause__ if isinstance(exc, ServerUnavailable) else exc
            logger.warning(
                "cannot reach Redis at %s: %s; trying again in %.1fs",
                mask_url(host.redis_url or ""), describe(cause or exc), pause,
            )  # fmt: skip
        if await wait_event(stop_requested, pause):
            break
        pause = min(2 * pause, MAX_CONTACT_PAUSE)
    return None


async def _attempt(host: Reachable, stop_requested: asyncio.Event) -> Redis:
    """One attempt at the client, given up as soon as a stop is requested."""
    attempt = asyncio.ensure_future(host.internal_client())
    stop = asyncio.ensure_future(stop_requested.wait())
    try:
        await asyncio.wait({attempt, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if attempt.done():
        return attempt.result()
    attempt.cancel()
    await asyncio.wait({attempt}, timeout=STOP_CONTACT_WAIT)
    if attempt.done() and not attempt.cancelled():
        attempt.exception()  # (retrieved: of no interest now)
    raise _StopRequested
