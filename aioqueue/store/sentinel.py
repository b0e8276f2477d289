"""Following a Sentinel-managed master through failovers, planned or not.

Under ``SENTINEL FAILOVER`` the old master stays up and writable for ~10 s after a replica
was promoted (until the Sentinels demote it): whatever is written to it meanwhile is lost
when it resyncs. So a connection must never wait for a READONLY reply to learn of the
switch. ``MasterWatch`` listens to every Sentinel's events (the URL's and those they
know of):

- ``+try-failover`` of the service (the failover's first step, a few Sentinel ticks
  before the replica is promoted): every send waits (``hold``) until the switch, so
  nothing is written to the old master once a replica may have been promoted;
- ``+switch-master``: the new address; connections to the old one are dropped (those
  blocked in a read at once, the others at their next send) and make new ones there;
- ``-failover-abort-*``: the hold ends, nothing moved.

While a hold lasts, the watch also asks the Sentinels every HOLD_POLL (a missed message
cannot keep writes held), and it asks them again after any failed connect. Where several
Sentinels disagree (the failover's leader announces the switch seconds after the
others), the answer with the newest ``config-epoch`` wins. Each new connection checks the
server's ROLE: a replica (a demoted master) is refused, and the address asked again.
redis-py's own reconnect (``send_packed_command`` on a dropped connection) would go back
to the address it had: the connections (``following``) ask the watch instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import describe
from . import deadline
from .pubsub import listen

if TYPE_CHECKING:
    from redis.asyncio.sentinel import Sentinel

logger = logging.getLogger(__name__)

Address = tuple[str, int]
HOLD_LIMIT = 30.0  # seconds a send outside any call waits for a failover to end
HOLD_POLL = 0.25  # seconds between two looks at the Sentinels while a failover lasts
ASK_AGAIN_AFTER = 0.5  # seconds: the Sentinels are asked at most this often after a failure
RETRY_PAUSE = 0.5  # seconds before subscribing again to a Sentinel that failed
EVENTS = ("+try-failover", "+switch-master", "-failover-abort-not-elected",
          "-failover-abort-no-good-slave", "-failover-abort-slave-timeout")  # fmt: skip


class Follower(Protocol):
    """A connection that follows the watch (``following.FollowingConnection``)."""

    host: str
    port: int

    def abandon(self) -> None: ...


@dataclass(frozen=True, slots=True)
class MasterView:
    """What one Sentinel says of the service's master."""

    address: Address
    epoch: int  # its config-epoch: a later failover's view has a greater one
    failing_over: bool  # this Sentinel leads a failover of it now


class MasterWatch:
    """The service's master as the Sentinels announce it (see the module's docstring)."""

    def __init__(self, sentinel: Sentinel, service: str, sentinel_options: dict[str, Any]):
        self.service = service
        self.address: Address | None = None
        self.generation = 0  # one more at each switch
        self.epoch = 0  # one more at each switch and each failover's start
        self._sentinels: dict[Address, Redis] = {}  # every Sentinel known: URL's first
        for client in sentinel.sentinels:
            kwargs = client.connection_pool.connection_kwargs
            self._sentinels[(kwargs["host"], int(kwargs["port"]))] = client
        self._own: list[Redis] = []  # the Sentinels found by asking (ours to close)
        self._options = sentinel_options
        self._holding: set[Address] = set()  # Sentinels that announced a failover
        self._held = asyncio.Event()
        self._held.set()  # set: no hold
        self._stale = True  # ask the Sentinels before the next connect
        self._asked_at = -ASK_AGAIN_AFTER
        self._asking: asyncio.Lock | None = None
        self._tasks: dict[Address, asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._closing = False
        self.connections: weakref.WeakSet[Follower] = weakref.WeakSet()

    @property
    def holding(self) -> bool:
        return not self._held.is_set()

    async def master(self) -> Address:
        """The master's address, once no failover holds writes back."""
        self._start()
        await self.writable()
        if self._stale or self.address is None:
            await self.ask()
        if self.address is None:
            raise MasterNotFoundError(f"no Sentinel knows the master of {self.service!r}")
        return self.address

    async def writable(self) -> None:
        """Return once no failover is under way (within the call's deadline)."""
        if self._held.is_set():
            return
        left = deadline.remaining(HOLD_LIMIT)
        assert left is not None
        try:
            await asyncio.wait_for(self._held.wait(), max(left, 0.0))
        except TimeoutError:
            raise RedisTimeoutError(
                f"the Sentinels' failover of {self.service!r} still under way"
            ) from None

    def suspect(self) -> None:
        """A connect failed: ask the Sentinels again before the next one."""
        self._stale = True

    async def ask(self) -> None:
        """Ask every Sentinel where the master is; follow the newest answer."""
        if self._asking is None:
            self._asking = asyncio.Lock()
        async with self._asking:
            loop = asyncio.get_running_loop()
            if not self._stale and self.address is not None:
                return  # asked meanwhile, by another connect
            if loop.time() - self._asked_at < ASK_AGAIN_AFTER and self.address is not None:
                return
            self._asked_at = loop.time()
            views = await self._views()
            if not views:
                raise MasterNotFoundError(f"no Sentinel answered for {self.service!r}")
            self._stale = False
            self.switch(_newest(views).address)

    async def _views(self) -> list[MasterView]:
        """Every reachable Sentinel's view of the master (within a socket timeout)."""
        left = deadline.remaining(5.0)
        assert left is not None
        bound = min(left, self._options.get("socket_timeout") or 5.0)
        asks = [asyncio.ensure_future(_view(c, self.service)) for c in self._sentinels.values()]
        done, pending = await asyncio.wait(asks, timeout=max(bound, 0.01))
        for task in pending:
            task.cancel()
        views = [task.result() for task in done if task.exception() is None]
        return [view for view in views if view is not None]

    def switch(self, address: Address) -> None:
        """The master is at ``address``: end any hold; drop connections to the old one."""
        old, self.address = self.address, address
        self._holding.clear()
        self._held.set()
        if old is None or old == address:
            return
        self.generation += 1
        self.epoch += 1
        logger.warning("the master of %s moved from %s:%s to %s:%s", self.service, *old, *address)
        for connection in list(self.connections):
            if (connection.host, connection.port) == old:
                connection.abandon()

    def hold(self, by: Address) -> None:
        self._holding.add(by)
        if self._held.is_set():
            logger.warning("a failover of %s began: writes wait for its end", self.service)
            self._held.clear()
            self.epoch += 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    def release(self, by: Address) -> None:
        self._holding.discard(by)
        if not self._holding and not self._held.is_set():
            logger.warning("the failover of %s was abandoned: writes resume", self.service)
            self._held.set()

    async def _poll(self) -> None:
        """While a hold lasts: the Sentinels' views, in case a message went missing."""
        loop = asyncio.get_running_loop()
        since = loop.time()
        while self.holding and not self._closing:
            await asyncio.sleep(HOLD_POLL)
            views = await self._views()
            if not views:
                continue
            newest = _newest(views)
            if newest.address != self.address:
                self.switch(newest.address)
            elif not any(view.failing_over for view in views) and loop.time() - since > 1.0:
                self._holding.clear()  # no Sentinel leads a failover any more
                self.release(newest.address)
            elif loop.time() - since > HOLD_LIMIT:
                logger.warning("the failover of %s lasts: writes resume", self.service)
                self._holding.clear()
                self.release(newest.address)

    # -- listening to the Sentinels ------------------------------------------------------

    def _start(self) -> None:
        if self._tasks or self._closing:
            return
        loop = asyncio.get_running_loop()
        for address, client in self._sentinels.items():
            self._tasks[address] = loop.create_task(self._listen(address, client))

    async def _listen(self, address: Address, client: Redis) -> None:
        while not self._closing:
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(*EVENTS)
                self.suspect()  # messages may have been missed while away
                await self._meet_others(client)
                await listen(pubsub, lambda message: self._heard(address, message), _never)
            except (RedisError, OSError, ConnectionError) as exc:
                logger.debug("Sentinel %s:%s: %s; subscribing again", *address, describe(exc))
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(RETRY_PAUSE)

    async def _meet_others(self, client: Redis) -> None:
        """Listen to the Sentinels this one knows of, too: a failover's first steps are
        announced only by the Sentinel that leads it."""
        others: Any = await client.execute_command(  # type: ignore[no-untyped-call]
            "SENTINEL", "SENTINELS", self.service
        )
        for fields in others or []:
            found = _pairs(fields)
            address = (found.get("ip", ""), int(found.get("port", 0) or 0))
            if address[1] and address not in self._sentinels and not self._closing:
                other = Redis(host=address[0], port=address[1], **self._options)
                self._sentinels[address] = other
                self._own.append(other)
                loop = asyncio.get_running_loop()
                self._tasks[address] = loop.create_task(self._listen(address, other))

    def _heard(self, sentinel: Address, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        channel, words = bytes(message["channel"]), bytes(message["data"]).decode().split()
        if channel == b"+switch-master" and words[:1] == [self.service] and len(words) == 5:
            self.switch((words[3], int(words[4])))
        elif words[:2] == ["master", self.service]:  # "master <name> <ip> <port>"
            if channel == b"+try-failover":
                self.hold(sentinel)
            else:  # -failover-abort-*
                self.release(sentinel)

    async def aclose(self) -> None:
        """Stop listening (the tasks are this watch's own: cancelling them is safe)."""
        self._closing = True
        tasks = [*self._tasks.values(), *([self._poller] if self._poller else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        for client in self._own:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()


def _newest(views: list[MasterView]) -> MasterView:
    """The view to follow: the newest config-epoch's. A failover's leader takes the new
    epoch a few seconds before it names the new master (the other Sentinels name it as
    soon as they hear of it): its view counts only if no other Sentinel answered."""
    settled = [view for view in views if not view.failing_over] or views
    return max(settled, key=lambda view: view.epoch)


def _never() -> bool:
    return False


def _pairs(fields: Any) -> dict[str, str]:
    """A Sentinel's description of an instance as text: a map (RESP3) or a flat
    [name, value, ...] list (RESP2)."""
    if isinstance(fields, dict):
        return {_text(name): _text(value) for name, value in fields.items()}
    flat = [_text(item) for item in fields]
    return dict(zip(flat[::2], flat[1::2], strict=False))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _view(client: Redis, service: str) -> MasterView | None:
    """One Sentinel's view of the master (None if it does not know the service)."""
    try:
        reply: Any = await client.execute_command(  # type: ignore[no-untyped-call]
            "SENTINEL", "MASTER", service
        )
    except RedisError:
        return None
    found = _pairs(reply)
    flags = found.get("flags", "").split(",")
    address = (found.get("ip", ""), int(found.get("port", 0) or 0))
    epoch = int(found.get("config-epoch", 0) or 0)
    return MasterView(address, epoch, "failover_in_progress" in flags)
