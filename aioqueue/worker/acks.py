"""The jobs a worker holds in one queue (or one topic's subscriber group), from take until
their ack lands in Redis.

A job is *held* from the take call that leased it until the ack of its settlement lands:
the lease keeper renews what is held, and nothing else may forget a job. Settlements are
batched: one ack script call for everything that finished while the previous call was in
flight, so an idle worker acks at once and a busy one acks hundreds of jobs per round trip.
``Batcher`` is that machinery; ``AckBatcher`` acks a queue's jobs (``ack.lua``), and
``subscriptions.TopicAcks`` a subscriber group's messages (``topic_ack.lua``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from ..core.errors import LeaseLost
from ..store import deadline
from ..store.scripts import leasing
from .loops import CLIENT_FAILURES, RETRY_PAUSE, Component, wait_first
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable, Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys
    from ..core.lifecycle import Settlement, Taken

logger = logging.getLogger(__name__)

MAX_ACK_BATCH = 500  # bounds one ack script's run time inside Redis
MAX_EXTEND_BATCH = 1000  # bounds one lease renewal's run time inside Redis
FLUSH_WAIT = 5.0  # seconds a stop tries to land the last acks (the worker: call_timeout)


class Batcher(Component):
    """Holds leased jobs and settles them in batches (``_ack`` sends one batch).
    ``flush_wait``: how long a stop tries to land the last acks (``stop``)."""

    def __init__(
        self,
        redis: Redis,
        name: str,
        *,
        track_retries: bool = False,
        flush_wait: float = FLUSH_WAIT,
    ) -> None:
        super().__init__()
        self.redis = redis
        self.name = name  # the queue's (or the subscriber group's), for logs and observers
        self.stop_wait = flush_wait
        self.held: dict[bytes, Taken] = {}  # leased to this worker until the ack lands
        self.unsettled = 0  # held and not yet settled: running, or waiting for a slot
        self.landed = 0  # ack calls that landed so far
        self._landing = asyncio.Event()  # set when an ack call lands (and at stop)
        self.retrying: set[bytes] = set()  # ids retried with a delay (if tracked: burst)
        self._track_retries = track_retries
        self._pending: list[Settlement] = []
        self._sending: list[Settlement] = []  # the batch of the ack call in flight
        self._wake = asyncio.Event()
        self._in_flight = False
        self._give_up_at = 0.0
        self._said_unacked = False  # said so (once per stop or flush)
        self._acking = Outage(
            logger, f"acking jobs of {name}", self.stopping.is_set, then="kept, to be sent again"
        )
        self._renewing = Outage(logger, f"renewing leases on {name}", self.stopping.is_set)

    @property
    def idle(self) -> bool:
        """Nothing held unsettled, nothing waiting to be acked, no ack in flight."""
        return not self.unsettled and not self._pending and not self._in_flight

    def hold(self, job: Taken) -> None:
        """A take call leased ``job`` to this worker."""
        self.held[job.id] = job
        self.unsettled += 1

    def settle(self, settlement: Settlement) -> None:
        """A held job ended (ran, or was handed back): queue its ack."""
        self.unsettled -= 1
        if self._track_retries and settlement.outcome == "retry" and settlement.delay_ms > 0:
            self.retrying.add(settlement.id)
        self._pending.append(settlement)
        self._wake.set()

    async def next_landing(self, *also: asyncio.Event, timeout: float | None = None) -> None:
        """Wait until the next ack call lands, one of ``also`` is set, or ``timeout``
        seconds pass."""
        self._landing.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wait_first(self._landing, *also), timeout)

    def retries_gone(self, job_ids: Iterable[bytes]) -> None:
        """Of the tracked retries, these are no longer scheduled (they ran, or left)."""
        self.retrying.difference_update(job_ids)

    async def report_progress(self, taken: Taken, data: bytes) -> bool:
        """Record a held job's progress (JSON); False once its lease is not held."""
        raise NotImplementedError

    async def renew(self, lease_ms: int) -> list[bytes]:
        """Renew the leases held (a failure is logged); the ids of the jobs whose abort
        was asked meanwhile."""
        raise NotImplementedError

    async def _ack(self, batch: list[Settlement]) -> list[bool]:
        """Send one batch: True per job settled, False where its lease was lost."""
        raise NotImplementedError

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    def stop(self) -> None:
        """Ack what is pending, then end.

        If Redis does not take the acks within ``flush_wait`` (``stop_wait``: stalled, or
        gone), give up: those jobs stay active in Redis and come back when their leases
        expire, so none is lost (``left_behind``: a call still in flight is left to end
        by itself; its acks may land yet).
        """
        super().stop()
        self._give_up_at = asyncio.get_running_loop().time() + self.stop_wait
        self._wake.set()
        self._landing.set()

    async def flush(self) -> None:
        """Stopped: ack what was settled since (jobs the shutdown left running in threads:
        ``inflight``), giving up as ``stop`` does."""
        await self.join()
        self._give_up_at = asyncio.get_running_loop().time() + self.stop_wait
        self._said_unacked = False
        await self._run()

    def left_behind(self) -> str | None:
        self._give_up_at = float("-inf")  # a loop left behind sends nothing more
        self._give_up()
        return None  # (said there)

    async def _run(self) -> None:
        while self._pending or not self.stopping.is_set():
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._pending[:MAX_ACK_BATCH]
            del self._pending[:MAX_ACK_BATCH]
            if not await self._send(batch) and await self._gave_up():
                return

    async def _send(self, batch: list[Settlement]) -> bool:
        """One ack call; False (the batch kept for the next try) if Redis failed. Once
        stopping, its retries end when the stop gives up (``deadline.bound``)."""
        self._in_flight, self._sending = True, batch
        try:
            if self.stopping.is_set():
                with deadline.bound(self._give_up_at - asyncio.get_running_loop().time()):
                    settled = await self._ack(batch)
            else:
                settled = await self._ack(batch)
        except CLIENT_FAILURES as exc:  # keep them: the guarantee needs every ack to land
            self._acking.failed(exc)
            self._pending[:0] = batch
            return False
        finally:
            self._in_flight, self._sending = False, []
        self._acking.ended()
        self._landed(batch, settled)
        return True

    def _landed(self, batch: Sequence[Settlement], settled: Sequence[bool]) -> None:
        for settlement, ok in zip(batch, settled, strict=True):
            self.held.pop(settlement.id, None)
            if not ok:
                job_id = settlement.id.decode("utf-8", "backslashreplace")
                logger.warning("%s", LeaseLost(job_id, self.name, settlement.outcome))
        self.landed += 1
        self._landing.set()

    async def _gave_up(self) -> bool:
        """After a failed ack: pause before the next try; True when stopping has waited
        long enough for Redis to come back. Looked at after the pause too: a stop asked
        meanwhile may have given up already, and a try past it could land once the
        server is back, after the worker said the jobs would run again."""
        if not self._out_of_time():
            await asyncio.sleep(RETRY_PAUSE)
            if not self._out_of_time():
                return False
        self._give_up()
        return True

    def _out_of_time(self) -> bool:
        return self.stopping.is_set() and asyncio.get_running_loop().time() >= self._give_up_at

    def _give_up(self) -> None:
        """Say (once) which jobs the stop leaves unacked, and what becomes of them."""
        unacked = [*self._sending, *self._pending]
        if self._said_unacked or not unacked:
            return
        self._said_unacked = True
        ids = [s.id.decode("utf-8", "backslashreplace") for s in unacked]
        logger.error(
            "giving up acking %d job(s) of %s: Redis did not take them within %gs "
            "(call_timeout) of the stop: %s%s. They stay active in Redis and go back to the "
            "queue when their leases expire, so they run again (a finished one twice)",
            len(ids), self.name, self.stop_wait, ", ".join(ids[:5]),
            " and more" if len(ids) > 5 else "",
        )  # fmt: skip


class AckBatcher(Batcher):
    """Holds one queue's leased jobs and settles them in batches (``ack.lua``)."""

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        result_ttl_ms: int,
        kept_ms: int | None = None,
        keep_payload: bool = False,
        history_ms: int = 0,
        track_retries: bool = False,
        on_handoff: Callable[[], None] | None = None,
        flush_wait: float = FLUSH_WAIT,
    ) -> None:
        super().__init__(redis, keys.name, track_retries=track_retries, flush_wait=flush_wait)
        self.keys, self._result_ttl_ms = keys, result_ttl_ms
        self._kept_ms, self._keep_payload = kept_ms, keep_payload
        self.history_ms = history_ms
        self._on_handoff = on_handoff  # an ack handed an outcome off to another queue

    async def report_progress(self, taken: Taken, data: bytes) -> bool:
        if taken.id not in self.held:
            return False
        return await leasing.progress(self.redis, self.keys, taken, data)

    async def renew(self, lease_ms: int) -> list[bytes]:
        held, aborted = [(job.id, job.lease) for job in self.held.values()], []
        for start in range(0, len(held), MAX_EXTEND_BATCH):
            batch = held[start : start + MAX_EXTEND_BATCH]
            try:
                extended = await leasing.extend(self.redis, self.keys, batch, lease_ms=lease_ms)
            except CLIENT_FAILURES as exc:
                self._renewing.failed(exc)
                continue
            self._renewing.ended()
            aborted += extended.aborted
            for job_id in extended.lost:
                logger.warning(
                    "job %s of %s: lease lost while running (stalled past its lease?)",
                    job_id.decode("utf-8", "backslashreplace"), self.name,
                )  # fmt: skip
        return aborted

    async def _ack(self, batch: list[Settlement]) -> list[bool]:
        return await leasing.ack(
            self.redis, self.keys, batch, result_ttl_ms=self._result_ttl_ms,
            kept_ms=self._kept_ms, keep_payload=self._keep_payload, history_ms=self.history_ms,
            on_handoff=self._on_handoff,
        )  # fmt: skip
