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
  undone (``loops.stop_all``), and nothing after "stopping" says the worker goes on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..core.errors import describe
from ..store.following import MasterChanged

if TYPE_CHECKING:
    from collections.abc import Callable

REMIND_AFTER = 60.0  # seconds between the WARNING lines of one outage


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
        lasted = asyncio.get_running_loop().time() - self.since
        quiet = not self._warned or (self._stopping is not None and self._stopping())
        level = logging.DEBUG if quiet else logging.INFO
        self._log.log(level, "%s works again, %.1fs after it first failed", self._what, lasted)
        self.since, self._warned = None, False
