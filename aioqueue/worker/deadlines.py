"""Task timeouts for all running jobs with one timer, not one per job.

``asyncio.timeout`` per job costs a timer handle, a context manager and a cancelled entry
left in the event loop's heap: about as much as running a no-op job. Here each job's
deadline goes into one heap, one loop timer is armed for the earliest, and when it fires
the owner of the overdue jobs is told (``on_due``: ``InFlight.time_out``, which cancels
the handler and records why).

Deadlines keeps its own entries and writes nothing on a job. It reads the job's
``deadline``, which the job's owner sets before ``watch`` and clears before ``unwatch``:
an entry whose job has none finished in time. Such entries are dropped lazily, and the
heap is rebuilt when they outnumber the live ones, so its size stays proportional to the
jobs running. (Reading the owner's field, rather than keeping a set of live jobs, spares
a set insert and removal per job.)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable


class Deadlined(Protocol):
    """A job as Deadlines reads it: its deadline (event-loop time) while it is watched."""

    @property
    def deadline(self) -> float | None: ...


J = TypeVar("J", bound=Deadlined)


class Deadlines(Generic[J]):
    """Reports each watched job to ``on_due`` when its deadline passes."""

    def __init__(self, on_due: Callable[[J], None]) -> None:
        self._on_due = on_due
        self._heap: list[tuple[float, int, J]] = []
        self._order = itertools.count()  # ties never compare jobs
        self._live = 0  # watched and not yet unwatched
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, job: J, deadline: float) -> None:
        """Report ``job`` at ``deadline`` (its ``deadline``) unless unwatch()ed first."""
        heapq.heappush(self._heap, (deadline, next(self._order), job))
        self._live += 1
        if self._timer is None or deadline < self._timer.when():
            self._arm()
        elif len(self._heap) > 2 * self._live + 64:
            self._heap = [entry for entry in self._heap if entry[2].deadline is not None]
            heapq.heapify(self._heap)

    def unwatch(self, job: J) -> None:
        """The handler returned or raised (its owner cleared its deadline): once per
        watch()."""
        self._live -= 1

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        if self._heap:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(self._heap[0][0], self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        heap = self._heap
        while heap and (heap[0][2].deadline is None or heap[0][0] <= now):
            _, _, job = heapq.heappop(heap)
            if job.deadline is not None:
                self._on_due(job)
        self._arm()
