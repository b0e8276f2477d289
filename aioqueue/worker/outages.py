"""How a worker's loops report failing Redis calls: an outage reads as a few lines, not a
burst.

A loop whose call fails tries again, every half second or so, for as long as Redis is
away: a line per failure made a minute's outage hundreds of lines, and a Sentinel
failover (handled: the calls go on with the new master) a warning from every loop. So
each loop keeps an ``Outage``:

- the first failure is a WARNING (what failed, and why); the failures after it are
  DEBUG, with a WARNING reminder every REMIND_AFTER seconds it lasts; the first call that
  works again ends it, at INFO, saying how long after the first failure (a call that
  hangs until its socket timeout fails that long after the outage began: not its length);
- a failover's expected break (``MasterChanged``: the call was on its way when the master
  changed) is one INFO line, and a quiet end; it turns into a WARNING only if the calls
  go on failing for another reason;
- once the loop's component is stopping, DEBUG only: the stop itself says what it leaves
  undone (``loops.stop_all``), and nothing after "stopping" says the worker goes on;
- when Redis does not answer at all (refused, timed out, silent), every loop fails at
  once: a worker's loops share a ``ServerOutage`` (``shared_context``), which says so in
  one WARNING, and in one INFO line when a call works again; each loop's own lines about
  it are DEBUG. (A worker's fifteen loops made a restart of Redis thirty lines.) So is a
  failover's break: one INFO line per worker, not one per loop it cut short (on a Cluster:
  a slot that moved under a subscription, or a blocking wait ended with UNBLOCKED).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import describe
from ..store.following import MasterChanged
from ..store.pubsub import ChannelMoved

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger(__name__)

REMIND_AFTER = 60.0  # seconds between the WARNING lines of one outage
UNANSWERED = (RedisConnectionError, RedisTimeoutError, OSError)  # (OSError: ChannelSilent,
# and the deadlines' TimeoutError)


class ServerOutage:
    """Redis not answering any of a worker's loops: one WARNING when the first call fails,
    a reminder every REMIND_AFTER, one INFO line when a call works again; a failover that
    cuts calls short, one INFO line; DEBUG only once the worker is ``stopping`` (its stop
    says what it leaves undone)."""

    __slots__ = ("failing_over", "since", "stopping", "told_at")

    def __init__(self) -> None:
        self.since: float | None = None  # loop time of the first failed call
        self.told_at = 0.0
        self.stopping = False
        self.failing_over = False  # a failover cut a call short, and none worked since

    def cut_short(self, what: str, cause: str, *, moved: bool) -> None:
        """A failover cut a call short (``MasterChanged``), or a slot moved under it (on a
        Cluster; or the server it waited on turned replica): expected, and said once."""
        if self.stopping or self.failing_over:
            logger.debug("%s: cut short by a failover: %s", what, cause)
            return
        self.failing_over = True
        if moved:
            logger.info(
                "a failover or a slot's move cut the worker's calls short (%s: %s); they "
                "follow it", what, cause,
            )  # fmt: skip
        else:
            logger.info(
                "a failover cut the worker's calls short (%s: %s); they go on with the new "
                "master", what, cause,
            )  # fmt: skip

    def failed(self, what: str, cause: str, now: float) -> None:
        """A loop's call (``what``) failed: Redis did not answer."""
        if self.stopping:
            logger.debug("%s failed while the worker stops: %s", what, cause)
        elif self.since is None:
            self.since = self.told_at = now
            logger.warning(
                "cannot reach Redis (the worker's calls wait, and go on when it answers): %s "
                "failed: %s", what, cause,
            )  # fmt: skip
        elif now - self.told_at >= REMIND_AFTER:
            self.told_at = now
            lasted = now - self.since
            logger.warning("Redis still does not answer, for %.0fs now: %s", lasted, cause)

    def answered(self, now: float) -> None:
        """A loop's call that had failed works again: the outage, or the failover, is over."""
        self.failing_over = False
        if self.since is not None:
            lasted, level = now - self.since, logging.DEBUG if self.stopping else logging.INFO
            logger.log(level, "Redis answers again, %.1fs after the first call that failed", lasted)
            self.since = None


_SERVER: contextvars.ContextVar[ServerOutage | None] = contextvars.ContextVar(
    "aioqueue_server_outage", default=None
)


def shared_context(outage: ServerOutage) -> contextvars.Context:
    """A copy of the current context in which the loops a worker starts (``context.run(
    component.start)``) share ``outage``; the caller's own context is left as it is."""
    context = contextvars.copy_context()
    context.run(_SERVER.set, outage)
    return context


def _unanswered(exc: BaseException) -> bool:
    """Redis did not answer (a slot that moved, or a failover, is not that)."""
    return isinstance(exc, UNANSWERED) and not isinstance(exc, (ChannelMoved, MasterChanged))


def _slot_moved(exc: BaseException) -> bool:
    """A Cluster moved a slot under the call: a subscribed channel's, or a blocking wait's
    (Redis ends it with UNBLOCKED when its master turns replica)."""
    unblocked = isinstance(exc, ResponseError) and str(exc).startswith("UNBLOCKED")
    return unblocked or isinstance(exc, ChannelMoved)


def _shared(exc: BaseException) -> bool:
    """Said once for all of a worker's loops: Redis not answering, or a failover."""
    return _unanswered(exc) or isinstance(exc, MasterChanged) or _slot_moved(exc)


class Outage:
    """The failures of one loop's calls (see the module's docstring). ``what`` names the
    call in a log line ("taking jobs from emails"); ``stopping`` says when the loop's
    component is stopping; ``then``, what becomes of a failed call, ends the warning."""

    __slots__ = ("_log", "_stopping", "_then", "_warned", "_what", "since", "told_at")

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        stopping: Callable[[], bool] | None = None,
        *,
        then: str = "",
    ) -> None:
        self._log, self._what, self._then = log, what, f" ({then})" if then else ""
        self._stopping = stopping
        self.since: float | None = None  # loop time of the outage's first failure
        self.told_at = 0.0  # loop time of its last line above DEBUG
        self._warned = False  # a WARNING was logged for it

    def failed(self, exc: BaseException) -> None:
        """A call failed with ``exc``."""
        now = asyncio.get_running_loop().time()
        cause = describe(exc)
        if self._stopping is not None and self._stopping():
            self._log.debug("%s failed while stopping: %s", self._what, cause)
            return
        server = _SERVER.get()
        if server is not None and _shared(exc):  # said once for all the loops
            if self.since is None:
                self.since, self.told_at = now, now
            if _unanswered(exc):
                server.failed(self._what, cause, now)
            else:
                server.cut_short(self._what, cause, moved=_slot_moved(exc))
            self._log.debug("%s failed: %s", self._what, cause)
            return
        expected = isinstance(exc, MasterChanged)
        if self.since is None:
            self.since, self.told_at, self._warned = now, now, not expected
            if expected:
                self._log.info(
                    "%s: cut short by a failover (%s); going on with the new master",
                    self._what, cause,
                )  # fmt: skip
            else:
                self._log.warning("%s failed: %s%s", self._what, cause, self._then)
        elif not expected and not self._warned:
            self.told_at, self._warned = now, True
            self._log.warning("%s failed: %s%s", self._what, cause, self._then)
        elif now - self.told_at >= REMIND_AFTER:
            self.told_at, self._warned = now, True
            self._log.warning(
                "%s still fails, for %.0fs now: %s", self._what, now - self.since, cause
            )
        else:
            self._log.debug("%s failed again: %s", self._what, cause)

    def ended(self) -> None:
        """A call worked: the outage, if any, is over."""
        if self.since is None:
            return
        now = asyncio.get_running_loop().time()
        if (server := _SERVER.get()) is not None:
            server.answered(now)
        lasted = now - self.since
        quiet = not self._warned or (self._stopping is not None and self._stopping())
        level = logging.DEBUG if quiet else logging.INFO
        self._log.log(level, "%s works again, %.1fs after it first failed", self._what, lasted)
        self.since, self._warned = None, False
