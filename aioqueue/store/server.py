"""What the Redis server itself is set to, where it matters to a queue: its eviction policy.

Under any ``maxmemory-policy`` but ``noeviction``, a full server silently deletes keys:
ready lists, schedules, job records. Jobs vanish with no error anywhere. aioqueue cannot
work around that, so it says so loudly (workers and producers when they connect, and when
the policy changes; ``aioqueue check`` fails on it), as BullMQ does.
"""

from __future__ import annotations

import logging
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

    @property
    def unsafe(self) -> bool:
        return self.policy is not None and self.policy != SAFE_POLICY

    def problem(self) -> str | None:
        """What is wrong, in one line; None if nothing is (as far as can be seen)."""
        if self.unsafe:
            return (
                f"Redis maxmemory-policy is {self.policy!r}: when memory is full the server "
                f"silently deletes queue keys and jobs are lost; set it to {SAFE_POLICY!r}"
            )
        if self.evicted_keys:
            return (
                f"Redis has evicted {self.evicted_keys} key(s) since it started: jobs may "
                "have been lost, or left queued with no ready entry (`aioqueue reconcile` "
                "puts those back)"
            )
        return None


async def eviction(redis: Redis) -> Eviction:
    """Read the eviction policy (CONFIG GET) and INFO stats; never raise for a refusal."""
    try:
        config: dict[Any, Any] = await redis.config_get("maxmemory-policy")
        raw = config.get(b"maxmemory-policy", config.get("maxmemory-policy"))
        policy = raw.decode() if isinstance(raw, bytes) else raw
    except ResponseError:  # CONFIG denied (ACL) or renamed (managed services)
        policy = None
    try:
        stats: dict[Any, Any] = await redis.info("stats")
        evicted = int(stats.get("evicted_keys", 0))
    except ResponseError:
        evicted = 0
    return Eviction(policy, evicted)


async def warn_if_evicting(redis: Redis, *, known: str | None = None) -> str | None:
    """Log a warning if the server may evict queue keys (unless ``known`` already said
    it); returns the problem, so a caller can warn again only when it changes."""
    problem = (await eviction(redis)).problem()
    if problem is not None and problem != known:
        logger.warning("%s", problem)
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
