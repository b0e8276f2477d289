"""The worker's concurrency limit, shared by all its queues, with a small lookahead.

Jobs run in at most ``size`` slots. Without more, a worker of short jobs idles for every
take round trip (its slots free up only when jobs end, and the next jobs are still in
Redis), while Redis idles as the worker runs them. So a take may lease a few jobs beyond
the free slots: they wait here, in order, and start the moment a slot frees.

The lookahead is about the number of jobs that end during one take round trip (the rate
at which jobs end, times the round trip, doubled for slack), i.e. the slots that a round
trip would otherwise leave idle: all the slots for jobs shorter than a round trip, none for
long jobs, so a worker busy with long jobs never holds jobs it cannot start. A leased job
that still waits after ``max_wait`` is handed back (to go back to ready), so a queue that
turns slow cannot strand jobs in one worker.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

MAX_WAIT = 2.0  # seconds a leased job may wait for a slot before it is handed back
RATE_WINDOW = 0.005  # seconds: the shortest span the rate at which jobs end is measured over


class Slots(Generic[T]):
    """Counts running jobs, reserves room for take calls, and holds jobs taken ahead."""

    def __init__(
        self, size: int, start: Callable[[T], None], *, max_wait: float | None = None
    ) -> None:
        self.size = size
        self.running = 0
        self.lookahead = 0
        self.ended = 0  # jobs ended so far
        self._rate_since = (0.0, 0)  # (loop time, ended) where the end rate is measured from
        self._start = start
        self._max_wait = MAX_WAIT if max_wait is None else max_wait
        self._reserved = 0
        self._waiting: deque[tuple[float, T]] = deque()  # (time.monotonic() when admitted, job)
        self._changed = asyncio.Event()
        self._stopped = False  # stop_starting() was called

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def capacity(self) -> int:
        """How many jobs the worker may hold now: the slots and the lookahead."""
        return self.size + self.lookahead

    @property
    def room(self) -> int:
        """How many more jobs may be taken now."""
        return self.capacity - self.running - self._reserved - len(self._waiting)

    def reserve(self, limit: int) -> int:
        """Reserve room for up to ``limit`` jobs; each is then admit()ted or unreserve()d."""
        count = max(0, min(limit, self.room))
        self._reserved += count
        return count

    def reserve_beyond(self) -> int:
        """Reserve room for one job past the capacity, for a queue with nothing in hand
        while other queues' jobs fill the worker: it then waits for a slot with the jobs
        taken ahead instead of for room to take (which the busy queues' takes win as it
        frees). Only while jobs end fast enough that taking ahead pays (a lookahead): a
        worker busy with long jobs holds none it cannot start soon. 1 if reserved, else 0."""
        if not self.lookahead or self._stopped:
            return 0
        self._reserved += 1
        return 1

    def unreserve(self, count: int) -> None:
        """Give back reserved room (a take came back short); wakes wait_change()."""
        self._reserved -= count
        self._changed.set()

    def admit(self, job: T) -> None:
        """A reserved job arrived: start it now if a slot is free, else it waits (once
        stopping, it waits to be handed back: a take's reply that came late)."""
        self._reserved -= 1
        if self.running < self.size and not self._waiting and not self._stopped:
            self.running += 1
            self._start(job)
        else:
            self._waiting.append((time.monotonic(), job))

    def admit_unreserved(self, job: T) -> None:
        """A job that arrived without a reservation (a blocking read's): it starts if a
        slot is free, else it waits like a job taken ahead."""
        self._reserved += 1
        self.admit(job)

    def end(self) -> None:
        """A job ended: its slot goes to the longest-waiting job, if any."""
        self.ended += 1
        if self._waiting and not self._stopped:
            _, job = self._waiting.popleft()
            self._start(job)
        else:
            self.running -= 1
        self._changed.set()

    def size_lookahead(self, round_trip: float) -> None:
        """After a take call of ``round_trip`` seconds: size the lookahead from the rate at
        which jobs ended, measured over at least that long (and RATE_WINDOW)."""
        now = time.perf_counter()
        since, ended = self._rate_since
        if now - since < max(round_trip, RATE_WINDOW):
            return
        self._rate_since = (now, self.ended)
        rate = (self.ended - ended) / (now - since)
        self.lookahead = min(self.size, math.ceil(2 * rate * round_trip))

    def take_waiting(self, match: Callable[[T], bool] | None = None) -> list[T]:
        """Remove and return the waiting jobs that ``match`` (default: all)."""
        taken = [job for _, job in self._waiting if match is None or match(job)]
        if taken:
            kept = [(t, job) for t, job in self._waiting if match is not None and not match(job)]
            self._waiting = deque(kept)
            self._changed.set()
        return taken

    def take_stale(self) -> list[T]:
        """Remove and return the jobs that have waited longer than ``max_wait``."""
        deadline = time.monotonic() - self._max_wait
        stale = []
        while self._waiting and self._waiting[0][0] <= deadline:
            stale.append(self._waiting.popleft()[1])
        if stale:
            self.lookahead = 0  # jobs got slow: take no more than there are free slots
            self._changed.set()
        return stale

    async def wait_change(self) -> None:
        """Return when a job ends, room is given back, or stop_starting() is called."""
        if not self._stopped:
            self._changed.clear()
            await self._changed.wait()

    def stop_starting(self) -> None:
        """Shutdown: a slot that frees no longer starts a waiting job (they go back to
        ready); wakes wait_change()."""
        self._stopped = True
        self._changed.set()
