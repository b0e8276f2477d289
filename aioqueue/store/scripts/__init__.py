"""One typed async function per Lua script in ``store/lua`` (``take.lua`` ↔ ``take()``),
in one module per family:

enqueues   enqueue: writing jobs (the producer's hot path)
leasing    take, idle, promote, ack, extend, reclaim, progress: a job's lease
links      enqueue_linked, deliver: groups and workflows
admin      cancel, reschedule, requeue, purge, trim_dead, reconcile, resume, debounce
mailboxes  channel_post, channel_commit, channel_join, channel_leave
topics     topic_publish, topic_ack, topic_reclaim, topic_extend
replies    CODES, the one table of return codes, and the readers of shared replies

A script's KEYS and ARGV are stated once, in its header (``layout``): a wrapper builds them
by name, or, where it packs a call from cached parts, checks its order at import.

Two ways to call a script, on purpose. The calls a job meets on its way (enqueue,
enqueue_linked, take, idle, ack) are packed by hand and sent through ``routing.Lines``:
what a queue's calls share is packed once, and redis-py's packing and command layer cost
more than the rest of the call (~0.5 µs an argument). Every other call (admin, lease
upkeep, messaging, topics, a periodic tick's enqueue) goes through redis-py's command
layer (``Script.__call__``: EVALSHA, a reload on NOSCRIPT), which routes and retries as
every other command does and works with any client that has ``evalsha``, a pipeline's
included: packing these by hand would save little and cost that.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from redis.asyncio import RedisCluster
from redis.exceptions import ResponseError

from ..routing import lines_for
from . import admin, enqueues, leasing, links, mailboxes, topics
from .replies import CODES

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ALL_SCRIPTS", "CODES", "load_all"]

ALL_SCRIPTS = (
    *enqueues.SCRIPTS,
    *leasing.SCRIPTS,
    *links.SCRIPTS,
    *admin.SCRIPTS,
    *mailboxes.SCRIPTS,
    *topics.SCRIPTS,
)


async def load_all(redis: Redis) -> None:
    """Load every script up front, so the hot path never meets NOSCRIPT: those the server
    lacks, asked in one round trip (a worker's start waits for it) and loaded in one more;
    on a Cluster, on each primary at once (their cluster builds), rather than a round of
    every primary per script."""
    if not isinstance(redis, RedisCluster):
        await _load(redis, redis)
        return
    await redis.initialize()
    lines = lines_for(redis)
    await asyncio.gather(*(_load(lines.node_client(n), redis) for n in redis.get_primaries()))


async def _load(server: Redis, client: Redis) -> None:
    """Load the scripts ``server`` lacks, as built for ``client``'s (see ``Script.on``).
    Usually it has them all (another worker or producer loaded them): asking costs ~40
    bytes a script, sending them again ~370 KB of Lua for the server to hash."""
    builds = [script.on(client) for script in ALL_SCRIPTS]
    try:
        present = await server.script_exists(*(build.sha for build in builds))
    except ResponseError:  # SCRIPT EXISTS refused (an ACL from before it was asked for)
        present = [False] * len(builds)
    missing = [build for build, there in zip(builds, present, strict=True) if not there]
    if not missing:
        return
    pipe = server.pipeline(transaction=False)
    for build in missing:
        pipe.script_load(build.source)
    await pipe.execute()
