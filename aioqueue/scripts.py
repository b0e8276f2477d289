"""The Lua scripts in ``aioqueue/lua``, each wrapped as one typed async function.

This is the only module that sends EVALSHA and the only one that knows a script's KEYS
and ARGV order. Replies (ints and bytes from redis-py) are turned into typed values here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from inspect import Parameter, signature
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson
from redis.asyncio import ConnectionPool
from redis.exceptions import NoScriptError, ResponseError

from .priorities import strict_plan

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis
    from redis.asyncio.connection import AbstractConnection

    from .keys import QueueKeys

Arg = str | bytes | int | float


class Script:
    """A file from aioqueue/lua, called by SHA and reloaded if Redis lost it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = (files("aioqueue") / "lua" / f"{name}.lua").read_text("utf-8")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, redis: Redis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:  # it did not run, so running it again is safe
            await redis.script_load(self.source)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)


_ENQUEUE = Script("enqueue")
_TAKE = Script("take")
_ACK = Script("ack")
_RECLAIM = Script("reclaim")
_EXTEND = Script("extend")
_CANCEL = Script("cancel")
_REQUEUE = Script("requeue")
_PURGE = Script("purge")
_RESCHEDULE = Script("reschedule")
_TRIM_DEAD = Script("trim_dead")

ALL_SCRIPTS = (
    _ENQUEUE, _TAKE, _ACK, _RECLAIM, _EXTEND, _CANCEL, _REQUEUE, _PURGE,
    _RESCHEDULE, _TRIM_DEAD,
)  # fmt: skip


async def load_all(redis: Redis) -> None:
    """Load every script up front, so the hot path never meets NOSCRIPT."""
    for script in ALL_SCRIPTS:
        await redis.script_load(script.source)


async def checkout(pool: ConnectionPool) -> AbstractConnection:
    """A connection of ``pool`` for a caller that sends packed commands on it (enqueues,
    takes); give it back with ``pool.release``. The pool's limit counts it as in use."""
    get: Callable[..., Awaitable[AbstractConnection]] = pool.get_connection
    # redis-py < 5.3 wants a command name (and ignores it); later versions warn if given one
    return await (get("_") if _NAME_REQUIRED else get())


def _name_required() -> bool:
    parameter = signature(ConnectionPool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is Parameter.empty


_NAME_REQUIRED = _name_required()


# -- enqueue -------------------------------------------------------------------------


class Enqueued(NamedTuple):
    created: bool
    state: str


class NewJob(NamedTuple):
    """One job for the enqueue script (a tuple: built once per enqueue, so cheap to make)."""

    id: str
    payload: bytes
    priority: int
    max_attempts: int = 0
    delay_ms: int = 0
    due_ms: int = 0


MAX_ENQUEUE_BATCH = 1000  # jobs per script call: bounds its run time and unpack()


def _enqueue_call(keys: QueueKeys, jobs: Sequence[NewJob]) -> tuple[list[str], list[Arg]]:
    """KEYS and ARGV of one enqueue call: only the ready lists its jobs use are declared."""
    priorities = sorted({job.priority for job in jobs})
    script_keys = [
        keys.notify, keys.schedule, keys.schedule_wake, keys.ticks, keys.job_prefix,
        *(keys.ready(priority) for priority in priorities),
    ]  # fmt: skip
    args: list[Arg] = [len(jobs), ",".join(map(str, priorities))]
    for job in jobs:
        args += (job.id, job.payload, job.priority, job.max_attempts, job.delay_ms, job.due_ms)
    return script_keys, args


_STATES = {state.encode(): state for state in ("queued", "scheduled", "tick-done")}


def _enqueued(reply: Sequence[Any]) -> list[Enqueued]:
    states = _STATES
    return [
        Enqueued(bool(reply[i]), states.get(reply[i + 1]) or _text(reply[i + 1]))
        for i in range(0, len(reply), 2)
    ]


# The hot path packs its EVALSHA itself (RESP, as redis-py would): the part that names the
# script, its keys and its priorities is cached per queue and priority set, and each job
# is one format operation, where redis-py's pack_command costs ~0.5 µs per argument.
_JOB = b"$%d\r\n%b\r\n$%d\r\n%b\r\n$1\r\n%d\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"


def _resp(*args: bytes) -> bytes:
    return b"".join(b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args)


@lru_cache(maxsize=256)
def _enqueue_head(keys: QueueKeys, priorities: tuple[int, ...]) -> tuple[int, bytes, bytes]:
    """The argument count without the jobs; RESP of EVALSHA, sha and KEYS; of ARGV[2]."""
    script_keys, args = _enqueue_call(keys, [NewJob("", b"", p) for p in priorities])
    head = [b"EVALSHA", _ENQUEUE.sha.encode(), b"%d" % len(script_keys)]
    head += (key.encode() for key in script_keys)
    return len(head) + 2, _resp(*head), _resp(str(args[1]).encode())


def _pack_enqueue(keys: QueueKeys, jobs: Sequence[NewJob]) -> bytes:
    """One enqueue script call, packed: the same KEYS and ARGV as ``_enqueue_call``."""
    priority = jobs[0].priority
    if all(job.priority == priority for job in jobs):
        priorities: tuple[int, ...] = (priority,)
    else:
        priorities = tuple(sorted({job.priority for job in jobs}))
    argc, head, tail = _enqueue_head(keys, priorities)
    count = b"%d" % len(jobs)
    parts = [b"*%d\r\n" % (argc + 6 * len(jobs)), head, _resp(count), tail]
    for job in jobs:
        if not 0 <= job.priority <= 9:  # one digit on the wire, and one ready list per digit
            raise ValueError(f"priority must be 0..9, got {job.priority}")
        job_id = job.id.encode()
        attempts, delay, due = b"%d" % job.max_attempts, b"%d" % job.delay_ms, b"%d" % job.due_ms
        parts.append(_JOB % (
            len(job_id), job_id, len(job.payload), job.payload, job.priority,
            len(attempts), attempts, len(delay), delay, len(due), due,
        ))  # fmt: skip
    return b"".join(parts)


async def enqueue_many(
    connection: AbstractConnection,
    keys: QueueKeys,
    jobs: Sequence[NewJob],
    *,
    chunk: int = MAX_ENQUEUE_BATCH,
    on_chunk: Callable[[int, list[Enqueued]], None] | None = None,
) -> list[Enqueued]:
    """Write jobs over one connection, in script calls of up to ``chunk`` jobs, all sent in
    one write (one round trip). ``on_chunk(start, results)`` hears each call's results as
    its reply arrives, while Redis still runs the later calls. The connection's retry
    policy resends after a dropped connection: safe, because the script skips ids that
    have a record (so a resent chunk may be heard twice)."""
    chunk = min(chunk, MAX_ENQUEUE_BATCH)
    starts = range(0, len(jobs), chunk)
    commands = [_pack_enqueue(keys, jobs[start : start + chunk]) for start in starts]

    parsed: list[list[Enqueued]] = [[] for _ in commands]

    def on_reply(index: int, reply: Any) -> None:  # each reply is decoded once, on arrival
        parsed[index] = _enqueued(reply)
        if on_chunk is not None:
            on_chunk(starts[index], parsed[index])

    await _send_packed(connection, _ENQUEUE, commands, on_reply)
    return [item for results in parsed for item in results]


async def _send_packed(
    connection: AbstractConnection,
    script: Script,
    commands: list[bytes],
    on_reply: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """Send packed calls of ``script`` and read every reply (``on_reply(index, reply)`` as
    each arrives); load the script if Redis lost it."""

    async def round_trip() -> list[Any]:
        await connection.send_packed_command(commands)
        replies, error = [], None
        for index in range(len(commands)):
            try:
                replies.append(reply := await connection.read_response())
            except ResponseError as exc:  # read on: the connection stays in step
                error = error or exc
                continue
            if on_reply is not None:
                on_reply(index, reply)
        if error is not None:
            raise error
        return replies

    async def disconnect(_: Exception) -> None:
        await connection.disconnect()

    for attempt in range(2):
        try:
            return await connection.retry.call_with_retry(round_trip, disconnect)
        except NoScriptError:  # every call was refused: loading and resending is safe
            if attempt:
                raise
            await connection.send_command("SCRIPT", "LOAD", script.source)
            await connection.read_response()
    raise AssertionError("unreachable")


async def enqueue(
    redis: Redis,
    keys: QueueKeys,
    *,
    job_id: str,
    payload: bytes,
    priority: int,
    max_attempts: int,
    delay_ms: int,
    due_ms: int,
    tick: tuple[str, int] | None = None,
) -> Enqueued:
    """Write one job; with ``tick`` (spec name, tick ms), only if that tick is new."""
    script_keys, args = _enqueue_call(
        keys, [NewJob(job_id, payload, priority, max_attempts, delay_ms, due_ms)]
    )
    if tick is not None:
        args += tick
    return _enqueued(await _ENQUEUE(redis, script_keys, args))[0]


# -- take / ack ----------------------------------------------------------------------


_TAKE_KEYS = 17  # as take.lua lists them
_TAKE_ARGC = 3 + _TAKE_KEYS + 6  # EVALSHA sha numkeys, KEYS, ARGV before the plan's pairs


@lru_cache(maxsize=256)
def _take_head(keys: QueueKeys) -> bytes:
    """RESP of EVALSHA, the take script's sha, its key count and its keys but the last
    (the lease's own ``taken`` list): the same for every take of the queue. The hot path
    packs its take itself, as it does enqueues: redis-py would spend ~20 µs on it."""
    script_keys = [
        keys.active, keys.notify, keys.dead, keys.seq, keys.job_prefix, *keys.ready_lists(),
        keys.schedule,
    ]  # fmt: skip
    count = b"%d" % _TAKE_KEYS
    return _resp(b"EVALSHA", _TAKE.sha.encode(), count, *(key.encode() for key in script_keys))


def _pack_take(
    keys: QueueKeys, lease: str, numbers: Sequence[int], pairs: Sequence[tuple[int, int]]
) -> bytes:
    """One take call, packed: KEYS as in take.lua, then ARGV: the lease, ``numbers``
    (lease_ms, limit, woken, result_ttl_ms, promote) and the plan's (priority, quota) pairs."""
    taken_key, token = keys.taken(lease).encode(), lease.encode()
    return b"".join((
        b"*%d\r\n" % (_TAKE_ARGC + 2 * len(pairs)), _take_head(keys),
        b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(taken_key), taken_key, len(token), token),
        _resp(*(b"%d" % number for number in numbers)),
        *(_resp(b"%d" % priority, b"%d" % quota) for priority, quota in pairs),
    ))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Taken:
    """One job leased to a worker by a take call."""

    id: bytes
    payload: bytes
    attempts: int
    max_attempts: int
    lease: str

    @property
    def job_id(self) -> str:
        """The id as text, for logs and handles (ids need not be UTF-8 in Redis)."""
        return self.id.decode("utf-8", "backslashreplace")


@dataclass(frozen=True, slots=True)
class TakeResult:
    jobs: list[Taken]
    promoted: Promoted  # what the call promoted first (nothing unless asked to)

    @property
    def now_ms(self) -> int:
        """The Redis clock when the call ran."""
        return self.promoted.now_ms


async def take(
    redis: Redis,
    keys: QueueKeys,
    *,
    lease: str,
    lease_ms: int,
    limit: int,
    result_ttl_ms: int = 24 * 3600 * 1000,
    plan: Sequence[tuple[int, int]] | None = None,
    woken: bool = False,
    promote: int = 0,
) -> TakeResult:
    """Promote up to ``promote`` due jobs, then lease up to ``limit`` jobs, visiting
    priority levels by ``plan`` (default: strict)."""
    pairs = (plan or strict_plan(limit)) if limit else ()
    command = _pack_take(keys, lease, (lease_ms, limit, int(woken), result_ttl_ms, promote), pairs)
    pool = redis.connection_pool
    connection = await checkout(pool)
    try:
        [reply] = await _send_packed(connection, _TAKE, [command])
    finally:
        await pool.release(connection)
    jobs = [
        Taken(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]), lease)
        for i in range(3, len(reply), 4)
    ]
    next_due = int(reply[2])
    return TakeResult(
        jobs, Promoted(int(reply[1]), None if next_due < 0 else next_due, int(reply[0]))
    )


Outcome = Literal["complete", "retry", "bury", "fail", "abort", "release"]

LEASE_LOST = -2


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one attempt ended, as the ack script records it."""

    id: bytes
    lease: str
    outcome: Outcome
    data: bytes = b""
    delay_ms: int = 0


async def ack(
    redis: Redis,
    keys: QueueKeys,
    settlements: Sequence[Settlement],
    *,
    result_ttl_ms: int,
) -> list[bool]:
    """Settle a batch; True per job settled, False where the lease was lost."""
    try:
        batch = orjson.dumps(
            [(s.id.decode(), s.lease, s.outcome, s.data.decode(), s.delay_ms) for s in settlements]
        )
        args: list[Arg] = [result_ttl_ms, "json", batch]
    except UnicodeDecodeError:  # an id that is not UTF-8 (a third party's): one field each
        args = [result_ttl_ms, "args"]
        for s in settlements:
            args += (s.id, s.lease, s.outcome, s.data, s.delay_ms)
    codes = await _ACK(
        redis,
        [
            keys.active,
            keys.schedule,
            keys.dead,
            keys.notify,
            keys.schedule_wake,
            keys.job_prefix,
            *keys.ready_lists(),
        ],
        args,
    )
    return [int(code) != LEASE_LOST for code in codes]


# -- time: promote, reclaim, extend ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Promoted:
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


async def promote(redis: Redis, keys: QueueKeys, *, limit: int) -> Promoted:
    """Move up to ``limit`` due jobs from the schedule to their ready lists (take.lua,
    taking none)."""
    taken = await take(redis, keys, lease="promote", lease_ms=0, limit=0, promote=limit)
    return taken.promoted


@dataclass(frozen=True, slots=True)
class Reclaimed:
    requeued: int
    buried: int


async def reclaim(
    redis: Redis,
    keys: QueueKeys,
    *,
    limit: int,
    default_max_attempts: int,
    result_ttl_ms: int = 24 * 3600 * 1000,
) -> Reclaimed:
    requeued, buried = await _RECLAIM(
        redis,
        [keys.active, keys.dead, keys.notify, keys.job_prefix, *keys.ready_lists()],
        [limit, default_max_attempts, result_ttl_ms],
    )
    return Reclaimed(int(requeued), int(buried))


@dataclass(frozen=True, slots=True)
class Extended:
    lost: list[bytes]  # leases no longer held
    aborted: list[bytes]  # held, but an abort was requested


async def extend(
    redis: Redis, keys: QueueKeys, leases: Sequence[tuple[bytes, str]], *, lease_ms: int
) -> Extended:
    """Renew leases; report the ones no longer held and the ones to abort."""
    args: list[Arg] = [lease_ms]
    for job_id, lease in leases:
        args += (job_id, lease)
    lost, aborted = await _EXTEND(redis, [keys.active, keys.job_prefix], args)
    return Extended(list(lost), list(aborted))


# -- admin: cancel, requeue, purge ---------------------------------------------------


CancelCode = Literal["cancelled", "aborting", "not_found", "too_late"]


async def cancel(
    redis: Redis, keys: QueueKeys, job_id: str, *, result_ttl_ms: int
) -> tuple[CancelCode, str]:
    code, state = await _CANCEL(
        redis, [keys.job(job_id), keys.schedule], [job_id, result_ttl_ms, keys.abort_channel]
    )
    codes: dict[int, CancelCode] = {1: "cancelled", 2: "aborting", 0: "too_late", -1: "not_found"}
    outcome = codes[int(code)]
    return outcome, _text(state)


RescheduleCode = Literal["rescheduled", "not_scheduled", "not_found"]


async def reschedule(
    redis: Redis, keys: QueueKeys, job_id: str, *, delay_ms: int, due_ms: int
) -> tuple[RescheduleCode, str]:
    code, state = await _RESCHEDULE(
        redis, [keys.job(job_id), keys.schedule, keys.schedule_wake], [job_id, delay_ms, due_ms]
    )
    codes: dict[int, RescheduleCode] = {1: "rescheduled", 0: "not_scheduled", -1: "not_found"}
    return codes[int(code)], _text(state)


@dataclass(frozen=True, slots=True)
class Requeued:
    requeued: int
    skipped: int


async def requeue(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> Requeued:
    requeued, skipped = await _REQUEUE(
        redis, [keys.dead, keys.notify, keys.job_prefix, *keys.ready_lists()], [limit, *job_ids]
    )
    return Requeued(int(requeued), int(skipped))


async def trim_dead(
    redis: Redis, keys: QueueKeys, *, max_jobs: int, max_age_ms: int, limit: int
) -> int:
    """Delete the oldest dead jobs beyond ``max_jobs`` or older than ``max_age_ms``."""
    return int(await _TRIM_DEAD(redis, [keys.dead, keys.job_prefix], [max_jobs, max_age_ms, limit]))


async def purge(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> int:
    return int(await _PURGE(redis, [keys.dead, keys.job_prefix], [limit, *job_ids]))


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
