"""The values each step of a job's life takes and returns, as typed Python values.

Enqueue takes ``NewJob``s (``LinkedJob``s for groups and workflows) and answers
``Enqueued``; a take answers ``TakeResult`` (``Taken`` jobs, and what it ``Promoted``);
an attempt ends in a ``Settlement``, which the ack records; reclaim, extend and requeue
answer ``Reclaimed``, ``Extended`` and ``Requeued``. Pure: ``store.scripts`` turns
redis-py's replies into these, and the worker and the producer side use them without
the Redis layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple


class NewJob(NamedTuple):
    """One job for the enqueue script (a tuple: built once per enqueue, so cheap to make).
    ``fresh``: its id was just generated (72 random bits after its millisecond), so on a
    first send it cannot exist yet and the script skips looking for it."""

    id: str
    payload: bytes
    priority: int
    max_attempts: int = 0
    delay_ms: int = 0
    due_ms: int = 0
    fresh: bool = False
    replicas: int = 0  # the enqueue returns once this many replicas have it


class LinkedJob(NamedTuple):
    """A job for enqueue_linked.lua: one of a group, of a workflow, or of a tenant."""

    job: NewJob
    group: str = ""
    parents: str = ""  # the ids of its parents, space-separated
    position: int = 0  # its place among its parents' children (1-based)
    parent: str = ""  # if it is a parent: its policy ('f' or 'i') and '1' to keep inputs
    parent_queue: str = ""  # its parents' queue, if not its own (outcome handed off there)
    remote_children: int = 0  # if it is a parent: how many of its children are elsewhere
    tenant: str = ""  # its tenant (``.options(tenant=...)``: served fairly among tenants)


class HandedOff(NamedTuple):
    """A child's outcome waiting in its queue's handoff ZSET for its parents' queue."""

    entry: bytes  # the ZSET member, as read (removed once delivered)
    parent_queue: str
    parents: bytes  # their ids, space-separated
    position: bytes  # the child's index among its parents' children
    outcome: bytes  # b"c" or b"f", then the result or error JSON

    @classmethod
    def parse(cls, entry: bytes) -> HandedOff | None:
        """The fields of a member (lua/include/links.lua's hand_off); None if malformed."""
        parts = entry.split(b"\n", 3)
        if len(parts) != 4 or not parts[3]:
            return None
        try:
            queue = parts[0].decode()
        except UnicodeDecodeError:
            return None
        return cls(entry, queue, parts[1], parts[2], parts[3])


class Enqueued(NamedTuple):
    """What enqueue did with one job: written (created), or found existing in ``state``."""

    created: bool
    state: str


@dataclass(slots=True)  # not frozen: a frozen __init__ costs 4x, and one is built per job
class Taken:
    """One job leased to a worker by a take call (read-only by convention)."""

    id: bytes
    payload: bytes
    attempts: int
    max_attempts: int
    lease: str
    waited_ms: int = field(default=-1, compare=False)  # ready before the take (-1: unknown)

    @property
    def job_id(self) -> str:
        """The id as text, for logs and handles (ids need not be UTF-8 in Redis)."""
        return self.id.decode("utf-8", "backslashreplace")


@dataclass(frozen=True, slots=True)
class Promoted:
    """What a promotion did, and when the next delayed job is due (both by Redis's clock)."""

    count: int
    next_due_ms: int | None
    now_us: int  # Redis clock, microseconds

    @property
    def now_ms(self) -> int:
        return self.now_us // 1000

    def seconds_until_next(self) -> float | None:
        """Exact time to sleep until the next due job, by the Redis clock."""
        if self.next_due_ms is None:
            return None
        return (self.next_due_ms * 1000 - self.now_us) / 1_000_000


HELD_BY_CONCURRENCY = -1  # TakeResult.held: as many jobs are leased as the queue allows


@dataclass(frozen=True, slots=True)
class TakeResult:
    """The jobs one take call leased, and what it promoted first (nothing unless asked)."""

    jobs: list[Taken]
    promoted: Promoted
    held: int = 0  # the queue's limits kept jobs back: 0 no, HELD_BY_CONCURRENCY, or the
    # Redis-clock ms at which its rate allows the next start

    @property
    def now_ms(self) -> int:
        """The Redis clock when the call ran."""
        return self.promoted.now_ms


Outcome = Literal["complete", "retry", "bury", "fail", "abort", "expire", "release"]


@dataclass(slots=True)  # not frozen: built once per job (see Taken)
class Settlement:
    """How one attempt ended, as the ack script records it (read-only by convention)."""

    id: bytes
    lease: str
    outcome: Outcome
    data: bytes = b""  # the result (complete) or the error (the others) as JSON
    delay_ms: int = 0  # retry: run again after this long


@dataclass(frozen=True, slots=True)
class TopicClaim:
    """What a topic reclaim did: where its scan of the pending list goes on, how many
    messages it dead-lettered, and the messages it claimed: (id, fields, attempts)."""

    cursor: str
    buried: int
    messages: list[tuple[bytes, dict[bytes, bytes], int]]


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """What a reclaim did: jobs back to ready, jobs buried (dead or cancelled), and the
    ones buried dead, whose hooks the caller runs (leased to nobody: ``lease`` is "")."""

    requeued: int
    buried: int
    dead: tuple[Taken, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Extended:
    lost: list[bytes]  # leases no longer held
    aborted: list[bytes]  # held, but an abort was requested


@dataclass(frozen=True, slots=True)
class Requeued:
    requeued: int
    skipped: int


CancelCode = Literal["cancelled", "aborting", "not_found", "too_late"]
RescheduleCode = Literal["rescheduled", "not_scheduled", "not_found"]
