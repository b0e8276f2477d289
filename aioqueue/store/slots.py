"""MULTI/EXEC of commands whose keys share one slot (a queue's: one hash tag): one
snapshot of a queue's counts, one atomic change of its settings.

On one server (or under Sentinel): the client's own transaction pipeline. On a Redis
Cluster, redis-py 8.1's transaction pipeline finds each queued command's slot in a new
thread running a new event loop, and waits for it, blocking the loop (~1 ms a command
on a busy machine: ``reads.counts`` queues 20); so the transaction goes instead on a
plain client of the node serving the key's slot (``routing.Lines.node_client``), and
this module follows the cluster's answers itself:

- MOVED (the slot has moved, or a failover): the slot map is read again, and again;
- TRYAGAIN or ASK (the slot is being migrated: its keys are split between two nodes, so
  no one snapshot exists until the move ends): pause, backing off, and again, within the
  call's deadline (``routing.TRY_AGAIN_FOR`` outside one);
- a node lost: the slot map is read again and the transaction goes once more (a read, or
  a write that may run twice: a queue's settings set to the same values).

A refused MULTI runs nothing (Redis aborts the EXEC), so sending it again is safe.

Over its ``maxmemory`` (noeviction), Redis refuses every command queued inside MULTI,
reads too: ``snapshot`` then reads without one, so that a full Redis still shows its
counts (when they are most wanted).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import AskError, MovedError, OutOfMemoryError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import deadline
from .routing import MAX_REDIRECTS, TRY_AGAIN_FOR, Pause, is_cluster, lines_for, read_slots

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis, RedisCluster
    from redis.asyncio.client import Pipeline


async def transaction(redis: Redis, key: str, build: Callable[[Pipeline], object]) -> list[Any]:
    """Run the commands ``build`` queues on a pipeline, every key in ``key``'s slot, as one
    MULTI/EXEC; their replies (redis-py's, as the pipeline gives them)."""
    if not is_cluster(redis):
        return await _execute(redis, build)
    cluster = cast("RedisCluster", redis)
    await cluster.initialize()  # (once: it returns at once when done)
    lines, follow = lines_for(redis), _Follow(cluster)
    while True:
        node = cluster.get_node_from_key(key)
        try:
            if node is None:  # no master for the slot (a failover under way)
                raise RedisConnectionError(f"no master serves the slot of {key!r}")
            return await _execute(lines.node_client(node), build)
        except (AskError, TryAgainError) as exc:  # (MovedError is an AskError)
            lines.redirects[type(exc).__name__] += 1
            await follow.redirect(exc)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            await follow.lost(exc)


async def snapshot(redis: Redis, key: str, build: Callable[[Pipeline], object]) -> list[Any]:
    """``transaction`` for reads only: if Redis is out of memory, which refuses MULTI, the
    same reads as a plain pipeline (each exact, together not quite one snapshot)."""
    try:
        return await transaction(redis, key, build)
    except OutOfMemoryError:
        return await _execute(redis, build, transaction=False)


async def _execute(
    redis: Redis, build: Callable[[Pipeline], object], *, transaction: bool = True
) -> list[Any]:
    async with redis.pipeline(transaction=transaction) as pipe:
        build(pipe)
        return await pipe.execute()


class _Follow:
    """What one transaction does about the cluster's answers (see the module's docstring):
    each returns when it is time to go again, or raises what ends the call."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.cluster, self.pause = cluster, Pause()
        self.loop = asyncio.get_running_loop()
        self.give_up = self.loop.time() + (deadline.remaining(TRY_AGAIN_FOR) or 0.0)
        self.moves, self.lost_once = 0, False

    async def redirect(self, redirect: AskError | TryAgainError) -> None:
        if isinstance(redirect, MovedError):
            self.moves += 1
            if self.moves >= MAX_REDIRECTS:
                raise redirect
            await read_slots(self.cluster, None)
        elif self.loop.time() >= self.give_up:
            raise redirect
        else:
            await self.pause.sleep()

    async def lost(self, error: RedisConnectionError | RedisTimeoutError) -> None:
        if self.lost_once or self.loop.time() >= self.give_up:
            raise error
        self.lost_once = True
        await read_slots(self.cluster, self.pause)
