"""Where packed script calls go: a connection to the server that holds the queue.

The hot path (enqueues, takes, offers, acks: see ``scripts``) sends EVALSHA packed by hand
(``wire``) on a raw connection, not through redis-py's command layer. ``Lines`` finds
that connection:

- one Redis server (or a Sentinel-managed master): the client's own pool. A flush may
  keep its connection between calls (``keep=True``: the enqueue batcher's line); under
  Sentinel that connection follows the master itself (``following``), and a write
  refused as READONLY (a demoted server) drops it and goes again on a fresh one.
- Redis Cluster: a pool per node, for the master that serves the key's slot. Replies
  that redirect are followed per call: MOVED (the slot has moved: the slot map is read
  again), ASK (the slot is being migrated and the keys are on the target: ``ASKING``
  before the call there) and TRYAGAIN (a multi-key call while the keys are split
  between two nodes: pause, backing off, and send again, for as long as the call's
  deadline allows: ``deadline``). Only the calls that were redirected are sent again,
  so a call that ran is never repeated. A node lost fails the call, unless it is an
  enqueue (patient): that reads the slot map again and goes again, as resent.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.exceptions import (
    AskError,
    MovedError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import describe
from . import deadline, wire

if TYPE_CHECKING:
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.connection import AbstractConnection

    from .loader import Script

MAX_REDIRECTS = 16  # rounds of MOVED before giving up on a call (a slot map gone wrong)
TRY_AGAIN_PAUSE = 0.05  # seconds before resending a call refused with TRYAGAIN, doubling...
TRY_AGAIN_MAX_PAUSE = 0.5  # ...up to this: a long migration is not polled 20 times a second
TRY_AGAIN_FOR = 15.0  # ASK / TRYAGAIN at most this long outside a call's deadline (a
# migration under way: while a call's keys are split, the source says ASK and the target
# TRYAGAIN, in turn); an enqueue waits as long as its own deadline (``enqueue_timeout``)
TIME_TRIES = 3  # TIME on a cluster node: a connection redis-py just recycled can fail it
_ASKING = wire.array(1) + wire.bulk(b"ASKING")

OnReply = Callable[[int, Any], None]
Resent = Callable[[list[bytes]], list[bytes]]


def is_cluster(redis: Redis) -> bool:
    """Whether ``redis`` is a RedisCluster client (typed as ``Redis``: see
    ``connection.make_clients``)."""
    return isinstance(redis, RedisCluster)


class Lines:
    """Raw connections of one client (see the module's docstring)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._kept: dict[str, AbstractConnection] = {}  # key -> a kept connection
        self._node_pools: dict[str, ConnectionPool] = {}  # cluster: node name -> its pool
        self._node_clients: dict[str, Redis] = {}  # cluster: node name -> a client of it
        self.redirects: Counter[str] = Counter()  # cluster: MOVED / ASK / TRYAGAIN followed

    async def send(
        self,
        key: str,
        script: Script,
        commands: list[bytes],
        on_reply: OnReply | None = None,
        resent: Resent | None = None,
        *,
        keep: bool = False,
    ) -> list[Any]:
        """Send packed calls of ``script`` whose keys share ``key``'s slot; their replies.
        Raises the first error reply. ``keep``: reuse one connection for ``key`` across
        calls (its caller sends one call at a time)."""
        script = script.on(self.redis)
        if is_cluster(self.redis):
            return await self._send_cluster(key, script, commands, on_reply, resent)
        pool = self.redis.connection_pool
        for attempt in range(2):
            connection = self._kept.pop(key, None) if keep else None
            connection = connection or await wire.checkout(pool)
            sending = resent(commands) if attempt and resent is not None else commands
            try:
                replies = await wire.send(connection, script, sending, on_reply, resent)
            except ResponseError as exc:
                replica = _on_a_replica(exc)
                if replica:  # a demoted master (a failover): a new connection asks the
                    await connection.disconnect()  # Sentinels for the new one
                await pool.release(connection)
                if attempt or not replica:
                    raise
                continue  # what went out may have run: it goes again as resent
            except BaseException:
                await pool.release(connection)
                raise
            if keep:
                await self._keep(key, connection)
            else:
                await pool.release(connection)
            return replies
        raise AssertionError("unreachable")

    async def _keep(self, key: str, connection: AbstractConnection) -> None:
        """Keep ``connection`` for ``key``; one kept meanwhile (by another caller sending
        for the same key: two batchers of one queue on one client) goes back to the pool."""
        previous = self._kept.get(key)
        self._kept[key] = connection
        if previous is not None and previous is not connection:
            await self.redis.connection_pool.release(previous)

    async def close(self) -> None:
        """Give back kept connections, close the cluster nodes' pools."""
        kept, self._kept = self._kept, {}
        if not is_cluster(self.redis):
            for connection in kept.values():
                await self.redis.connection_pool.release(connection)
        pools, self._node_pools, self._node_clients = self._node_pools, {}, {}
        for pool in pools.values():
            await pool.disconnect()

    # -- Redis Cluster -------------------------------------------------------------------

    def node_pool(self, node: ClusterNode) -> ConnectionPool:
        """This client's pool of raw connections to a cluster node (made on first use)."""
        pool = self._node_pools.get(node.name)
        if pool is None:
            pool = self._node_pools[node.name] = node_pool(node)
        return pool

    def node_client(self, node: ClusterNode) -> Redis:
        """A plain client of one cluster node over its pool here (``slots``: calls whose
        keys share one slot, sent there rather than through redis-py's routing)."""
        client = self._node_clients.get(node.name)
        if client is None:
            client = self._node_clients[node.name] = Redis(connection_pool=self.node_pool(node))
        return client

    async def _send_cluster(
        self,
        key: str,
        script: Script,
        commands: list[bytes],
        on_reply: OnReply | None,
        resent: Resent | None,
    ) -> list[Any]:
        cluster = cast("RedisCluster", self.redis)
        await cluster.initialize()  # (once: it returns at once when done)
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        asking: ClusterNode | None = None
        redirects, loop = 0, asyncio.get_running_loop()
        give_up = loop.time() + (deadline.remaining(TRY_AGAIN_FOR) or 0.0)
        redirect = ResponseError("no master serves the slot")
        pause = Pause()
        while redirects < MAX_REDIRECTS and loop.time() < give_up:
            node = asking or cluster.get_node_from_key(key)
            if node is None:  # no master for the slot (a failover under way)
                await read_slots(cluster, pause)
                continue
            try:
                got = await self._on_node(node, script, commands, todo, on_reply, asking)
            except (RedisConnectionError, RedisTimeoutError):
                # The node is gone (a failover may be under way): read the slot map again
                # rather than knock on the same door. A patient call (an enqueue) tries
                # again within its deadline; what went out may have run: it goes as resent.
                patient = _patient() and loop.time() < give_up
                await read_slots(cluster, pause if patient else None)
                if not patient:
                    raise
                commands, asking = (resent(commands) if resent else commands), None
                continue
            todo, redirect = _sort_replies(todo, got, replies)
            if not todo:
                return replies
            redirects += isinstance(redirect, MovedError)
            self.redirects[type(redirect).__name__] += 1
            asking = await self._follow(cluster, redirect, pause)
        if redirects >= MAX_REDIRECTS:
            raise ResponseError(f"gave up following redirections for key {key!r}: {redirect}")
        raise RedisTimeoutError(  # a migration longer than the call's deadline
            f"the slot of {key!r} is still moving ({describe(redirect)})"
        )

    @staticmethod
    async def _follow(
        cluster: RedisCluster, redirect: ResponseError, pause: Pause
    ) -> ClusterNode | None:
        """Act on a redirection; the node to send to with ASKING (for an ASK)."""
        if isinstance(redirect, MovedError):  # the slot map is stale: read it again
            await cluster.nodes_manager.initialize()
        elif isinstance(redirect, AskError):
            target = cluster.nodes_manager.get_node(redirect.host, redirect.port)
            if target is not None:
                return target
            await cluster.nodes_manager.initialize()
        else:
            await pause.sleep()
        return None

    async def _on_node(
        self,
        node: ClusterNode,
        script: Script,
        commands: list[bytes],
        todo: list[int],
        on_reply: OnReply | None,
        asking: ClusterNode | None,
    ) -> list[Any]:
        """Send the calls ``todo`` (indexes in ``commands``) on a connection to ``node``;
        with ``asking``, each is preceded by ASKING, whose OK replies are dropped here."""
        sent = [commands[i] for i in todo]

        def heard(index: int, reply: Any) -> None:
            if on_reply is not None:
                on_reply(todo[index], reply)

        pool = self.node_pool(node)
        connection = await wire.checkout(pool)
        try:
            if asking is None:
                return await wire.send_each(connection, script, sent, heard)
            # Each packed command is "ASKING + call": two replies, the first an OK.
            await connection.send_packed_command([_ASKING + command for command in sent])
            replies: list[Any] = []
            for index in range(len(sent)):
                await connection.read_response()  # ASKING's OK
                try:
                    replies.append(reply := await connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)
                    continue
                heard(index, reply)
            return replies
        finally:
            await pool.release(connection)


def _patient() -> bool:
    """Whether the call under way retries a lost node until its deadline (an enqueue)."""
    current = deadline.current()
    return current is not None and current.patient


async def read_slots(cluster: RedisCluster, pause: Pause | None) -> None:
    """Read the slot map again (if a node answers), then pause (if given)."""
    with contextlib.suppress(RedisError, RedisClusterException):
        await cluster.nodes_manager.initialize()
    if pause is not None:
        await pause.sleep()


class Pause:
    """The pauses between TRYAGAINs of one call: TRY_AGAIN_PAUSE, doubling up to
    TRY_AGAIN_MAX_PAUSE (and never past the call's deadline)."""

    def __init__(self) -> None:
        self.next = TRY_AGAIN_PAUSE

    async def sleep(self) -> None:
        left = deadline.remaining()
        await asyncio.sleep(self.next if left is None else max(0.0, min(self.next, left)))
        self.next = min(2 * self.next, TRY_AGAIN_MAX_PAUSE)


def node_pool(node: ClusterNode) -> ConnectionPool:
    """A new pool of raw connections to one cluster node (its owner closes it)."""
    options = dict(node.connection_kwargs)
    options.pop("retry", None)  # ours: the connection's, as in make_clients
    return ConnectionPool(connection_class=node.connection_class, **options)


def _on_a_replica(error: ResponseError) -> bool:
    """The server is a replica now: a write refused (READONLY), or WAIT refused."""
    return isinstance(error, ReadOnlyError) or "used with replica" in str(error)


def _sort_replies(
    todo: list[int], got: list[Any], replies: list[Any]
) -> tuple[list[int], ResponseError]:
    """Put each call's reply in place; the calls to send again (redirected) and the
    redirection to follow (MOVED before ASK before TRYAGAIN). Raises any other error."""
    again: list[int] = []
    redirects: list[ResponseError] = []
    for index, reply in zip(todo, got, strict=True):
        if isinstance(reply, AskError | TryAgainError):  # (MovedError is an AskError)
            again.append(index)
            redirects.append(reply)
        elif isinstance(reply, ResponseError):
            raise reply
        else:
            replies[index] = reply
    moved = [error for error in redirects if isinstance(error, MovedError)]
    asked = [error for error in redirects if isinstance(error, AskError)]
    return again, (moved or asked or redirects or [ResponseError()])[0]


async def server_time(redis: Redis, key: str) -> tuple[int, int]:
    """Redis's clock (seconds, microseconds), from the server that holds ``key``: on a
    cluster, the node serving its slot (the one whose scripts time that key's jobs), not
    whichever node redis-py would pick."""
    if not is_cluster(redis):
        reply = await redis.time()
        return int(reply[0]), int(reply[1])
    cluster = cast("RedisCluster", redis)
    for attempt in range(TIME_TRIES):
        await cluster.initialize()
        node = cluster.get_node_from_key(key)
        try:  # redis-py does not retry a call given its node; TIME is safe to send again
            reply = await cluster.execute_command("TIME", target_nodes=node)
        except (RedisConnectionError, RedisTimeoutError):
            if attempt + 1 == TIME_TRIES:
                raise
            await cluster.nodes_manager.initialize()  # (the node may be gone)
            continue
        return int(reply[0]), int(reply[1])
    raise AssertionError("unreachable")


_LINES: weakref.WeakKeyDictionary[Any, Lines] = weakref.WeakKeyDictionary()


def lines_for(redis: Redis) -> Lines:
    """The ``Lines`` of a client (one per client, made on first use)."""
    found = _LINES.get(redis)
    if found is None:
        found = _LINES[redis] = Lines(redis)
    return found


async def close_lines(redis: Redis) -> None:
    """Close the ``Lines`` of a client, if it has any (the App closes its clients)."""
    found = _LINES.pop(redis, None)
    if found is not None:
        await found.close()
