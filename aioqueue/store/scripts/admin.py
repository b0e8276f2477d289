"""A queue's admin calls, one script each: cancel, reschedule, requeue, purge, trim_dead,
reconcile, resume, the tenants' recount and ranking, and debounce (a producer's call
outside the enqueue batcher). Ordinary
redis-py calls (``Script.__call__``), KEYS and ARGV built by name from each header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ...core.lifecycle import CancelCode, Requeued, RescheduleCode
from ...core.records import TenantCount
from ..loader import Script
from .replies import meaning, text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from ...core.keys import QueueKeys
    from ...core.lifecycle import NewJob

_CANCEL = Script("cancel")
_RESCHEDULE = Script("reschedule")
_REQUEUE = Script("requeue")
_PURGE = Script("purge")
_TRIM_DEAD = Script("trim_dead")
_RECONCILE = Script("reconcile")
_RESUME = Script("resume")
_DEBOUNCE = Script("debounce")
_RECOUNT_TENANTS = Script("recount_tenants")
_TOP_TENANTS = Script("top_tenants")
SCRIPTS = (
    _CANCEL, _RESCHEDULE, _REQUEUE, _PURGE, _TRIM_DEAD, _RECONCILE, _RESUME, _DEBOUNCE,
    _RECOUNT_TENANTS, _TOP_TENANTS,
)  # fmt: skip

MAX_WAKE_TOKENS = 1000  # a resume wakes at most this many takes (each takes many jobs)


async def cancel(
    redis: Redis, keys: QueueKeys, job_id: str, *, result_ttl_ms: int
) -> tuple[CancelCode, str]:
    """Cancel a queued or scheduled job, or ask for a running job's abort."""
    args = _CANCEL.layout.args(
        id=job_id,
        result_ttl_ms=result_ttl_ms,
        abort_channel=keys.abort_channel,
        settled_channel=keys.settled_channel,
    )
    code, state = await _CANCEL(redis, _CANCEL.layout.keys(keys), args)
    return cast("CancelCode", meaning("cancel", code)), text(state)


async def resume(redis: Redis, keys: QueueKeys) -> bool:
    """End a pause (and wake the workers); False if the queue was not paused."""
    args = _RESUME.layout.args(tokens=MAX_WAKE_TOKENS)
    return bool(await _RESUME(redis, _RESUME.layout.keys(keys), args))


async def debounce(
    redis: Redis, keys: QueueKeys, key: str, job: NewJob, *, window_ms: int
) -> tuple[str, str]:
    """Schedule ``job`` (its id unused) as the run of debounce ``key`` that starts
    ``window_ms`` after the last call; (the run's id, "scheduled" or "debounced")."""
    args = _DEBOUNCE.layout.args(
        key=key,
        payload=job.payload,
        priority=job.priority,
        max_attempts=job.max_attempts,
        window_ms=window_ms,
    )
    job_id, state = await _DEBOUNCE(redis, _DEBOUNCE.layout.keys(keys), args)
    return text(job_id), text(state)


async def reschedule(
    redis: Redis, keys: QueueKeys, job_id: str, *, delay_ms: int, due_ms: int
) -> tuple[RescheduleCode, str]:
    """Move a scheduled job to a new due time."""
    script_keys = _RESCHEDULE.layout.keys(keys, job=keys.job(job_id))
    args = _RESCHEDULE.layout.args(id=job_id, delay_ms=delay_ms, due_ms=due_ms)
    code, state = await _RESCHEDULE(redis, script_keys, args)
    return cast("RescheduleCode", meaning("reschedule", code)), text(state)


async def requeue(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> Requeued:
    """Move dead jobs (these, or the oldest ``limit``) back to ready."""
    args = _REQUEUE.layout.args(limit=limit, ids=list(job_ids))
    requeued, skipped = await _REQUEUE(redis, _REQUEUE.layout.keys(keys), args)
    return Requeued(int(requeued), int(skipped))


async def trim_dead(
    redis: Redis, keys: QueueKeys, *, max_jobs: int, max_age_ms: int, limit: int
) -> int:
    """Delete the oldest dead jobs beyond ``max_jobs`` or older than ``max_age_ms``."""
    args = _TRIM_DEAD.layout.args(max_jobs=max_jobs, max_age_ms=max_age_ms, limit=limit)
    return int(await _TRIM_DEAD(redis, _TRIM_DEAD.layout.keys(keys), args))


async def purge(redis: Redis, keys: QueueKeys, job_ids: Sequence[str], *, limit: int) -> int:
    """Delete dead jobs (these, or the oldest ``limit``) and their records."""
    args = _PURGE.layout.args(limit=limit, ids=list(job_ids))
    return int(await _PURGE(redis, _PURGE.layout.keys(keys), args))


async def reconcile(redis: Redis, keys: QueueKeys, job_ids: Sequence[bytes]) -> int:
    """Repair the records among ``job_ids`` whose ready, schedule or lease entry vanished;
    how many were repaired."""
    if not job_ids:
        return 0
    args = _RECONCILE.layout.args(ids=list(job_ids))
    _, repaired = await _RECONCILE(redis, _RECONCILE.layout.keys(keys), args)
    return int(repaired)


async def recount_tenants(redis: Redis, keys: QueueKeys, tenant: str = "") -> int:
    """Set the tenants' running counts (``tenant``'s only, if given) to their jobs leased
    now (a vanished record left one counted for good); how many were wrong."""
    args = _RECOUNT_TENANTS.layout.args(tenant=tenant)
    wrong = await _RECOUNT_TENANTS(redis, _RECOUNT_TENANTS.layout.keys(keys), args)
    return int(wrong)


async def top_tenants(redis: Redis, keys: QueueKeys, want: int) -> list[TenantCount]:
    """The ``want`` tenants with the most queued jobs, most first, with their running jobs
    and whether their limits hold them now (one call; none without tenants)."""
    if want <= 0:
        return []
    args = _TOP_TENANTS.layout.args(want=want)
    flat = await _TOP_TENANTS(redis, _TOP_TENANTS.layout.keys(keys), args)
    return [
        TenantCount(name.decode("utf-8", "replace"), int(queued), int(running), bool(held))
        for name, queued, running, held in zip(*[iter(flat)] * 4, strict=True)
    ]
