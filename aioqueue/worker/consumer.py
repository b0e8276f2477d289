"""Taking the jobs of one queue into the worker's free slots.

A QueueConsumer's fetch loop takes up to the free slots (plus the lookahead, see
``slots``) in a few concurrent script calls; when nothing is ready, it waits for work
(``idle``: blocked on the queue's notify list, offering meanwhile to be handed the next
new job). Each taken job is admitted to the in-flight jobs, whose owner holds, runs and
settles it; the consumer never sees it again.

The fetch loop's state is what its take calls reported (``takes.TakeState``); from it
the loop reads its next step: take, let the other takes come back, wait while the
queue's limits hold jobs back, pause after a failed take, or wait for work once the
queue ran dry (in burst mode: end once the work is done).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..core.errors import describe
from ..core.lifecycle import HELD_BY_CONCURRENCY
from ..core.priorities import planner
from ..store import reads
from ..store.scripts import leasing
from .idle import IdleWait, Tokens
from .loops import CLIENT_FAILURES, RETRY_PAUSE, Component, ring, wait_event
from .outages import Outage
from .takes import Step, TakeState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterable

    from redis.asyncio import Redis

    from ..core.lifecycle import Promoted, TakeResult
    from ..core.settings import WorkerSettings
    from .acks import AckBatcher
    from .inflight import InFlight
    from .order import StrictOrder

logger = logging.getLogger(__name__)

MAX_TAKE = 1000  # jobs per take call: bounds its run time inside Redis
TAKES_IN_FLIGHT = 4  # take calls out at once: the next jobs come while the current run
MIN_TAKE_CHUNK = 16  # with a take out, wait for this much room: smaller calls cost more
RETRY_WAIT_MAX = 1.0  # burst mode: seconds at most between looks at retries still to come
HELD_LOOK = 0.1  # seconds between takes while the queue's concurrency cap holds jobs back
HELD_SLEEP = (0.001, 1.0)  # a rate's hold: sleep at least, at most (new limits are seen)
BURST_LOOK = 0.05  # seconds between looks of a dry burst consumer while the worker is busy


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
        burst_busy: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        super().__init__()
        self.redis, self.keys, self.settings = redis, acks.keys, settings
        self._acks, self._inflight, self._slots = acks, inflight, inflight.slots
        self._wake_key = self.keys.wake(worker_id)
        self.name = f"the fetch loop of {self.keys.name}"
        self._take_outage = Outage(
            logger, f"taking jobs from {self.keys.name}", self.stopping.is_set
        )
        self._result_ttl_ms = result_ttl_ms
        self._plan = planner(settings.priority_mode, settings.priority_weights)
        self._due_first = due_first  # due delayed jobs go ahead of the ready ones
        self._span_ms = span_ms  # the idempotency window of jobs completed with no result
        # burst mode: whether the worker still has work that may make jobs ready here (a
        # workflow's child running on another queue, whose outcome a hand-off delivers)
        self._burst_busy = burst_busy
        self._order = order
        self._state = TakeState()
        self._takes: set[asyncio.Task[TakeResult | None]] = set()  # (kept from collection)
        self._tokens = Tokens(worker_id)
        self._idle = IdleWait(
            redis, acks, inflight, self._tokens, settings=settings, wake_key=self._wake_key,
            stopping=self.stopping, leads=self._leads,
        )  # fmt: skip
        self._dry = False
        if order is not None:
            order.append(self)

    @property
    def dry(self) -> bool:
        """The queue ran out of work (as far as this worker knows)."""
        return self._dry

    @property
    def taking(self) -> bool:
        """A take call is out: the jobs it leases are neither ready nor running yet."""
        return self._state.out > 0

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._fetch_loop()]

    async def unblock(self) -> None:
        """End the fetch loop's BLPOP now (a token on this consumer's own wake list)."""
        await ring(self.redis, self._wake_key)

    async def _fetch_loop(self) -> None:
        """Take jobs until stopping (or, in burst mode, until the queue is drained).

        Takes are pipelined: up to TAKES_IN_FLIGHT calls at once, each for a chunk of the
        room in the slots, so the next jobs are on their way while the current ones run
        (one call at a time leaves the worker idle during every script, and Redis idle
        while the worker runs). A take that comes back short means the queue ran dry:
        once the other takes are back, wait for work (in burst mode, check whether
        everything is done).
        """
        while not self.stopping.is_set():
            step = self._state.step()
            if step is Step.TAKE:
                await self._send_take()
            elif step is Step.AWAIT:
                await self._slots.wait_change()  # (a take coming back gives back room)
            elif step is Step.HELD:
                await self._wait_while_held()
            elif step is Step.FAILED:  # Redis error: pause, then try again
                self._state.end_failure()
                await wait_event(self.stopping, RETRY_PAUSE)
            elif self.settings.burst:
                if await self._drained(self._dried_up()):
                    break
            else:
                await self._wait_for_work()
        await self._idle.withdraw()
        if self._takes:
            await asyncio.wait(self._takes)

    async def _send_take(self) -> None:
        """Reserve room and send a take, in a task of its own (none if the loop has
        something else to do first)."""
        size = await self._reserve_take()
        if not size:
            return
        self._state.sent()
        take = asyncio.get_running_loop().create_task(self._take(size, self._state.spend_wake()))
        self._takes.add(take)
        take.add_done_callback(self._takes.discard)
        take.add_done_callback(_log_take_crash)

    def _dried_up(self) -> int:
        """The queue ran dry: say so (to a strict order); the acks landed by then."""
        landed_before = self._state.end_dry_spell()
        self._set_dry(True)
        return landed_before

    async def _wait_for_work(self) -> None:
        """The queue ran dry: block until a job is announced (``idle``)."""
        self._dried_up()
        woken = await self._idle.wait()
        self._state.woke(woken)
        if woken:
            self._set_dry(False)

    def _set_dry(self, dry: bool) -> None:
        if dry != self._dry:
            self._dry = dry
            if self._order is not None:
                self._order.changed()

    def _leads(self) -> bool:
        """May this consumer be handed jobs whenever they come? Not behind another queue
        in a strict order (that queue may have work by then)."""
        return self._order is None or self._order.first() is self

    async def _reserve_take(self) -> int:
        """Wait for room for the next take (a chunk's worth while other takes are out, any
        room when none is) and reserve it; 0 when the loop has something else to do."""
        slots, state = self._slots, self._state
        while not self.stopping.is_set() and state.step() is Step.TAKE:
            if self._order is not None and self._order.ahead_busy(self):
                await self._order.wait(self.stopping)
                continue
            chunk = min(MAX_TAKE, max(MIN_TAKE_CHUNK, slots.capacity // TAKES_IN_FLIGHT))
            out = state.out
            limit = 1 if state.probing else TAKES_IN_FLIGHT
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
            self._state.sent()
            result = await self._take(room, woken=False, promote=limit)
            if result is not None:
                return result.promoted
        return await leasing.promote(self.redis, self.keys, limit=limit, due_first=self._due_first)

    async def _take(self, limit: int, woken: bool, promote: int = 0) -> TakeResult | None:
        """One take call for ``limit`` reserved slots; admits the jobs it leases. None
        after an error (the fetch loop then pauses)."""
        lease = self._tokens.mint()
        landed_before = self._acks.landed
        started = time.perf_counter()
        forget = self._tokens.to_forget()
        try:
            result = await leasing.take(
                self.redis, self.keys, lease=lease, lease_ms=self.settings.lease_ms,
                limit=limit, result_ttl_ms=self._result_ttl_ms, plan=self._plan(limit),
                woken=woken, promote=promote, due_first=self._due_first,
                span_ms=self._span_ms, forget=forget,
            )  # fmt: skip
        except Exception as exc:  # RedisError, or a reply it could not parse
            self._take_outage.failed(exc)
            self._tokens.unsent(forget)  # the next call forgets them (or they expire)
            self._state.take_failed()
            self._slots.unreserve(limit)
            return None
        self._tokens.replied(lease)  # its reply is here: a resend can no longer happen
        self._take_outage.ended()
        self._slots.size_lookahead(time.perf_counter() - started)
        self._state.took(result, limit, landed_before, woken=woken)
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
        held = self._state.end_hold()
        if held.held != HELD_BY_CONCURRENCY:
            until = (held.held * 1000 - held.promoted.now_us) / 1e6
            await wait_event(self.stopping, min(max(until, HELD_SLEEP[0]), HELD_SLEEP[1]))
            return
        await self._acks.next_landing(self.stopping, timeout=HELD_LOOK)

    async def _drained(self, landed_before: int) -> bool:
        """Burst mode: True once nothing is ready, running, unacked, or due.

        An ack that landed while the empty take was in flight may have put a job back in
        ready (a retry without delay, a release): then take once more before deciding.
        """
        acks = self._acks
        if acks.landed != landed_before:
            return False
        if not acks.idle:
            await acks.next_landing(self.stopping)
            return False
        try:
            # First whether work elsewhere in the worker may come here; then, that settled,
            # what is here (the other way round, a job handed over between the two looks
            # would be missed).
            if self._burst_busy is not None and await self._burst_busy():
                # (the worker's last jobs ending here land as acks: look again then)
                await acks.next_landing(self.stopping, timeout=BURST_LOOK)
                return False
            promoted = await leasing.promote(
                self.redis, self.keys, limit=1000, due_first=self._due_first
            )
            counts = await reads.counts(self.redis, self.keys, top_tenants=0)
            if counts.paused:
                return True  # nothing will be taken: a burst worker leaves it be
            if promoted.count or counts.ready:
                if not promoted.count and counts.tenants_held:  # (their leases are elsewhere)
                    await wait_event(self.stopping, BURST_LOOK)
                return False  # (the promoter may have just made a job ready)
            return not await self._retries_pending(promoted.now_ms)
        except CLIENT_FAILURES:
            return False

    async def _retries_pending(self, now_ms: int) -> bool:
        """Burst mode: are delayed retries of jobs this worker ran still to come? If so,
        wait until the first is due (a second at most, then look again) and say so: the
        work started is not done. The promoter takes each when it falls due."""
        acks = self._acks
        if not self.settings.wait_retries or not acks.retrying:
            return False
        asked = set(acks.retrying)
        due = await reads.due_times(self.redis, self.keys, asked)
        acks.retries_gone(asked.difference(due))
        if due:
            until = (min(due.values()) - now_ms) / 1000
            await wait_event(self.stopping, min(RETRY_WAIT_MAX, max(0.0, until)))
        return bool(due)


def any_taking(consumers: Iterable[object]) -> bool:
    """Burst mode: is a take call out on any of these queues?"""
    return any(isinstance(consumer, QueueConsumer) and consumer.taking for consumer in consumers)


async def any_ready(consumers: Iterable[object]) -> bool:
    """Burst mode: has any of these queues a job ready to take (not paused)? Run, it may
    enqueue on another of them (a workflow's next step), whose consumer must not have
    ended by then."""
    for consumer in consumers:
        if not isinstance(consumer, QueueConsumer):
            continue
        counts = await reads.counts(consumer.redis, consumer.keys, top_tenants=0)
        if counts.ready and not counts.paused:
            return True
    return False


def _log_take_crash(take: asyncio.Task[TakeResult | None]) -> None:
    if not take.cancelled() and (exc := take.exception()) is not None:
        logger.error("a take task crashed: %s", describe(exc), exc_info=exc)
