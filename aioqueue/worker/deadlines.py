"""Task timeouts for all running jobs with one timer, not one per job.

``asyncio.timeout`` per job costs a timer handle, a context manager and a cancelled entry
left in the event loop's heap: about as much as running a no-op job. Here each job's
deadline goes into one heap, one loop timer is armed for the earliest, and when it fires
the overdue jobs are told (``time_out()``: the in-flight job cancels its handler and
records why). Entries of jobs that finished in time are dropped lazily, and the heap is
rebuilt when they outnumber the live ones, so its size stays proportional to the jobs
running.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Protocol


class Deadlined(Protocol):
    """A job with a deadline: ``deadline`` is event-loop time, None once unwatched."""

    deadline: float | None

    def time_out(self) -> None: ...


class Deadlines:
    """Tells each job when its deadline passes."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadlined]] = []
        self._order = itertools.count()  # ties never compare jobs
        self._live = 0
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, job: Deadlined, deadline: float) -> None:
        """Call ``job.time_out()`` at ``deadline`` (event-loop time) unless unwatch()ed."""
        job.deadline = deadline
        heapq.heappush(self._heap, (deadline, next(self._order), job))
        self._live += 1
        if self._timer is None or deadline < self._timer.when():
            self._arm()
        elif len(self._heap) > 2 * self._live + 64:
            self._heap = [entry for entry in self._heap if entry[2].deadline is not None]
            heapq.heapify(self._heap)

    def unwatch(self, job: Deadlined) -> None:
        """The handler returned or raised: its deadline no longer applies."""
        if job.deadline is not None:
            job.deadline = None
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
                job.time_out()
        self._arm()
