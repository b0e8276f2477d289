"""Taking the jobs of one queue into the worker's free slots.

A QueueConsumer's fetch loop takes up to the free slots (plus the lookahead, see
``slots``) in a few concurrent script calls; when nothing is ready, it blocks in BLPOP on
the queue's notify list (and its own wake-up list) until a job arrives. Each taken job is
held by the queue's ack batcher and admitted to the in-flight jobs, which run and settle
it; the consumer never sees it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from ..core.errors import describe
from ..core.lifecycle import HELD_BY_CONCURRENCY
from ..core.priorities import planner
from ..store import reads
from ..store.scripts import leasing
from .loops import CLIENT_FAILURES, RETRY_PAUSE, Component, ring, wait_event, wait_first

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from redis.asyncio import Redis

    from ..core.lifecycle import Promoted, Taken, TakeResult
    from ..core.settings import WorkerSettings
    from .acks import AckBatcher
    from .inflight import InFlight

logger = logging.getLogger(__name__)

MAX_TAKE = 1000  # jobs per take call: bounds its run time inside Redis
TAKES_IN_FLIGHT = 4  # take calls out at once: the next jobs come while the current run
MIN_TAKE_CHUNK = 16  # with a take out, wait for this much room: smaller calls cost more
RETRY_WAIT_MAX = 1.0  # burst mode: seconds at most between looks at retries still to come
HELD_LOOK = 0.1  # seconds between takes while the queue's concurrency cap holds jobs back
HELD_SLEEP = (0.001, 1.0)  # a rate's hold: sleep at least, at most (new limits are seen)
BURST_LOOK = 0.05  # seconds between looks of a dry burst consumer while the worker is busy
OFFER_MARGIN = 2.0  # seconds an idle offer outlives the BLPOP that waits for it
STOP_WITHDRAWING = 0.5  # seconds a stopping consumer retries withdrawing its offer


class QueueConsumer(Component):
    """Takes jobs of one queue into the worker's free slots."""

    def __init__(
        self,
        redis: Redis,
        acks: AckBatcher,
        inflight: InFlight,
        *,
        settings: WorkerSettings,
        result_ttl_ms: int,
        worker_id: str,
        order: StrictOrder | None = None,
        due_first: bool = False,
        span_ms: int = 0,
    ) -> None:
        super().__init__()
        self.redis, self.keys, self.settings = redis, acks.keys, settings
        self._acks, self._inflight, self._slots = acks, inflight, inflight.slots
        self._worker_id = worker_id
        self._wake_key = self.keys.wake(worker_id)
        self._result_ttl_ms = result_ttl_ms
        self._take_calls = 0
        self._forget: list[str] = []  # leases of takes whose replies were read
        self._dry_since: int | None = None  # a take came back short (acks landed at its send)
        self._failed = False  # a take failed: pause before the next
        self._held: TakeResult | None = None  # a take the queue's limits held back
        self._takes_out = 0  # take calls in flight
        self._offer: str | None = None  # the token of this consumer's idle offer, while out
        self._offer_lapses = 0.0  # loop time after which that offer can take no job
        # One take at a time until one comes back full: a worker woken for one job sends
        # one call, not TAKES_IN_FLIGHT (the extra calls would only delay that job).
        self._probing = True
        self._plan = planner(settings.priority_mode, settings.priority_weights)
        self.dry = False  # the queue ran out of work (as far as this worker knows)
        self._due_first = due_first  # due delayed jobs go ahead of the ready ones
        self._span_ms = span_ms  # the idempotency window of jobs completed with no result
        # burst mode: whether the worker still has work that may make jobs ready here (a
        # workflow's child running on another queue, whose outcome a hand-off delivers)
        self.burst_busy: Callable[[], Awaitable[bool]] | None = None
        self._order = order
        if order is not None:
            order.append(self)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._fetch_loop()]

    async def unblock(self) -> None:
        """End the fetch loop's BLPOP now (a token on this consumer's own wake list)."""
        await ring(self.redis, self._wake_key, f"the fetch loop of {self.keys.name}")

    async def _fetch_loop(self) -> None:
        """Take jobs until stopping (or, in burst mode, until the queue is drained).

        Takes are pipelined: up to TAKES_IN_FLIGHT calls at once, each for a chunk of the
        room in the slots, so the next jobs are on their way while the current ones run
        (one call at a time leaves the worker idle during every script, and Redis idle
        while the worker runs). A take that comes back short means the queue ran dry:
        once the other takes are back, block until a job is announced (in burst mode,
        check whether everything is done).
        """
        woken = False
        takes: set[asyncio.Task[TakeResult | None]] = set()
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            if self._held is not None:  # (once the other takes are back)
                await (self._slots.wait_change() if self._takes_out else self._wait_while_held())
                continue
            if self._dry_since is not None or self._failed:
                done, woken = await self._between_takes()
                if done:
                    return
                continue
            size = await self._reserve_take()
            if size:
                self._takes_out += 1
                take = loop.create_task(self._take(size, woken))
                takes.add(take)  # a reference, so the task is not collected mid-flight
                take.add_done_callback(takes.discard)
                take.add_done_callback(_log_take_crash)
                woken = False
        await self._withdraw()
        if takes:
            await asyncio.wait(takes)

    async def _between_takes(self) -> tuple[bool, bool]:
        """The queue ran dry or a take failed: wait for the other takes, pause after an
        error, or block until a job is announced. Returns (done: a burst worker has
        nothing left to do, woken: a notify token was consumed)."""
        if self._takes_out:  # let the other takes come back first
            await self._slots.wait_change()
            return False, False
        if self._failed:  # Redis error: pause, then try again
            self._failed, self._dry_since = False, None
            await wait_event(self.stopping, RETRY_PAUSE)
            return False, False
        landed_before, self._dry_since = self._dry_since or 0, None
        self._set_dry(True)
        if self.settings.burst:
            return await self._drained(landed_before), False
        woken = await self._wait_for_work()
        self._probing = True
        # A take that came back short meanwhile (the promoter's) said the queue was dry
        # before this wake-up: the next take decides anew. (Left set, it sent the loop back
        # to wait with the token spent and the job it announced still ready.)
        self._dry_since = None
        if woken:
            self._set_dry(False)
        return False, woken

    def _set_dry(self, dry: bool) -> None:
        if dry != self.dry:
            self.dry = dry
            if self._order is not None:
                self._order.changed()

    async def _reserve_take(self) -> int:
        """Wait for room for the next take (a chunk's worth while other takes are out, any
        room when none is) and reserve it; 0 when the loop has something else to do."""
        slots = self._slots
        while not (
            self.stopping.is_set() or self._failed or self._dry_since is not None or self._held
        ):
            if self._order is not None and self._order.ahead_busy(self):
                await self._order.wait(self.stopping)
                continue
            chunk = min(MAX_TAKE, max(MIN_TAKE_CHUNK, slots.capacity // TAKES_IN_FLIGHT))
            out = self._takes_out
            limit = 1 if self._probing else TAKES_IN_FLIGHT
            if out < limit and slots.room >= (chunk if out else 1):
                return slots.reserve(chunk)
            if not out and not self._acks.held and slots.reserve_beyond():
                return 1  # nothing of this queue in hand: one job past the capacity
            await slots.wait_change()
        return 0

    async def promote_due(self, limit: int) -> Promoted:
        """Promote up to ``limit`` due jobs, and take what there is room for in the same
        call: the promoter's call when a delayed job falls due, so it is leased one round
        trip after it is due (not a promote, then a notify token, then a take)."""
        behind = self._order is not None and self._order.ahead_busy(self)
        room = 0 if self.stopping.is_set() or behind else self._slots.reserve(MAX_TAKE)
        if not room and not behind and not self.stopping.is_set() and not self._acks.held:
            room = self._slots.reserve_beyond()  # (as _reserve_take: a due job goes ahead)
        if room:
            self._takes_out += 1
            result = await self._take(room, woken=False, promote=limit)
            if result is not None:
                return result.promoted
        return await leasing.promote(self.redis, self.keys, limit=limit, due_first=self._due_first)

    async def _take(self, limit: int, woken: bool, promote: int = 0) -> TakeResult | None:
        """One take call for ``limit`` reserved slots; admits the jobs it leases. None
        after an error (the fetch loop then pauses)."""
        self._take_calls += 1
        lease = f"{self._worker_id}:{self._take_calls}"
        landed_before = self._acks.landed
        started = time.perf_counter()
        forget, self._forget = self._forget, []
        try:
            result = await leasing.take(
                self.redis, self.keys, lease=lease, lease_ms=self.settings.lease_ms,
                limit=limit, result_ttl_ms=self._result_ttl_ms, plan=self._plan(limit),
                woken=woken, promote=promote, due_first=self._due_first,
                span_ms=self._span_ms, forget=forget,
            )  # fmt: skip
        except Exception as exc:  # RedisError, or a reply it could not parse
            logger.warning("taking jobs from %s failed: %s", self.keys.name, describe(exc))
            self._forget += forget  # the next take forgets them (or they expire)
            self._failed = True
            self._takes_out -= 1
            self._slots.unreserve(limit)
            return None
        self._takes_out -= 1
        self._forget.append(lease)  # its reply is here: a resend can no longer happen
        self._slots.size_lookahead(time.perf_counter() - started)
        if result.held:  # the queue's limits keep the rest in ready for now
            self._held, self._probing = result, True
        elif len(result.jobs) == limit:
            self._probing = False  # the queue has more: pipeline the takes
        elif self._dry_since is None or landed_before < self._dry_since:
            self._dry_since = landed_before
        if result.held:  # for a strict queue order, the queues after it may take meanwhile
            self._set_dry(True)
        elif result.jobs:
            self._set_dry(False)
        for job in result.jobs:  # first: their tasks then run before the fetch loop's next call
            self._inflight.admit(job, self._acks)
        self._slots.unreserve(limit - len(result.jobs))  # also wakes the fetch loop
        return result

    async def _wait_while_held(self) -> None:
        """The queue's limits held jobs back: wait until its rate allows the next start
        (by the Redis clock), or, under its concurrency cap, until one of this worker's
        jobs of the queue ends (another worker's, at the next look)."""
        held, self._held = self._held, None
        assert held is not None
        if held.held != HELD_BY_CONCURRENCY:
            until = (held.held * 1000 - held.promoted.now_us) / 1e6
            await wait_event(self.stopping, min(max(until, HELD_SLEEP[0]), HELD_SLEEP[1]))
            return
        self._acks.landing.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wait_first(self._acks.landing, self.stopping), HELD_LOOK)

    async def _wait_for_work(self) -> bool:
        """Block until a job is announced; True if a notify token was consumed.

        While it has room, the consumer first offers to be handed the queue's next new job
        (idle.lua): enqueue.lua then leases that job to it and pushes it onto the offer's
        direct list, which this BLPOP also waits on (first of its keys: a job handed
        before another was announced is popped first), so it starts one round trip after
        it was enqueued instead of after a wake-up and a take. A handed job is admitted
        and the consumer waits again, offering anew; any other wake-up withdraws the offer
        before the take that follows (a job handed meanwhile comes back with the
        withdrawal, ahead of what that take finds).
        """
        while True:
            direct = await self._make_offer()
            names = [*([direct] if direct else []), self.keys.notify, self._wake_key]
            try:
                popped = await self.redis.blpop(names, timeout=self.settings.idle_wait)
            except CLIENT_FAILURES as exc:
                logger.warning("waiting for jobs on %s failed: %s", self.keys.name, describe(exc))
                await self._withdraw()
                await wait_event(self.stopping, RETRY_PAUSE)
                return False
            if direct is None or popped is None or popped[0] != direct.encode():
                await self._withdraw()
                return popped is not None and popped[0] == self.keys.notify.encode()
            token, self._offer = self._offer, None  # the enqueue took the offer
            assert token is not None
            self._forget.append(token)  # (as for a take whose reply was read)
            self._admit_handed([(leasing.handed_job(cast("bytes", popped[1]), token), False)])
            if self.stopping.is_set():
                return False

    async def _make_offer(self) -> str | None:
        """Offer to be handed the next new job (see _wait_for_work) while the worker has a
        free slot and no queue of it must go first (strict order); the offer's direct
        list, or None. No slot is held for it (another queue of the worker may fill them
        meanwhile: a handed job then waits for a slot like a job taken ahead)."""
        if self.stopping.is_set() or self._slots.room < 1 or not self._leads():
            return None
        self._take_calls += 1
        token = f"{self._worker_id}:{self._take_calls}"
        hold = self.settings.idle_wait + OFFER_MARGIN
        forget, self._forget = self._forget, []
        self._offer = token  # from here on it may be out, reply or not
        self._offer_lapses = asyncio.get_running_loop().time() + hold
        try:
            await leasing.idle(
                self.redis, self.keys, token, lease_ms=self.settings.lease_ms,
                hold_ms=int(hold * 1000), forget=forget,
            )  # fmt: skip
        except CLIENT_FAILURES as exc:
            logger.warning("offering to take from %s failed: %s", self.keys.name, describe(exc))
            self._forget += forget  # the next call forgets them (or they expire)
            await self._withdraw()  # it may have been made: its reply was lost
            return None
        return self.keys.direct(token)

    def _leads(self) -> bool:
        """May this consumer be handed jobs whenever they come? Not behind another queue
        in a strict order (that queue may have work by then)."""
        return self._order is None or self._order.first() is self

    async def _withdraw(self) -> None:
        """Withdraw the offer that is out, if any, and admit what was handed to it. A
        withdrawal is safe to resend: it is retried until it lands or the offer lapses
        (after which nothing more can be handed to it; a job handed before is leased to
        this worker, and reclaimed when that lease expires, as after a lost take), and
        while stopping for STOP_WITHDRAWING at most (a stop is not held by a dead Redis)."""
        token, self._offer = self._offer, None
        if token is None:
            return
        loop = asyncio.get_running_loop()
        lapses = self._offer_lapses
        while True:
            if self.stopping.is_set():
                lapses = min(lapses, loop.time() + STOP_WITHDRAWING)
            try:
                handed = await leasing.idle(
                    self.redis, self.keys, token, lease_ms=self.settings.lease_ms, hold_ms=0
                )
                break
            except CLIENT_FAILURES as exc:
                if loop.time() >= lapses:
                    logger.warning(
                        "withdrawing an offer on %s failed (it lapses by itself): %s",
                        self.keys.name, describe(exc),
                    )  # fmt: skip
                    return
                await asyncio.sleep(RETRY_PAUSE / 10)
        self._forget.append(token)
        self._admit_handed(handed)

    def _admit_handed(self, handed: list[tuple[Taken, bool]]) -> None:
        """Jobs handed to an offer: they start if a slot is free, else wait for one while
        jobs end fast (a lookahead, as for jobs taken ahead); a worker that filled its
        slots with long jobs since it offered gives them back to ready at once, for an
        idle worker to take. One cancelled since it was handed (aborted) ends cancelled."""
        for job, aborted in handed:
            if aborted or (self._slots.room < 1 and not self._slots.lookahead):
                self._inflight.refuse(job, self._acks, aborted=aborted)
            else:
                self._inflight.admit(job, self._acks, reserved=False)

    async def _drained(self, landed_before: int) -> bool:
        """Burst mode: True once nothing is ready, running, unacked, or due.

        An ack that landed while the empty take was in flight may have put a job back in
        ready (a retry without delay, a release): then take once more before deciding.
        """
        acks = self._acks
        if acks.landed != landed_before:
            return False
        if not acks.idle:
            acks.landing.clear()
            await wait_first(acks.landing, self.stopping)
            return False
        try:
            promoted = await leasing.promote(
                self.redis, self.keys, limit=1000, due_first=self._due_first
            )
            counts = await reads.counts(self.redis, self.keys)
            if counts.paused:
                return True  # nothing will be taken: a burst worker leaves it be
            if promoted.count or counts.ready:
                return False  # (the promoter may have just made a job ready)
            if await self._retries_pending(promoted.now_ms):
                return False
            if self.burst_busy is not None and await self.burst_busy():
                await wait_event(self.stopping, BURST_LOOK)  # work elsewhere may come here
                return False
            return True
        except CLIENT_FAILURES:
            return False

    async def _retries_pending(self, now_ms: int) -> bool:
        """Burst mode: are delayed retries of jobs this worker ran still to come? If so,
        wait until the first is due (a second at most, then look again) and say so: the
        work started is not done. The promoter takes each when it falls due."""
        acks = self._acks
        if not self.settings.wait_retries or not acks.retrying:
            return False
        due = await reads.due_times(self.redis, self.keys, acks.retrying)
        acks.retrying = set(due)
        if due:
            until = (min(due.values()) - now_ms) / 1000
            await wait_event(self.stopping, min(RETRY_WAIT_MAX, max(0.0, until)))
        return bool(due)


class StrictOrder:
    """Strict priority between a worker's queues, in the order they were listed: a queue
    takes only while every queue before it is dry (ran out of work, as its consumer
    knows it). Running jobs are never preempted; this orders the takes."""

    def __init__(self) -> None:
        self._queues: list[QueueConsumer] = []
        self._changed = asyncio.Event()

    def append(self, consumer: QueueConsumer) -> None:
        self._queues.append(consumer)

    def first(self) -> QueueConsumer | None:
        """The queue that goes before every other."""
        return self._queues[0] if self._queues else None

    def ahead_busy(self, consumer: QueueConsumer) -> bool:
        for other in self._queues:
            if other is consumer:
                return False
            if not (other.dry or other.stopping.is_set()):
                return True
        return False

    def changed(self) -> None:
        """A queue went dry, or got work: whoever waits behind it looks again."""
        self._changed.set()

    async def wait(self, stopping: asyncio.Event) -> None:
        self._changed.clear()
        await wait_first(self._changed, stopping)


def _log_take_crash(take: asyncio.Task[TakeResult | None]) -> None:
    if not take.cancelled() and (exc := take.exception()) is not None:
        logger.error("a take task crashed: %s", describe(exc), exc_info=exc)
