"""One typed async function per Lua script in ``store/lua`` (``take.lua`` ↔ ``take()``).

This is the only module that knows a script's KEYS and ARGV order and what its reply
means: redis-py's ints and bytes become the typed values of ``records``, and every code a
script returns is read through the one table ``CODES``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import orjson

from ..core.errors import NotReplicated
from ..core.lifecycle import (
    CancelCode,
    Enqueued,
    Extended,
    HandedOff,
    LinkedJob,
    NewJob,
    Promoted,
    Reclaimed,
    Requeued,
    RescheduleCode,
    Settlement,
    Taken,
    TakeResult,
    TopicClaim,
)
from ..core.payload import encode_error
from ..core.priorities import strict_plan
from . import wire
from .loader import Arg, Script
from .routing import lines_for

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis

    from ..core.keys import ChannelKeys, QueueKeys, TopicKeys

_ENQUEUE = Script("enqueue")
_TAKE = Script("take")
_PROMOTE = Script("promote")
_ACK = Script("ack")
_RECLAIM = Script("reclaim")
_EXTEND = Script("extend")
_CANCEL = Script("cancel")
_REQUEUE = Script("requeue")
_PURGE = Script("purge")
_RESCHEDULE = Script("reschedule")
_TRIM_DEAD = Script("trim_dead")
_RECONCILE = Script("reconcile")
_PROGRESS = Script("progress")
_CHANNEL_POST = Script("channel_post")
_CHANNEL_COMMIT = Script("channel_commit")
_CHANNEL_JOIN = Script("channel_join")
_CHANNEL_LEAVE = Script("channel_leave")
_RESUME = Script("resume")
_TOPIC_PUBLISH = Script("topic_publish")
_TOPIC_ACK = Script("topic_ack")
_TOPIC_RECLAIM = Script("topic_reclaim")
_TOPIC_EXTEND = Script("topic_extend")
_DEBOUNCE = Script("debounce")
_ENQUEUE_LINKED = Script("enqueue_linked")
_DELIVER = Script("deliver")
_IDLE = Script("idle")

ALL_SCRIPTS = (
    _ENQUEUE, _TAKE, _PROMOTE, _ACK, _RECLAIM, _EXTEND, _CANCEL, _REQUEUE, _PURGE,
    _RESCHEDULE, _TRIM_DEAD, _RECONCILE, _PROGRESS, _CHANNEL_POST, _CHANNEL_COMMIT,
    _CHANNEL_JOIN, _CHANNEL_LEAVE, _RESUME, _TOPIC_PUBLISH, _TOPIC_ACK, _TOPIC_RECLAIM,
    _TOPIC_EXTEND, _DEBOUNCE, _ENQUEUE_LINKED, _DELIVER, _IDLE,
)  # fmt: skip


async def load_all(redis: Redis) -> None:
    """Load every script up front, so the hot path never meets NOSCRIPT."""
    for script in ALL_SCRIPTS:
        await redis.script_load(script.on(redis).source)


CODES: dict[str, dict[int, str]] = {
    "ack": {1: "settled", 3: "handed_off", -2: "lease_lost"},
    "cancel": {1: "cancelled", 2: "aborting", 0: "too_late", -1: "not_found"},
    "reschedule": {1: "rescheduled", 0: "not_scheduled", -1: "not_found"},
}
"""What each script's return code means (its Lua header says the same)."""


def _meaning(script: str, code: Any) -> str:
    return CODES[script][int(code)]


_LEASE_LOST = next(code for code, meaning in CODES["ack"].items() if meaning == "lease_lost")
_HANDED_OFF = next(code for code, meaning in CODES["ack"].items() if meaning == "handed_off")


# -- enqueue -------------------------------------------------------------------------


MAX_ENQUEUE_BATCH = 1000  # jobs per script call: bounds its run time and unpack()


def _enqueue_call(
    keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int = 0
) -> tuple[list[str], list[Arg]]:
    """KEYS and ARGV of one enqueue call: only the ready lists its jobs use are declared.
    ``span_ms`` is the idempotency window of completed jobs with no result."""
    priorities = sorted({job.priority for job in jobs})
    script_keys = [
        keys.notify, keys.schedule, keys.schedule_wake, keys.ticks, keys.job_prefix,
        keys.done_prefix, keys.idle, keys.active, keys.paused, keys.limits, keys.ready_prefix,
        keys.direct_prefix, keys.taken_prefix, *(keys.ready(priority) for priority in priorities),
    ]  # fmt: skip
    args: list[Arg] = [len(jobs), ",".join(map(str, priorities)), span_ms, 0]
    for job in jobs:
        args += (job.id, job.payload, job.priority, job.max_attempts, job.delay_ms, job.due_ms)
        args.append(int(job.fresh))
    return script_keys, args


_STATES = {
    state.encode(): state for state in ("queued", "scheduled", "complete", "tick-done", "waiting")
}


def _enqueued(reply: Sequence[Any]) -> list[Enqueued]:
    states = _STATES
    return [
        Enqueued(bool(reply[i]), states.get(reply[i + 1]) or _text(reply[i + 1]))
        for i in range(0, len(reply), 2)
    ]


@lru_cache(maxsize=256)
def _enqueue_head(
    keys: QueueKeys, priorities: tuple[int, ...], span_ms: int
) -> tuple[int, bytes, bytes]:
    """The argument count without the jobs; RESP of EVALSHA, sha and KEYS; of ARGV[2..3]
    (ARGV[1], the count, goes before it; ARGV[4], the resend flag, after it)."""
    script_keys, args = _enqueue_call(keys, [NewJob("", b"", p) for p in priorities], span_ms)
    head = [b"EVALSHA", _ENQUEUE.sha.encode(), b"%d" % len(script_keys)]
    head += (key.encode() for key in script_keys)
    return len(head) + 4, wire.bulk(*head), wire.bulk(str(args[1]).encode(), b"%d" % span_ms)


_FIRST_SEND, _RESEND = wire.bulk(b"0"), wire.bulk(b"1")  # ARGV[4] of an enqueue call


def _pack_enqueue(keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int = 0) -> bytes:
    """One enqueue script call, packed: the same KEYS and ARGV as ``_enqueue_call``."""
    before, flag, after = _pack_enqueue_parts(keys, jobs, span_ms)
    return before + flag + after


def _pack_enqueue_parts(
    keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int
) -> tuple[bytes, bytes, bytes]:
    """A packed enqueue call in three parts: what goes before the resend flag (ARGV[4]),
    the flag (first send), and what goes after it."""
    priority = jobs[0].priority
    if all(job.priority == priority for job in jobs):
        priorities: tuple[int, ...] = (priority,)
    else:
        priorities = tuple(sorted({job.priority for job in jobs}))
    argc, head, tail = _enqueue_head(keys, priorities, span_ms)
    before = b"".join(
        (wire.array(argc + wire.JOB_ARGS * len(jobs)), head, wire.numbers(len(jobs)), tail)
    )
    return before, _FIRST_SEND, wire.jobs(jobs)


async def enqueue_many(
    redis: Redis,
    keys: QueueKeys,
    jobs: Sequence[NewJob],
    *,
    chunk: int = MAX_ENQUEUE_BATCH,
    on_chunk: Callable[[int, list[Enqueued]], None] | None = None,
    span_ms: int = 0,
    keep: bool = False,
    replica_timeout: float = 1.0,
) -> list[Enqueued]:
    """Write jobs over one connection (``keep``: the one kept for this queue, see
    ``routing``), in script calls of up to ``chunk`` jobs, all sent in one write (one
    round trip). ``on_chunk(start, results)`` hears each call's results as
    its reply arrives, while Redis still runs the later calls. A resend after a dropped
    connection is safe: the script skips ids that have a record (so a resent chunk may be
    heard twice)."""
    chunk = min(chunk, MAX_ENQUEUE_BATCH)
    starts = range(0, len(jobs), chunk)
    parts = [_pack_enqueue_parts(keys, jobs[start : start + chunk], span_ms) for start in starts]
    commands = [before + flag + after for before, flag, after in parts]
    replicas = max(job.replicas for job in jobs) if jobs else 0
    wait = [_pack_wait(replicas, replica_timeout)] if replicas else []

    def resent(_: list[bytes]) -> list[bytes]:  # marked: no id may be taken as fresh
        return [before + _RESEND + after for before, _, after in parts] + wait

    parsed: list[list[Enqueued]] = [[] for _ in commands]

    def on_reply(index: int, reply: Any) -> None:  # each reply is decoded once, on arrival
        if index >= len(parsed):
            return  # WAIT's
        parsed[index] = _enqueued(reply)
        if on_chunk is not None and not wait:  # (with WAIT: only once replicated)
            on_chunk(starts[index], parsed[index])

    replies = await lines_for(redis).send(
        keys.base, _ENQUEUE, commands + wait, on_reply, resent, keep=keep
    )
    if wait and int(replies[-1]) < replicas:
        raise NotReplicated([job.id for job in jobs], int(replies[-1]), replicas, replica_timeout)
    if wait and on_chunk is not None:
        for index, start in enumerate(starts):
            on_chunk(start, parsed[index])
    return [item for results in parsed for item in results]


async def enqueue_linked(
    redis: Redis,
    keys: QueueKeys,
    jobs: Sequence[LinkedJob],
    *,
    seal: Sequence[str] = (),
    span_ms: int = 0,
    result_ttl_ms: int = 0,
    replica_timeout: float = 1.0,
) -> list[Enqueued]:
    """Write jobs of groups and workflows (parents before their children) in calls of up
    to MAX_ENQUEUE_BATCH jobs, all sent in one write; then seal the parents in ``seal``:
    in the same call if there is one, else in one more once every call succeeded (a
    parent sealed after a failed call would run without some of its children). Safe to
    resend: ids that have a record are skipped."""
    script = _ENQUEUE_LINKED.on(redis)
    script_keys = [
        keys.notify, keys.schedule, keys.schedule_wake, keys.job_prefix, keys.done_prefix,
        *keys.links(), *keys.ready_lists(),
    ]  # fmt: skip
    head = [b"EVALSHA", script.sha.encode(), b"%d" % len(script_keys)]
    head += (key.encode() for key in script_keys)

    def call(chunk: Sequence[LinkedJob], sealing: Sequence[str]) -> bytes:
        args: list[Arg] = [
            len(chunk), span_ms, " ".join(sealing), result_ttl_ms, keys.settled_channel
        ]  # fmt: skip
        for linked in chunk:
            job = linked.job
            args += (job.id, job.payload, job.priority, job.max_attempts, job.delay_ms)
            args += (job.due_ms, linked.group, linked.parents, linked.position, linked.parent)
            args += (linked.parent_queue, linked.remote_children)
        parts = [*head, *map(_arg_bytes, args)]
        return wire.array(len(parts)) + wire.bulk(*parts)

    chunks = [
        jobs[start : start + MAX_ENQUEUE_BATCH] for start in range(0, len(jobs), MAX_ENQUEUE_BATCH)
    ]
    single = len(chunks) <= 1
    commands = [call(chunk, seal if single else ()) for chunk in chunks or [()]]
    replicas = max((linked.job.replicas for linked in jobs), default=0)
    wait = [_pack_wait(replicas, replica_timeout)] if replicas else []
    sender = lines_for(redis)
    replies = await sender.send(keys.base, _ENQUEUE_LINKED, commands + wait)
    if wait and int(replies[-1]) < replicas:
        ids = [linked.job.id for linked in jobs]
        raise NotReplicated(ids, int(replies[-1]), replicas, replica_timeout)
    if not single and seal:
        await sender.send(keys.base, _ENQUEUE_LINKED, [call((), seal)])
    return [item for reply in replies[: len(commands)] for item in _enqueued(reply)]


def _arg_bytes(arg: Arg) -> bytes:
    if isinstance(arg, bytes):
        return arg
    return (arg if isinstance(arg, str) else str(arg)).encode()


async def deliver(
    redis: Redis, keys: QueueKeys, outcomes: Sequence[HandedOff], *, result_ttl_ms: int
) -> int:
    """Count, in their parents' queue ``keys``, outcomes handed off by other queues."""
    args: list[Arg] = [result_ttl_ms, keys.settled_channel]
    for outcome in outcomes:
        args += (outcome.parents, outcome.position, outcome.outcome)
    script_keys = [
        keys.job_prefix, keys.notify, keys.schedule, keys.schedule_wake, *keys.links(),
        *keys.ready_lists(),
    ]  # fmt: skip
    return int(await _DELIVER(redis, script_keys, args))


def _pack_wait(replicas: int, timeout: float) -> bytes:
    """WAIT: the connection's writes so far are on ``replicas`` replicas (or the timeout)."""
    return wire.array(3) + wire.bulk(b"WAIT") + wire.numbers(replicas, max(1, int(timeout * 1000)))


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
    span_ms: int = 0,
) -> Enqueued:
    """Write one job; with ``tick`` (spec name, tick ms), only if that tick is new."""
    script_keys, args = _enqueue_call(
        keys, [NewJob(job_id, payload, priority, max_attempts, delay_ms, due_ms)], span_ms
    )
    if tick is not None:
        args += tick
    return _enqueued(await _ENQUEUE(redis, script_keys, args))[0]


# -- take, promote, ack --------------------------------------------------------------


_TAKE_KEYS = 23  # as take.lua lists them
_TAKE_ARGC = 3 + _TAKE_KEYS + 9  # EVALSHA sha numkeys, KEYS, ARGV before the plan's pairs


@lru_cache(maxsize=256)
def _take_head(keys: QueueKeys) -> bytes:
    """RESP of EVALSHA, the take script's sha, its key count and its keys but the last
    (the lease's own ``taken`` list): the same for every take of the queue."""
    script_keys = [
        keys.active, keys.notify, keys.dead, keys.seq, keys.job_prefix, *keys.ready_lists(),
        keys.schedule, keys.skips, keys.done_prefix, keys.paused, keys.limits, keys.rate,
        keys.taken_prefix,
    ]  # fmt: skip
    count = b"%d" % _TAKE_KEYS
    return wire.bulk(b"EVALSHA", _TAKE.sha.encode(), count, *(key.encode() for key in script_keys))


def _pack_take(
    keys: QueueKeys,
    lease: str,
    numbers: Sequence[int],
    pairs: Sequence[tuple[int, int]],
    forget: Sequence[str] = (),
) -> bytes:
    """One take call, packed: KEYS as in take.lua, then ARGV: the lease, ``numbers``
    (lease_ms, limit, woken, result_ttl_ms, promote, front, span_ms), the lease tokens to
    forget, and the plan's (priority, quota) pairs."""
    return b"".join((
        wire.array(_TAKE_ARGC + 2 * len(pairs)), _take_head(keys),
        wire.bulk(keys.taken(lease).encode(), lease.encode()), wire.numbers(*numbers),
        wire.bulk(" ".join(forget).encode()),
        *(wire.numbers(priority, quota) for priority, quota in pairs),
    ))  # fmt: skip


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
    due_first: bool = False,
    span_ms: int = 0,
    forget: Sequence[str] = (),
) -> TakeResult:
    """Promote up to ``promote`` due jobs (ahead of the ready ones with ``due_first``),
    then lease up to ``limit`` jobs, visiting priority levels by ``plan`` (default:
    strict, 9 to 0). ``forget``: lease tokens of earlier takes whose replies were read,
    whose lists of what they took can go. Sent on a connection of the client's pool,
    packed by hand (redis-py would spend ~20 µs packing it)."""
    pairs = (plan or strict_plan(limit)) if limit else ()
    numbers = (lease_ms, limit, int(woken), result_ttl_ms, promote, int(due_first), span_ms)
    command = _pack_take(keys, lease, numbers, pairs, forget)
    [reply] = await lines_for(redis).send(keys.base, _TAKE, [command])
    jobs = [
        Taken(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]), lease, reply[i + 4])
        for i in range(4, len(reply), 5)
    ]
    return TakeResult(jobs, _promoted(reply), held=int(reply[3]))


async def idle(
    redis: Redis,
    keys: QueueKeys,
    token: str,
    *,
    lease_ms: int,
    hold_ms: int,
    forget: Sequence[str] = (),
) -> list[tuple[Taken, bool]]:
    """Offer to be handed the queue's next new job under the new lease ``token`` for
    ``hold_ms`` (enqueue.lua pushes it onto ``keys.direct(token)``), or with ``hold_ms`` 0
    withdraw the offer: then the jobs handed under it and still leased to it come back
    (one never popped, or popped by a BLPOP whose reply was lost), each with whether its
    cancellation was asked since. ``forget``: lease tokens whose jobs the caller has,
    whose lists of what they took can go."""
    script_keys = [
        keys.idle, keys.direct(token), keys.taken(token), keys.job_prefix, keys.taken_prefix,
    ]  # fmt: skip
    reply = await _IDLE(redis, script_keys, [f"{lease_ms} {token}", hold_ms, " ".join(forget)])
    return [(handed_job(reply[i], token), bool(reply[i + 1])) for i in range(0, len(reply), 2)]


def handed_job(item: bytes, token: str) -> Taken:
    """A job handed to an offer, as lua/include/handed.lua writes it:
    "<max_attempts> <id length> <id><payload>"; its first attempt, leased under ``token``."""
    max_attempts, length, rest = item.split(b" ", 2)
    size = int(length)
    return Taken(rest[:size], rest[size:], 1, int(max_attempts), token, 0)


def _promoted(reply: Sequence[Any]) -> Promoted:
    """The {now_us, promoted, next_due_ms} that take.lua and promote.lua reply with first."""
    next_due = int(reply[2])
    return Promoted(int(reply[1]), None if next_due < 0 else next_due, int(reply[0]))


async def promote(
    redis: Redis, keys: QueueKeys, *, limit: int, due_first: bool = False
) -> Promoted:
    """Move up to ``limit`` due jobs from the schedule to their ready lists (to the front,
    ahead of the ready jobs, with ``due_first``)."""
    reply = await _PROMOTE(
        redis,
        [keys.schedule, keys.notify, keys.dead, keys.seq, keys.job_prefix, *keys.ready_lists()],
        [limit, int(due_first)],
    )
    return _promoted(reply)


async def ack(
    redis: Redis,
    keys: QueueKeys,
    settlements: Sequence[Settlement],
    *,
    result_ttl_ms: int,
    kept_ms: int | None = None,
    keep_payload: bool = False,
    history_ms: int = 0,
    on_handoff: Callable[[], None] | None = None,
) -> list[bool]:
    """Settle a batch; True per job settled, False where the lease was lost. A complete
    job with no result is kept ``kept_ms`` (default: ``result_ttl_ms``), its payload only
    with ``keep_payload``. Outcomes are counted per minute for ``history_ms``, and the
    jobs that finished announced on the queue's settled channel. ``on_handoff`` is called
    if an outcome was handed off to a parent on another queue (to deliver it soon)."""
    head: list[Arg] = [
        result_ttl_ms,
        result_ttl_ms if kept_ms is None else kept_ms,
        int(keep_payload),
        history_ms,
        keys.settled_channel,
    ]
    try:
        batch = orjson.dumps(
            [(s.id.decode(), s.lease, s.outcome, s.data.decode(), s.delay_ms) for s in settlements]
        )
        args: list[Arg] = [*head, "json", batch]
    except UnicodeDecodeError:  # an id that is not UTF-8 (a third party's): one field each
        args = [*head, "args"]
        for s in settlements:
            args += (s.id, s.lease, s.outcome, s.data, s.delay_ms)
    codes = await _ACK(
        redis,
        [
            keys.active, keys.schedule, keys.dead, keys.notify, keys.schedule_wake,
            keys.job_prefix, keys.done_prefix, *keys.ready_lists(), keys.history_prefix,
            *keys.links(),
        ],
        args,
    )  # fmt: skip
    if on_handoff is not None and _HANDED_OFF in codes:
        on_handoff()
    return [int(code) != _LEASE_LOST for code in codes]  # one code per job: hot


# -- time: reclaim, extend -----------------------------------------------------------


async def reclaim(
    redis: Redis,
    keys: QueueKeys,
    *,
    limit: int,
    default_max_attempts: int,
    result_ttl_ms: int = 24 * 3600 * 1000,
    history_ms: int = 0,
) -> Reclaimed:
    """Return jobs whose lease expired to ready (or bury them past their attempts)."""
    reply = await _RECLAIM(
        redis,
        [
            keys.active, keys.dead, keys.notify, keys.job_prefix, *keys.ready_lists(),
            keys.history_prefix, keys.schedule, keys.schedule_wake, *keys.links(),
        ],
        [limit, default_max_attempts, result_ttl_ms, history_ms, keys.settled_channel],
    )  # fmt: skip
    dead = tuple(
        Taken(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]), "")
        for i in range(2, len(reply), 4)
    )
    return Reclaimed(int(reply[0]), int(reply[1]), dead)


async def extend(
    redis: Redis, keys: QueueKeys, leases: Sequence[tuple[bytes, str]], *, lease_ms: int
) -> Extended:
    """Renew leases; report the ones no longer held and the ones to abort."""
    args: list[Arg] = [lease_ms]
    for job_id, lease in leases:
        args += (job_id, lease)
    lost, aborted = await _EXTEND(redis, [keys.active, keys.job_prefix], args)
    return Extended(list(lost), list(aborted))


# -- admin: cancel, reschedule, requeue, purge, trim ----------------------------------


async def cancel(
    redis: Redis, keys: QueueKeys, job_id: str, *, result_ttl_ms: int
) -> tuple[CancelCode, str]:
    """Cancel a queued or scheduled job, or ask for a running job's abort."""
    code, state = await _CANCEL(
        redis,
        [
            keys.job_prefix,
            keys.schedule,
            keys.skips,
            keys.notify,
            keys.schedule_wake,
            *keys.links(),
            *keys.ready_lists(),
        ],
        [job_id, result_ttl_ms, keys.abort_channel, keys.settled_channel],
    )
    return cast("CancelCode", _meaning("cancel", code)), _text(state)


MAX_WAKE_TOKENS = 1000  # a resume wakes at most this many takes (each takes many jobs)


async def resume(redis: Redis, keys: QueueKeys) -> bool:
    """End a pause (and wake the workers); False if the queue was not paused."""
    script_keys = [keys.paused, keys.notify, *keys.ready_lists()]
    return bool(await _RESUME(redis, script_keys, [MAX_WAKE_TOKENS]))


async def progress(redis: Redis, keys: QueueKeys, taken: Taken, value: bytes) -> bool:
    """Record a running job's progress (JSON); False if its lease is no longer held."""
    key = keys.job_prefix.encode() + taken.id  # the id as bytes: it need not be UTF-8
    return bool(await _PROGRESS(redis, [key], [taken.lease, value]))


async def debounce(
    redis: Redis, keys: QueueKeys, key: str, job: NewJob, *, window_ms: int
) -> tuple[str, str]:
    """Schedule ``job`` (its id unused) as the run of debounce ``key`` that starts
    ``window_ms`` after the last call; (the run's id, "scheduled" or "debounced")."""
    job_id, state = await _DEBOUNCE(
        redis,
        [keys.schedule, keys.schedule_wake, keys.job_prefix, keys.debounce, keys.seq],
        [key, job.payload, job.priority, job.max_attempts, window_ms],
    )
    return _text(job_id), _text(state)


async def reschedule(
    redis: Redis, keys: QueueKeys, job_id: str, *, delay_ms: int, due_ms: int
) -> tuple[RescheduleCode, str]:
    """Move a scheduled job to a new due time."""
    code, state = await _RESCHEDULE(
        redis, [keys.job(job_id), keys.schedule, keys.schedule_wake], [job_id, delay_ms, due_ms]
    )
    return cast("RescheduleCode", _meaning("reschedule", code)), _text(state)


async def requeue(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> Requeued:
    """Move dead jobs (these, or the oldest ``limit``) back to ready."""
    requeued, skipped = await _REQUEUE(
        redis, [keys.dead, keys.notify, keys.job_prefix, *keys.ready_lists()], [limit, *job_ids]
    )
    return Requeued(int(requeued), int(skipped))


async def trim_dead(
    redis: Redis, keys: QueueKeys, *, max_jobs: int, max_age_ms: int, limit: int
) -> int:
    """Delete the oldest dead jobs beyond ``max_jobs`` or older than ``max_age_ms``."""
    script_keys = [keys.dead, keys.job_prefix, keys.inputs_prefix]
    return int(await _TRIM_DEAD(redis, script_keys, [max_jobs, max_age_ms, limit]))


async def purge(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> int:
    """Delete dead jobs (these, or the oldest ``limit``) and their records."""
    script_keys = [keys.dead, keys.job_prefix, keys.inputs_prefix]
    return int(await _PURGE(redis, script_keys, [limit, *job_ids]))


async def reconcile(redis: Redis, keys: QueueKeys, job_ids: Sequence[bytes]) -> int:
    """Repair the records among ``job_ids`` whose ready, schedule or lease entry vanished;
    how many were repaired."""
    if not job_ids:
        return 0
    _, repaired = await _RECONCILE(
        redis,
        [
            keys.schedule,
            keys.active,
            keys.notify,
            keys.job_prefix,
            *keys.ready_lists(),
            keys.schedule_wake,
            *keys.links(),
        ],
        list(job_ids),
    )
    return int(repaired)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


# -- messaging (mailboxes and groups) ------------------------------------------------------


async def channel_post(
    redis: Redis,
    keys: ChannelKeys,
    bodies: Sequence[bytes],
    *,
    sender: str,
    members_only: bool,
    max_messages: int,
) -> int | None:
    """Append messages; the first one's id (the rest follow), or None if ``members_only``
    and the sender is not a reader of the channel (nothing written)."""
    first = await _CHANNEL_POST(
        redis,
        [keys.seq, keys.log, keys.cursors, keys.dropped],
        [sender, int(members_only), max_messages, keys.posted_channel, *bodies],
    )
    return None if int(first) < 0 else int(first)


async def channel_commit(
    redis: Redis, keys: ChannelKeys, reader: str, upto: int, *, members_only: bool
) -> int | None:
    """Acknowledge up to ``upto``; the reader's cursor after it, or None if not a member."""
    cursor = await _CHANNEL_COMMIT(
        redis, [keys.log, keys.cursors, keys.seq], [reader, upto, int(members_only)]
    )
    return None if int(cursor) < 0 else int(cursor)


async def channel_join(redis: Redis, keys: ChannelKeys, member: str, *, history: bool) -> bool:
    """Join a group; False if a member already."""
    return bool(
        await _CHANNEL_JOIN(redis, [keys.cursors, keys.seq, keys.log], [member, int(history)])
    )


async def channel_leave(redis: Redis, keys: ChannelKeys, member: str) -> bool:
    """Leave a group; False if not a member."""
    return bool(await _CHANNEL_LEAVE(redis, [keys.cursors, keys.log], [member]))


# -- topics (durable fan-out to subscriber groups) ----------------------------------------


async def topic_publish(
    redis: Redis, keys: TopicKeys, bodies: Sequence[bytes], *, max_messages: int
) -> list[str]:
    """Append messages to a topic; their stream ids."""
    ids = await _TOPIC_PUBLISH(redis, [keys.log, keys.dropped], [max_messages, *bodies])
    return [_text(message_id) for message_id in ids]


async def topic_ack(
    redis: Redis,
    keys: TopicKeys,
    group: str,
    consumer: str,
    batch: Sequence[Settlement],
    attempts: Sequence[int],
    *,
    lease_ms: int,
    dead_max: int,
) -> list[bool]:
    """Settle a subscriber group's messages; True per message settled, False where the
    lease was lost (another worker claimed it)."""
    settlements = orjson.dumps(
        [
            [s.id.decode(), s.outcome, _error_of(s), s.delay_ms, n]
            for s, n in zip(batch, attempts, strict=True)
        ]
    )
    codes = await _TOPIC_ACK(
        redis,
        [keys.log, keys.retry, keys.dead],
        [group, consumer, lease_ms, dead_max, keys.processed_channel, settlements],
    )
    return [bool(code) for code in codes]


async def topic_reclaim(
    redis: Redis,
    keys: TopicKeys,
    group: str,
    consumer: str,
    *,
    lease_ms: int,
    count: int,
    cursor: str,
    max_attempts: int,
    dead_max: int,
) -> TopicClaim:
    """Claim messages whose lease ran out (or whose retry is due); dead-letter those past
    their attempts."""
    error = encode_error(
        "LeaseExpired", "lease expired on the last attempt: the worker died or stalled", ""
    )
    reply = await _TOPIC_RECLAIM(
        redis,
        [keys.log, keys.retry, keys.dead],
        [group, consumer, lease_ms, count, cursor, max_attempts, dead_max, error],
    )
    messages = [
        (reply[i], _pairs(reply[i + 1]), int(reply[i + 2])) for i in range(2, len(reply), 3)
    ]
    return TopicClaim(_text(reply[0]), int(reply[1]), messages)


async def topic_extend(
    redis: Redis, keys: TopicKeys, group: str, consumer: str, ids: Sequence[bytes]
) -> list[bytes]:
    """Renew the leases of running messages; the ids no longer held."""
    return list(await _TOPIC_EXTEND(redis, [keys.log], [group, consumer, *ids]))


def _error_of(settlement: Settlement) -> str:
    """The error a dead letter keeps (a subscriber's result is not kept)."""
    return settlement.data.decode() if settlement.outcome == "bury" else ""


def _pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}
