"""Jobs linked to others (``include/links.lua``): ``enqueue_linked.lua`` writes the jobs of
groups and workflows (packed and sent through ``routing``, as plain enqueues are), and
``deliver.lua`` counts outcomes handed off by other queues (a redis-py call)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.errors import NotReplicated
from ...core.lifecycle import HandedOff, LinkedJob, NewJob
from .. import wire
from ..loader import Script
from ..routing import lines_for
from .enqueues import MAX_ENQUEUE_BATCH
from .replies import enqueued

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from ...core.keys import QueueKeys
    from ...core.lifecycle import Enqueued
    from ..layout import Arg

_ENQUEUE_LINKED = Script("enqueue_linked")
_DELIVER = Script("deliver")
SCRIPTS = (_ENQUEUE_LINKED, _DELIVER)

# A linked job's fields: its NewJob's but ``fresh``, then the LinkedJob's own (the header's
# order, checked here), so both are packed as slices of the tuples.
_NEW_FIELDS = NewJob._fields.index("fresh")
_ENQUEUE_LINKED.layout.expect_fields("jobs", NewJob._fields[:_NEW_FIELDS] + LinkedJob._fields[1:])
_DELIVER.layout.expect_fields("outcomes", HandedOff._fields[2:])


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
    layout = _ENQUEUE_LINKED.layout
    head = wire.evalsha_head(_ENQUEUE_LINKED.on(redis), layout.keys(keys))

    def call(chunk: Sequence[LinkedJob], sealing: Sequence[str]) -> bytes:
        fields: list[Arg] = []
        for linked in chunk:
            fields += (*linked.job[:_NEW_FIELDS], *linked[1:])
        args = layout.args(
            count=len(chunk), span_ms=span_ms, seal=" ".join(sealing),
            result_ttl_ms=result_ttl_ms, settled_channel=keys.settled_channel, jobs=fields,
        )  # fmt: skip
        return wire.call(head, args)

    chunks = [
        jobs[start : start + MAX_ENQUEUE_BATCH] for start in range(0, len(jobs), MAX_ENQUEUE_BATCH)
    ]
    single = len(chunks) <= 1
    commands = [call(chunk, seal if single else ()) for chunk in chunks or [()]]
    replicas = max((linked.job.replicas for linked in jobs), default=0)
    wait = [wire.wait(replicas, replica_timeout)] if replicas else []
    sender = lines_for(redis)
    replies = await sender.send(keys.base, _ENQUEUE_LINKED, commands + wait)
    if wait and int(replies[-1]) < replicas:
        ids = [linked.job.id for linked in jobs]
        raise NotReplicated(ids, int(replies[-1]), replicas, replica_timeout)
    if not single and seal:
        await sender.send(keys.base, _ENQUEUE_LINKED, [call((), seal)])
    return [item for reply in replies[: len(commands)] for item in enqueued(reply)]


async def deliver(
    redis: Redis, keys: QueueKeys, outcomes: Sequence[HandedOff], *, result_ttl_ms: int
) -> int:
    """Count, in their parents' queue ``keys``, outcomes handed off by other queues."""
    fields = [value for outcome in outcomes for value in outcome[2:]]
    args = _DELIVER.layout.args(
        result_ttl_ms=result_ttl_ms, settled_channel=keys.settled_channel, outcomes=fields
    )
    return int(await _DELIVER(redis, _DELIVER.layout.keys(keys), args))
