"""A job's lease, from take to ack: ``take.lua`` (and ``promote.lua``, what a take does
first), ``idle.lua`` (an offer to be handed the next job), ``ack.lua``, and the lease's
upkeep: ``extend.lua``, ``reclaim.lua``, ``progress.lua``.

Take, offer and ack are the worker's hot path: packed by hand and sent through ``routing``
(what every call of a queue shares is packed once and cached; a take's arguments, packed
straight, are checked against take.lua's header at import). The upkeep calls go through
redis-py (``Script.__call__``).
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from ...core.lifecycle import Extended, Promoted, Reclaimed, Settlement, Taken, TakeResult
from ...core.priorities import strict_plan
from .. import wire
from ..loader import Script
from ..routing import lines_for
from .replies import code_of

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis

    from ...core.keys import QueueKeys
    from ..layout import Arg

_TAKE = Script("take")
_PROMOTE = Script("promote")
_IDLE = Script("idle")
_ACK = Script("ack")
_EXTEND = Script("extend")
_RECLAIM = Script("reclaim")
_PROGRESS = Script("progress")
SCRIPTS = (_TAKE, _PROMOTE, _IDLE, _ACK, _EXTEND, _RECLAIM, _PROGRESS)

# A take is packed as: the keys every take of a queue shares, then the lease's own list
# (last), the lease, seven numbers, the tokens to forget, and the plan's pairs.
_TAKE_NUMBERS = ("lease_ms", "limit", "woken", "result_ttl_ms", "promote", "front", "span_ms")
_TAKE.layout.expect(args=("lease", *_TAKE_NUMBERS, "forget", "plan"), last_key="taken")
_TAKE_ARGC = 3 + _TAKE.layout.key_count + _TAKE.layout.arg("plan").first - 1  # but the pairs
_ACK.layout.expect_fields("settlements", [field.name for field in fields(Settlement)])

_LEASE_LOST = code_of("ack", "lease_lost")
_HANDED_OFF = code_of("ack", "handed_off")


@lru_cache(maxsize=256)
def _take_head(keys: QueueKeys) -> bytes:
    """RESP of EVALSHA, the take script's sha, its key count and its keys but the last
    (the lease's own ``taken`` list): the same for every take of the queue."""
    *shared, _ = _TAKE.layout.keys(keys, taken="")
    key_count = b"%d" % _TAKE.layout.key_count
    return wire.bulk(b"EVALSHA", _TAKE.sha.encode(), key_count, *map(wire.arg_bytes, shared))


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
    layout = _IDLE.layout
    script_keys = layout.keys(keys, direct=keys.direct(token), taken=keys.taken(token))
    args = layout.args(member=f"{lease_ms} {token}", hold_ms=hold_ms, forget=" ".join(forget))
    command = wire.call(wire.evalsha_head(_IDLE, script_keys), args)
    [reply] = await lines_for(redis).send(keys.base, _IDLE, [command])
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
    args = _PROMOTE.layout.args(limit=limit, front=int(due_first))
    return _promoted(await _PROMOTE(redis, _PROMOTE.layout.keys(keys), args))


def _ack_batch(settlements: Sequence[Settlement]) -> tuple[str, list[Arg]]:
    """ack.lua's format and settlements: one JSON argument (packing five arguments a job
    costs more than the rest of the ack), or, for ids that are not UTF-8, five a job."""
    try:
        rows = [
            (s.id.decode(), s.lease, s.outcome, s.data.decode(), s.delay_ms) for s in settlements
        ]
    except UnicodeDecodeError:  # a third party's id
        return "args", [
            value for s in settlements for value in (s.id, s.lease, s.outcome, s.data, s.delay_ms)
        ]
    return "json", [orjson.dumps(rows)]


@lru_cache(maxsize=256)
def _ack_head(keys: QueueKeys, script: Script) -> tuple[int, bytes]:
    return wire.evalsha_head(script, _ACK.layout.keys(keys))


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
    form, batch = _ack_batch(settlements)
    args = _ACK.layout.args(
        result_ttl_ms=result_ttl_ms,
        kept_ms=result_ttl_ms if kept_ms is None else kept_ms,
        keep_payload=int(keep_payload),
        history_ms=history_ms,
        settled_channel=keys.settled_channel,
        format=form,
        settlements=batch,
    )
    command = wire.call(_ack_head(keys, _ACK.on(redis)), args)
    [codes] = await lines_for(redis).send(keys.base, _ACK, [command])
    if on_handoff is not None and _HANDED_OFF in codes:
        on_handoff()
    return [int(code) != _LEASE_LOST for code in codes]  # one code per job: hot


async def extend(
    redis: Redis, keys: QueueKeys, leases: Sequence[tuple[bytes, str]], *, lease_ms: int
) -> Extended:
    """Renew leases; report the ones no longer held and the ones to abort."""
    pairs = [value for job_id, lease in leases for value in (job_id, lease)]
    args = _EXTEND.layout.args(lease_ms=lease_ms, leases=pairs)
    lost, aborted = await _EXTEND(redis, _EXTEND.layout.keys(keys), args)
    return Extended(list(lost), list(aborted))


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
    args = _RECLAIM.layout.args(
        limit=limit,
        default_max_attempts=default_max_attempts,
        result_ttl_ms=result_ttl_ms,
        history_ms=history_ms,
        settled_channel=keys.settled_channel,
    )
    reply = await _RECLAIM(redis, _RECLAIM.layout.keys(keys), args)
    dead = tuple(
        Taken(reply[i], reply[i + 1], int(reply[i + 2]), int(reply[i + 3]), "")
        for i in range(2, len(reply), 4)
    )
    return Reclaimed(int(reply[0]), int(reply[1]), dead)


async def progress(redis: Redis, keys: QueueKeys, taken: Taken, value: bytes) -> bool:
    """Record a running job's progress (JSON); False if its lease is no longer held."""
    job = keys.job_prefix.encode() + taken.id  # the id as bytes: it need not be UTF-8
    args = _PROGRESS.layout.args(lease=taken.lease, value=value)
    return bool(await _PROGRESS(redis, _PROGRESS.layout.keys(keys, job=job), args))
