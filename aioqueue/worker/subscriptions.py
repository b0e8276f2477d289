"""Running a topic's subscriber group: its messages as jobs of this worker.

A ``TopicConsumer`` reads new messages for its group (``XREADGROUP``, blocking while there
are none, woken at shutdown through a wake stream of its own) and admits each to the
worker's in-flight jobs as a job of the subscriber's task, so the subscriber runs under
the same slots, timeouts, middleware, hooks and observers as any task. Its maintenance
loop renews the leases of what the worker holds (the group's pending list names this
worker) and claims what other workers left behind (lease run out, or a retry now due).
``TopicAcks`` settles the outcomes in batches through ``topic_ack.lua``, which also trims
what every group has processed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError, ResponseError

from ..core.lifecycle import Settlement, Taken
from ..core.payload import encode_error
from ..store import deadline, reads
from ..store.scripts import topics
from ..store.streams import DEAD_MAX, create_group
from .acks import FLUSH_WAIT, Batcher
from .loops import CLIENT_FAILURES, RETRY_PAUSE, STOP_WAIT, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from redis.asyncio import Redis

    from ..core.handlers import Subscriber, TaskOptions
    from ..core.keys import TopicKeys
    from ..core.settings import WorkerSettings
    from .inflight import InFlight

logger = logging.getLogger(__name__)

MAX_READ = 500  # messages per read: bounds one reply
MAINTAIN_EVERY = 0.5  # seconds between claims of messages left behind (and due retries)
WAKE_TTL_MS = 600_000  # the wake stream outlives a crashed worker by this much; renewed
_NOT_OURS = encode_error("PayloadError", "not an aioqueue message: the entry has no body", "")


def _json_error(body: bytes) -> bytes | None:
    """The dead letter's error for a body that is not JSON (batch mode checks each)."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return encode_error("PayloadError", f"message body is not valid JSON: {exc}", "")
    return None


class TopicAcks(Batcher):
    """Holds a subscriber group's messages leased to this worker; settles them in
    batches."""

    def __init__(
        self,
        redis: Redis,
        keys: TopicKeys,
        group: str,
        consumer: str,
        *,
        lease_ms: int,
        options: TaskOptions,
        flush_wait: float = FLUSH_WAIT,
    ) -> None:
        super().__init__(redis, f"{keys.name}/{group}", flush_wait=flush_wait)
        self.keys, self.group, self.consumer, self.lease_ms = keys, group, consumer, lease_ms
        self._options = options
        self._batches: dict[bytes, list[Taken]] = {}  # batch id -> its messages
        self.settling: set[bytes] = set()  # held, settled, the ack not landed: not renewed

    def _landed(self, batch: Sequence[Settlement], settled: Sequence[bool]) -> None:
        super()._landed(batch, settled)
        for settlement in batch:
            self.settling.discard(settlement.id)

    def add_batch(self, batch_id: bytes, messages: list[Taken]) -> None:
        """A batch of messages about to be admitted as one run under ``batch_id``."""
        self._batches[batch_id] = messages

    def hold(self, job: Taken) -> None:
        """Hold a message, or each message of a batch (leases are per message)."""
        messages = self._batches.get(job.id)
        if messages is None:
            super().hold(job)
            return
        for message in messages:
            self.held[message.id] = message
        self.unsettled += 1

    def settle(self, settlement: Settlement) -> None:
        """A run ended: a batch's outcome settles each of its messages, by its own
        attempts (one with none left is dead, not retried)."""
        messages = self._batches.pop(settlement.id, None)
        if messages is None:
            self.settling.add(settlement.id)
            super().settle(settlement)
            return
        self.unsettled -= 1
        for message in messages:
            outcome = settlement.outcome
            out_of_attempts = 0 <= self._options.max_attempts <= message.attempts
            if outcome == "retry" and out_of_attempts:
                outcome = "bury" if self._options.dead_letter else "fail"
            self.settling.add(message.id)
            self._pending.append(
                Settlement(message.id, message.lease, outcome, settlement.data, settlement.delay_ms)
            )
        self._wake.set()

    async def report_progress(self, taken: Taken, data: bytes) -> bool:
        """Messages keep no progress (a subscriber's ``set_progress`` records nothing)."""
        return False

    async def renew(self, lease_ms: int) -> list[bytes]:
        """Renew the leases of the held messages still running or waiting (an ack in
        flight may land before this renewal). A message's lease is its pending entry's
        idle time: ``lease_ms`` is the group's own. No aborts on topics."""
        held = [entry_id for entry_id in self.held if entry_id not in self.settling]
        if not held:
            return []
        try:
            lost = await topics.topic_extend(self.redis, self.keys, self.group, self.consumer, held)
        except CLIENT_FAILURES as exc:
            self._renewing.failed(exc)
            return []
        self._renewing.ended()
        for entry_id in lost:
            if entry_id not in self.held:
                continue  # its ack landed meanwhile
            logger.warning(
                "message %s of %s: lease lost (claimed by another worker, or trimmed)",
                entry_id.decode("utf-8", "replace"), self.name,
            )  # fmt: skip
        return []

    async def _ack(self, batch: list[Settlement]) -> list[bool]:
        attempts = [self.held[s.id].attempts if s.id in self.held else 1 for s in batch]
        return await topics.topic_ack(
            self.redis, self.keys, self.group, self.consumer, batch, attempts,
            lease_ms=self.lease_ms, dead_max=DEAD_MAX,
        )  # fmt: skip


class TopicConsumer(Component):
    """Reads one subscriber group's messages into the worker's free slots."""

    def __init__(
        self,
        redis: Redis,
        acks: TopicAcks,
        inflight: InFlight,
        subscriber: Subscriber,
        *,
        settings: WorkerSettings,
    ) -> None:
        super().__init__()
        self.redis, self.keys, self.settings = redis, acks.keys, settings
        self._acks, self._inflight, self._slots = acks, inflight, inflight.slots
        self.subscriber, self.group, self.consumer = subscriber, acks.group, acks.consumer
        self._wake = self.keys.wake(self.group, self.consumer)  # one per group and worker
        self._run_name = orjson.dumps(subscriber.run_name)
        self._batch = subscriber.batch or 1  # messages per run
        self._units_per_read = max(1, MAX_READ // self._batch)
        self._cursor = "0-0"  # where the next claim's scan of the pending list resumes
        self._renewed_at = 0.0
        self.name = f"the reader of {acks.name}"
        stopping = self.stopping.is_set
        self._reads = Outage(logger, f"reading {acks.name}", stopping)
        self._upkeep = Outage(logger, f"maintaining {acks.name}", stopping)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._read_loop(), self._maintain_loop()]

    async def unblock(self) -> None:
        """End a blocking read now: an entry on this consumer's own wake stream."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xadd(self._wake, {"stop": "1"})
            pipe.pexpire(self._wake, WAKE_TTL_MS)
            await pipe.execute()

    # -- reading new messages ----------------------------------------------------------

    async def _read_loop(self) -> None:
        while not self.stopping.is_set() and not await self._prepare():
            await wait_event(self.stopping, RETRY_PAUSE)
        blocking = False
        while not self.stopping.is_set():
            room = self._slots.room
            if room <= 0:
                await self._slots.wait_change()
                continue
            try:
                got, full = await self._read(min(room, self._units_per_read), blocking)
            except RedisError as exc:
                await self._read_failed(exc)
                continue
            self._reads.ended()
            if not full and not blocking:
                if self.settings.burst:
                    if await self._drained():
                        self.stopping.set()  # the maintenance loop ends too: joined
                        break
                    continue
                blocking = True  # nothing more now: wait for the next message
            elif got:
                blocking = False
        with contextlib.suppress(RedisError), deadline.bound(STOP_WAIT):  # else it expires
            await self.redis.delete(self._wake)

    async def _prepare(self) -> bool:
        """Create the group (at the start of the log: nothing published before the first
        worker is missed) and this consumer's wake stream; False after a Redis error."""
        try:
            await create_group(self.redis, self.keys, self.group)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.delete(self._wake)
                pipe.xgroup_create(self._wake, self.group, id="$", mkstream=True)
                pipe.pexpire(self._wake, WAKE_TTL_MS)  # renewed with the leases
                await pipe.execute()
        except RedisError as exc:
            self._reads.failed(exc)
            return False
        return True

    async def _read(self, units: int, blocking: bool) -> tuple[int, bool]:
        """One XREADGROUP of new messages for ``units`` runs (a message each, or a batch
        each); blocking: until one comes, the wake stream is written, or idle_wait
        passes. Admits what it got; returns how many messages, and whether that is all
        it asked for."""
        # A blocking read reserves no room (it would hold the room from the worker's
        # queues while it waits): what it brings is admitted unreserved, to wait if need be.
        reserved = 0 if blocking else self._slots.reserve(units)
        count = max(reserved, 1) * self._batch
        started = time.perf_counter()
        try:
            entries = await reads.topic_new_messages(
                self.redis, self.keys, self.group, self.consumer, count=count,
                block_ms=int(self.settings.idle_wait * 1000) if blocking else None,
                wake=self._wake if blocking else None,
            )  # fmt: skip
        except BaseException:
            self._slots.unreserve(reserved)
            raise
        if not blocking:
            self._slots.size_lookahead(time.perf_counter() - started)
        # (A wake-up entry is read, never acknowledged: its stream is dropped at start.)
        self._admit([(entry_id, fields, 1) for entry_id, fields in entries], reserved)
        return len(entries), len(entries) == count

    async def _read_failed(self, exc: RedisError) -> None:
        if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
            logger.warning("%s: the group or log was deleted; creating it again", self._acks.name)
            await self._prepare()
        else:
            self._reads.failed(exc)
        await wait_event(self.stopping, RETRY_PAUSE)

    def _admit(self, messages: list[tuple[bytes, dict[bytes, bytes], int]], reserved: int) -> None:
        """Admit (id, fields, attempts) messages as runs: one message each, or batches of
        up to ``batch``; ``reserved`` runs' room was reserved (what is left is given
        back). An entry aioqueue did not write is dead-lettered without running."""
        runnable = []
        for entry_id, fields, attempts in messages:
            body = fields.get(b"b")
            if body is None:
                self._bury(entry_id, attempts, _NOT_OURS)
            elif self._batch > 1 and (error := _json_error(body)):
                self._bury(entry_id, attempts, error)  # alone: not its whole batch
            else:
                runnable.append((entry_id, body, attempts))
        runs = 0
        for start in range(0, len(runnable), self._batch):
            taken = self._run_of(runnable[start : start + self._batch])
            self._inflight.admit(taken, self._acks, reserved=runs < reserved)
            runs += 1
        self._slots.unreserve(max(0, reserved - runs))

    def _run_of(self, messages: list[tuple[bytes, bytes, int]]) -> Taken:
        """The Taken the runner runs: the body as the subscriber's one argument, or (in
        batch mode) the list of bodies, under a batch id ``<first id>+<count>``."""
        lease = self.consumer
        if self._batch == 1:
            [(entry_id, body, attempts)] = messages
            payload = b'{"t":' + self._run_name + b',"a":[' + body + b"]}"
            return Taken(entry_id, payload, attempts, 0, lease)
        bodies = b",".join(body for _, body, _ in messages)
        payload = b'{"t":' + self._run_name + b',"a":[[' + bodies + b"]]}"
        batch_id = messages[0][0] + b"+" + str(len(messages)).encode()
        members = [Taken(entry_id, b"", attempts, 0, lease) for entry_id, _, attempts in messages]
        self._acks.add_batch(batch_id, members)
        # Run again while any message has attempts left (each is settled by its own).
        return Taken(batch_id, payload, min(m.attempts for m in members), 0, lease)

    def _bury(self, entry_id: bytes, attempts: int, error: bytes) -> None:
        """An entry that is no aioqueue message: dead-lettered by the in-flight jobs'
        owner, which alone settles (it never runs, so it is none of the outcomes)."""
        taken = Taken(entry_id, b"", attempts, 0, self.consumer)
        logger.warning(
            "message %s of %s dead-lettered: %s", taken.job_id, self._acks.name,
            orjson.loads(error)["message"],
        )  # fmt: skip
        self._inflight.reject(taken, self._acks, error)

    async def _drained(self) -> bool:
        """Burst mode: True once nothing new is there, nothing held is unsettled, and the
        group has nothing pending (running elsewhere, or a retry to come; without
        ``wait_retries``, pending messages do not hold a burst worker)."""
        acks = self._acks
        if not acks.idle:
            await acks.next_landing(timeout=MAINTAIN_EVERY)
            return False
        if not self.settings.wait_retries:
            return True
        try:
            pending = await self.redis.xpending(self.keys.log, self.group)
        except RedisError:
            return False
        if not pending["pending"]:
            return True
        await wait_event(self.stopping, MAINTAIN_EVERY / 2)
        return False

    # -- leases, claims, trimming ------------------------------------------------------

    async def _maintain_loop(self) -> None:
        while not await wait_event(self.stopping, MAINTAIN_EVERY):
            try:
                await self._renew()
                await self._claim()
            except RedisError as exc:
                self._upkeep.failed(exc)
                continue
            self._upkeep.ended()

    async def _renew(self) -> None:
        """Renew the leases of held messages every third of a lease."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._renewed_at < self.settings.lease / 3:
            return
        self._renewed_at = loop.time()
        await self.redis.pexpire(self._wake, WAKE_TTL_MS)
        await self._acks.renew(self.settings.lease_ms)

    async def _claim(self) -> None:
        """Claim messages whose lease ran out or whose retry is due."""
        if self.stopping.is_set():
            return
        reserved = self._slots.reserve(self._units_per_read)
        if not reserved:
            return  # no room: what waits for a claim keeps waiting
        options = self.subscriber.task.options
        try:
            claim = await topics.topic_reclaim(
                self.redis, self.keys, self.group, self.consumer,
                lease_ms=self.settings.lease_ms, count=reserved * self._batch, cursor=self._cursor,
                max_attempts=options.max_attempts, dead_max=DEAD_MAX,
            )  # fmt: skip
        except BaseException:
            self._slots.unreserve(reserved)
            raise
        self._cursor = claim.cursor
        if claim.buried:
            logger.warning(
                "%d message(s) of %s dead-lettered: lease expired on the last attempt",
                claim.buried, self._acks.name,
            )  # fmt: skip
        self._admit(claim.messages, reserved)
