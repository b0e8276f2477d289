"""How a queue's consumer waits when the queue ran dry: blocked on the queue's notify list
(and its own wake list) and, while the worker has a free slot, offering to be handed the
queue's next new job (``idle.lua``).

While an offer is out, ``enqueue.lua`` leases the next new job to it and pushes it onto
the offer's direct list, which the same BLPOP waits on (first of its keys: a job handed
before another was announced is popped first), so the job starts one round trip after it
was enqueued instead of after a wake-up and a take. A handed job is admitted and the wait
goes on with a new offer; any other wake-up withdraws the offer before the consumer takes
(a job handed meanwhile comes back with the withdrawal, ahead of what that take finds).

Decided here: when an offer is made (a free slot, and first in a strict queue order), what
becomes of a job handed to it (admitted, given back, or ended cancelled), and how long a
withdrawal is retried. ``Tokens`` are the lease tokens a consumer's takes and offers share.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from ..store import deadline
from ..store.scripts import leasing
from .loops import CLIENT_FAILURES, RETRY_PAUSE, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis

    from ..core.lifecycle import Taken
    from ..core.settings import WorkerSettings
    from .acks import AckBatcher
    from .inflight import InFlight

logger = logging.getLogger(__name__)

OFFER_MARGIN = 2.0  # seconds an idle offer outlives the BLPOP that waits for it
STOP_WITHDRAWING = 0.5  # seconds a stopping consumer retries withdrawing its offer


class Tokens:
    """The lease tokens of one consumer's calls (each take and each offer mints one), and
    the ones whose reply was read: the next call tells Redis to forget those (a token's
    ``take:<token>`` list keeps its reply for a resend until then, or until it expires)."""

    def __init__(self, worker_id: str) -> None:
        self._worker_id = worker_id
        self._minted = 0
        self._replied: list[str] = []

    @property
    def unforgotten(self) -> int:
        """How many replied tokens wait for the next call to forget them."""
        return len(self._replied)

    def mint(self) -> str:
        self._minted += 1
        return f"{self._worker_id}:{self._minted}"

    def replied(self, token: str) -> None:
        """The reply of ``token``'s call is here: a resend can no longer happen."""
        self._replied.append(token)

    def to_forget(self) -> list[str]:
        """The tokens the call about to be sent forgets (handed over to it)."""
        forget, self._replied = self._replied, []
        return forget

    def unsent(self, forget: list[str]) -> None:
        """The call that carried ``forget`` failed: the next call forgets them."""
        self._replied += forget


class IdleWait:
    """One consumer's wait for work, and the offer it makes meanwhile (at most one out)."""

    def __init__(
        self,
        redis: Redis,
        acks: AckBatcher,
        inflight: InFlight,
        tokens: Tokens,
        *,
        settings: WorkerSettings,
        wake_key: str,
        stopping: asyncio.Event,
        leads: Callable[[], bool],
    ) -> None:
        self.redis, self.keys, self.settings = redis, acks.keys, settings
        self._acks, self._inflight, self._slots = acks, inflight, inflight.slots
        self._tokens, self._wake_key = tokens, wake_key
        self._stopping = stopping  # the consumer's
        self._leads = leads  # may this queue be handed jobs whenever they come (strict order)?
        self._offer: str | None = None  # the token of the offer, while out
        self._lapses = 0.0  # loop time after which that offer can take no job
        name = self.keys.name
        self._waits = Outage(logger, f"waiting for jobs on {name}", stopping.is_set)
        self._offers = Outage(logger, f"offering to take from {name}", stopping.is_set)
        self._withdrawals = Outage(
            logger,
            f"withdrawing offers on {name}",
            stopping.is_set,
            then="they lapse by themselves",
        )

    async def wait(self) -> bool:
        """Block until a job is announced (admitting what is handed to offers meanwhile);
        True if a notify token was consumed (the take that follows says so)."""
        while True:
            direct = await self._make_offer()
            names = [*([direct] if direct else []), self.keys.notify, self._wake_key]
            try:
                popped = await self.redis.blpop(names, timeout=self.settings.idle_wait)
            except CLIENT_FAILURES as exc:
                self._waits.failed(exc)
                await self.withdraw()
                await wait_event(self._stopping, RETRY_PAUSE)
                return False
            self._waits.ended()
            if direct is None or popped is None or popped[0] != direct.encode():
                await self.withdraw()
                return popped is not None and popped[0] == self.keys.notify.encode()
            token, self._offer = self._offer, None  # the enqueue took the offer
            assert token is not None
            self._tokens.replied(token)  # (as for a take whose reply was read)
            self.admit_handed([(leasing.handed_job(cast("bytes", popped[1]), token), False)])
            if self._stopping.is_set():
                return False

    async def _make_offer(self) -> str | None:
        """Offer to be handed the next new job while the worker has a free slot and no
        queue of it must go first (strict order); the offer's direct list, or None. No
        slot is held for it (another queue of the worker may fill them meanwhile: a handed
        job then waits for a slot like a job taken ahead)."""
        if self._stopping.is_set() or self._slots.room < 1 or not self._leads():
            return None
        token = self._tokens.mint()
        hold = self.settings.idle_wait + OFFER_MARGIN
        forget = self._tokens.to_forget()
        self._offer = token  # from here on it may be out, reply or not
        self._lapses = asyncio.get_running_loop().time() + hold
        try:
            await leasing.idle(
                self.redis, self.keys, token, lease_ms=self.settings.lease_ms,
                hold_ms=int(hold * 1000), forget=forget,
            )  # fmt: skip
        except CLIENT_FAILURES as exc:
            self._offers.failed(exc)
            self._tokens.unsent(forget)  # the next call forgets them (or they expire)
            await self.withdraw()  # it may have been made: its reply was lost
            return None
        self._offers.ended()
        return self.keys.direct(token)

    async def withdraw(self) -> None:
        """Withdraw the offer that is out, if any, and admit what was handed to it. A
        withdrawal is safe to resend: it is retried until it lands or the offer lapses
        (after which nothing more can be handed to it; a job handed before is leased to
        this worker, and reclaimed when that lease expires, as after a lost take), and
        while stopping for STOP_WITHDRAWING at most (a stop is not held by a dead Redis)."""
        token, self._offer = self._offer, None
        if token is None:
            return
        loop = asyncio.get_running_loop()
        lapses = self._lapses
        while True:
            if self._stopping.is_set():
                lapses = min(lapses, loop.time() + STOP_WITHDRAWING)
            try:
                with deadline.bound(max(0.0, lapses - loop.time())):  # (no retry past it)
                    handed = await leasing.idle(
                        self.redis, self.keys, token, lease_ms=self.settings.lease_ms, hold_ms=0
                    )
                break
            except CLIENT_FAILURES as exc:
                if loop.time() >= lapses:
                    self._withdrawals.failed(exc)
                    return
                await asyncio.sleep(RETRY_PAUSE / 10)
        self._withdrawals.ended()
        self._tokens.replied(token)
        self.admit_handed(handed)

    def admit_handed(self, handed: list[tuple[Taken, bool]]) -> None:
        """Jobs handed to an offer: they start if a slot is free, else wait for one while
        jobs end fast (a lookahead, as for jobs taken ahead); a worker that filled its
        slots with long jobs since it offered gives them back to ready at once, for an
        idle worker to take. One cancelled since it was handed (aborted) ends cancelled."""
        for job, aborted in handed:
            if aborted or (self._slots.room < 1 and not self._slots.lookahead):
                self._inflight.refuse(job, self._acks, aborted=aborted)
            else:
                self._inflight.admit(job, self._acks, reserved=False)
