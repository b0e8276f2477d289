"""Writing jobs: ``enqueue.lua``, packed by hand and sent through ``routing`` (the hot path).

What every enqueue call of a queue shares (EVALSHA, the sha, KEYS, the priorities' ready
lists) is packed once and cached; a call packs its jobs (``wire.jobs``) and the resend
flag. The layout of KEYS and ARGV is enqueue.lua's header: checked against this packing
at import.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ...core.errors import NotReplicated
from ...core.lifecycle import NewJob
from .. import wire
from ..loader import Script
from ..routing import lines_for
from .replies import enqueued

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis

    from ...core.keys import QueueKeys
    from ...core.lifecycle import Enqueued
    from ..layout import Arg

_ENQUEUE = Script("enqueue")
SCRIPTS = (_ENQUEUE,)

# Packed as: the count, then what a queue's calls share (priorities, span_ms), the resend
# flag, and the jobs, NewJob's fields in order (wire.jobs).
_ENQUEUE.layout.expect(args=("count", "priorities", "span_ms", "resend", "jobs"))
_ENQUEUE.layout.expect_fields("jobs", NewJob._fields[: wire.JOB_ARGS])
_BEFORE_JOBS = _ENQUEUE.layout.arg("jobs").first - 1

MAX_ENQUEUE_BATCH = 1000  # jobs per script call: bounds its run time and unpack()


def _enqueue_call(
    keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int = 0
) -> tuple[list[str | bytes], list[Arg]]:
    """KEYS and ARGV of one enqueue call: only the ready lists its jobs use are declared.
    ``span_ms`` is the idempotency window of completed jobs with no result."""
    priorities = sorted({job.priority for job in jobs})
    fields: list[Arg] = []
    for job in jobs:
        fields += (job.id, job.payload, job.priority, job.max_attempts, job.delay_ms, job.due_ms)
        fields.append(int(job.fresh))
    layout = _ENQUEUE.layout
    script_keys = layout.keys(keys, ready=[keys.ready(priority) for priority in priorities])
    priority_list = ",".join(map(str, priorities))
    args = layout.args(
        count=len(jobs), priorities=priority_list, span_ms=span_ms, resend=0, jobs=fields
    )
    return script_keys, args


@lru_cache(maxsize=256)
def _enqueue_head(
    keys: QueueKeys, priorities: tuple[int, ...], span_ms: int
) -> tuple[int, bytes, bytes]:
    """The argument count without the jobs; RESP of EVALSHA, sha and KEYS; of the ARGV
    that follow the count (priorities, span_ms) up to the resend flag."""
    script_keys = _ENQUEUE.layout.keys(keys, ready=[keys.ready(p) for p in priorities])
    count, head = wire.evalsha_head(_ENQUEUE, script_keys)
    shared = wire.bulk(",".join(map(str, priorities)).encode(), b"%d" % span_ms)
    return count + _BEFORE_JOBS, head, shared


_FIRST_SEND, _RESEND = wire.bulk(b"0"), wire.bulk(b"1")  # the resend flag of a call


def _pack_enqueue(keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int = 0) -> bytes:
    """One enqueue script call, packed: the same KEYS and ARGV as ``_enqueue_call``."""
    before, flag, after = _pack_enqueue_parts(keys, jobs, span_ms)
    return before + flag + after


def _pack_enqueue_parts(
    keys: QueueKeys, jobs: Sequence[NewJob], span_ms: int
) -> tuple[bytes, bytes, bytes]:
    """A packed enqueue call in three parts: what goes before the resend flag, the flag
    (first send), and what goes after it."""
    priority = jobs[0].priority
    if all(job.priority == priority for job in jobs):
        priorities: tuple[int, ...] = (priority,)
    else:
        priorities = tuple(sorted({job.priority for job in jobs}))
    argc, head, shared = _enqueue_head(keys, priorities, span_ms)
    before = b"".join(
        (wire.array(argc + wire.JOB_ARGS * len(jobs)), head, wire.numbers(len(jobs)), shared)
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
    wait = [wire.wait(replicas, replica_timeout)] if replicas else []

    def resent(_: list[bytes]) -> list[bytes]:  # marked: no id may be taken as fresh
        return [before + _RESEND + after for before, _, after in parts] + wait

    parsed: list[list[Enqueued]] = [[] for _ in commands]

    def on_reply(index: int, reply: Any) -> None:  # each reply is decoded once, on arrival
        if index >= len(parsed):
            return  # WAIT's
        parsed[index] = enqueued(reply)
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
    """Write one job; with ``tick`` (spec name, tick ms), only if that tick is new. Off
    the hot path (a periodic scheduler's tick): an ordinary redis-py call."""
    script_keys, args = _enqueue_call(
        keys, [NewJob(job_id, payload, priority, max_attempts, delay_ms, due_ms)], span_ms
    )
    if tick is not None:
        args += tick  # after the one job: see enqueue.lua's header
    return enqueued(await _ENQUEUE(redis, script_keys, args))[0]
