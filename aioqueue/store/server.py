"""What the Redis server itself is set to, where it matters to a queue: its eviction policy,
and whether its memory is full.

Under any ``maxmemory-policy`` but ``noeviction``, a full server silently deletes keys:
ready lists, schedules, job records. Jobs vanish with no error anywhere. aioqueue cannot
work around that, so it says so loudly (workers and producers when they connect, and when
the policy changes; ``aioqueue check`` fails on it), as BullMQ does. Under ``noeviction``
a full server refuses writes instead: nothing is lost, but nothing moves (no enqueue, no
take, no ack) until memory is freed or ``maxmemory`` raised, so that is said as loudly.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

SAFE_POLICY = "noeviction"


@dataclass(frozen=True, slots=True)
class Eviction:
    """The server's eviction policy (None if CONFIG is refused: ACLs, managed services)
    and how many keys it has evicted since it started."""

    policy: str | None
    evicted_keys: int
    used_memory: int = 0  # bytes, as Redis counts them against maxmemory (INFO memory)
    maxmemory: int = 0  # bytes; 0: no limit

    @property
    def unsafe(self) -> bool:
        return self.policy is not None and self.policy != SAFE_POLICY

    @property
    def full(self) -> bool:
        """Its memory has reached ``maxmemory``: under noeviction it refuses every write."""
        return 0 < self.maxmemory <= self.used_memory

    def problem(self) -> str | None:
        """What is wrong, in one line; None if nothing is (as far as can be seen). (The
        same line while the same thing is wrong: a worker says it again only when it
        changes.)"""
        if self.unsafe:
            return (
                f"Redis maxmemory-policy is {self.policy!r}: when memory is full the server "
                f"silently deletes queue keys and jobs are lost; set it to {SAFE_POLICY!r}"
            )
        if self.full:
            return (
                f"Redis is full (its maxmemory, {self.maxmemory / 2**20:.1f} MiB, is used): "
                "it refuses every write, so enqueues fail and workers can neither take nor "
                "ack jobs until memory is freed or maxmemory is raised"
            )
        if self.evicted_keys:
            return (
                f"Redis has evicted {self.evicted_keys} key(s) since it started: jobs may "
                "have been lost, or left queued with no ready entry (`aioqueue reconcile` "
                "puts those back)"
            )
        return None


async def eviction(redis: Redis) -> Eviction:
    """Read the eviction policy (CONFIG GET), INFO stats and memory; never raise for a
    refusal."""
    try:
        config: dict[Any, Any] = await redis.config_get("maxmemory-policy")
        raw = config.get(b"maxmemory-policy", config.get("maxmemory-policy"))
        policy = raw.decode() if isinstance(raw, bytes) else raw
    except ResponseError:  # CONFIG denied (ACL) or renamed (managed services)
        policy = None
    try:
        stats: dict[Any, Any] = await redis.info("stats")
        evicted = int(stats.get("evicted_keys", 0))
        memory: dict[Any, Any] = await redis.info("memory")
        # As Redis counts against maxmemory: replicas' and AOF buffers left out.
        used = int(memory.get("used_memory", 0)) - int(memory.get("mem_not_counted_for_evict", 0))
        limit = int(memory.get("maxmemory", 0))
    except ResponseError:
        evicted, used, limit = 0, 0, 0
    return Eviction(policy, evicted, used, limit)


SAY_AGAIN_AFTER = 3600.0  # seconds: a problem that lasts is said again this often
_SAID: weakref.WeakKeyDictionary[Redis, tuple[str | None, float]] = weakref.WeakKeyDictionary()


async def warn_if_evicting(redis: Redis) -> str | None:
    """Log a warning if the server may evict queue keys or is full: when that is new for
    this client (it connected, or a worker's look found it changed), and again every
    SAY_AGAIN_AFTER while it lasts; not at a worker's first look just after its App
    connected. Returns the problem."""
    problem, now = (await eviction(redis)).problem(), time.monotonic()
    said, said_at = _SAID.get(redis, (None, 0.0))
    if problem is not None and (problem != said or now - said_at >= SAY_AGAIN_AFTER):
        logger.warning("%s", problem)
        said_at = now
    _SAID[redis] = (problem, said_at)
    return problem


REQUIRED_COMMANDS = (
    # scripts (every change to jobs, messages and topics is one)
    "evalsha", "script|load",
    # waiting, reading, admin and the worker's own keys
    "blpop", "time", "ping", "info",
    "get", "set", "del", "mget", "incr", "incrby", "decr", "pexpire", "pexpireat", "exists",
    "hget", "hgetall", "hset", "hsetnx", "hdel", "hmget", "hincrby", "hexists", "hlen", "hvals",
    "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zadd", "zrem", "zcard",
    "zscore", "zremrangebyscore", "zremrangebyrank", "zincrby",
    "llen", "lpop", "lpush", "lrange", "lpos", "rpush", "ltrim", "rpop", "lmove",
    "smembers", "sadd", "srem", "sismember", "scan",
    # streams (mailboxes, groups, topics)
    "xadd", "xrange", "xrevrange", "xlen", "xreadgroup", "xack", "xpending", "xclaim",
    "xautoclaim", "xtrim", "xgroup|create", "xinfo|stream", "xinfo|groups",
    # pub/sub (results, aborts, messaging wake-ups) and pipelines
    "publish", "subscribe", "unsubscribe", "multi", "exec",
    # sharded pub/sub, on a Redis Cluster
    "spublish", "ssubscribe", "sunsubscribe",
    # the start-up check of the eviction policy (optional: refused, it is skipped), and of
    # the scripts the server has already (optional: refused, every script is sent)
    "config|get", "script|exists",
)  # fmt: skip
"""The commands an ACL user needs for everything aioqueue does (README, "Running at scale";
``tests/test_acl.py`` runs a worker and a producer as a user with exactly these)."""
