"""Workers' heartbeats, per queue: ``worker:<id>`` holds a worker's latest beat (JSON,
expiring after three missed beats) and ``workers`` lists the ids that beat for the queue.

Each call touches one queue's keys (one Cluster slot)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import orjson

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ..core.keys import QueueKeys


async def beat(redis: Redis, keys: QueueKeys, worker_id: str, info: bytes, *, ttl_ms: int) -> None:
    """Refresh one worker's heartbeat in one queue."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(keys.worker(worker_id), info, px=ttl_ms)
        pipe.sadd(keys.workers, worker_id)
        await pipe.execute()


async def clear(redis: Redis, keys: QueueKeys, worker_id: str) -> None:
    """Remove a worker's heartbeat from one queue (it stopped cleanly)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(keys.worker(worker_id))
        pipe.srem(keys.workers, worker_id)
        await pipe.execute()


def mixed_task_sets(beats: list[dict[str, Any]]) -> str | None:
    """If the live workers of one queue serve different task sets (two apps sharing a
    prefix and a queue name, or a deploy half done), say how; else None. A worker that
    lacks a job's task buries it as UnknownTask, so this is worth a loud warning."""
    sets: dict[tuple[str, ...], list[str]] = {}
    for beat in beats:
        if isinstance(beat.get("tasks"), list):  # older workers do not say
            sets.setdefault(tuple(sorted(beat["tasks"])), []).append(str(beat.get("id")))
    if len(sets) < 2:
        return None
    described = "; ".join(
        f"{', '.join(workers)} run [{', '.join(tasks)}]" for tasks, workers in sorted(sets.items())
    )
    return (
        f"live workers serve different task sets ({described}): a worker without a job's "
        "task buries it as UnknownTask. Give each app its own prefix (App(prefix=...) or "
        "AIOQUEUE_PREFIX), or finish the deploy"
    )


def mixed_windows(beats: list[dict[str, Any]]) -> str | None:
    """If the live workers of one queue keep completed jobs' ids for different idempotency
    windows, say so: each looks for them where it would have put them, so a job completed
    by one is not found by another (an id reused then runs again)."""
    windows = {beat["idempotency_ms"] for beat in beats if "idempotency_ms" in beat}
    if len(windows) < 2:
        return None
    shown = ", ".join(f"{ms / 1000:g}s" for ms in sorted(windows))
    return (
        f"live workers use different idempotency windows ({shown}): set idempotency_ttl "
        "(and result_ttl) the same in every process of the app, producers included"
    )


async def live_workers(redis: Redis, keys: QueueKeys) -> list[dict[str, Any]]:
    """The beats of the workers whose heartbeat is fresh; expired ids are pruned."""
    members = cast("set[bytes]", await redis.smembers(keys.workers))
    ids = sorted(raw.decode("utf-8", "replace") for raw in members)
    if not ids:
        return []
    names = [keys.worker(worker_id) for worker_id in ids]
    beats = cast("list[bytes | None]", await redis.mget(names))
    dead = [worker_id for worker_id, beat in zip(ids, beats, strict=True) if beat is None]
    if dead:
        await redis.srem(keys.workers, *dead)
    return [orjson.loads(beat) for beat in beats if beat is not None]
