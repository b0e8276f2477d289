"""Connections to a Sentinel-managed master that follow ``sentinel.MasterWatch``.

redis-py's asyncio Sentinel connection asks the Sentinels for the master only in
``connect()``; a dropped connection that reconnects while sending (``send_packed_command``
calls ``connect_check_health``) goes back to the address it had, a demoted or dead
master. ``FollowingConnection`` asks the watch on every connect, whichever way it comes
about, and checks the server's ROLE in the handshake. Before each send it waits while a
failover holds writes, and drops itself if the master moved; a reply read after a
failover began (the watch's epoch moved since the send) raises ``MasterChanged``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import deadline

if TYPE_CHECKING:
    from redis.asyncio.sentinel import Sentinel

    from .sentinel import MasterWatch


class MasterChanged(deadline.Unconfirmed):
    """A reply came from the master after a failover began (or the master moved) while it
    was on its way: the call may or may not have run where it will last. aioqueue's own
    calls (safe to send again) go again on the new master; any other fails unconfirmed."""


class FollowingPool(SentinelConnectionPool):
    """redis-py's Sentinel pool whose connections follow ``watch`` (and check ROLE)."""

    def __init__(self, service: str, sentinel: Sentinel, watch: MasterWatch, **kwargs: Any):
        tls = kwargs.pop("ssl", False)
        kwargs["connection_class"] = FollowingSSLConnection if tls else FollowingConnection
        super().__init__(service, sentinel, **kwargs)  # type: ignore[no-untyped-call]
        self.watch = watch


class FollowingConnection(SentinelManagedConnection):
    """A connection to the master ``MasterWatch`` names, whichever way it (re)connects."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self.reading = 0  # replies being read now (a blocked read included)
        self.generation = -1  # the watch's generation when it connected
        self.sent_epoch = 0  # the watch's epoch when the last command went out
        self.watch: MasterWatch = self.connection_pool.watch
        self.watch.connections.add(self)

    async def _connect_retry(self) -> None:
        if not self.is_connected:  # (what connect() retries: one lookup, from the watch)
            await self.connect_check_health(check_health=self.connection_pool.check_connection)

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self.is_connected:
            return
        self.host, self.port = await self.watch.master()
        generation, self.sent_epoch = self.watch.generation, self.watch.epoch
        try:
            await super().connect_check_health(check_health, retry_socket_connect=False)
        except (RedisConnectionError, RedisTimeoutError):
            self.watch.suspect()
            raise
        self.generation = generation

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        await super().on_connect_check_health(check_health)
        await self._check_role()  # (before a pub/sub connection subscribes again)

    async def _check_role(self) -> None:
        """Refuse a server that is a replica now (a demoted master)."""
        await super().send_packed_command(self.pack_command("ROLE"), check_health=False)
        role: Any = await self.read_response()
        if role and role[0] not in (b"master", "master"):
            await self.disconnect()
            raise RedisConnectionError(f"{self.host}:{self.port} is a replica now")

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        watch = self.watch
        if watch.holding:
            await watch.writable()
        if self.generation != watch.generation and self.is_connected:
            if (self.host, self.port) != watch.address:
                await self.disconnect()  # on the old master: reconnect to the new one
            else:
                self.generation = watch.generation
        self.sent_epoch = watch.epoch
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        self.reading += 1
        try:
            reply = await super().read_response(*args, **kwargs)
        except RedisConnectionError:
            if self.sent_epoch == self.watch.epoch:
                raise
            reply = None  # (cut by ``abandon``: as below)
        finally:
            self.reading -= 1
        if self.sent_epoch != self.watch.epoch:
            # Sent before a failover began: the old master may have run it after the
            # promotion (it was paused, or slow), and what it runs then is lost.
            await self.disconnect()
            raise MasterChanged(f"the master of {self.watch.service} changed meanwhile")
        return reply

    def abandon(self) -> None:
        """The master moved: a read blocked on the old one ends now (``MasterChanged``:
        its caller goes again, to the new one); an idle connection moves at its next
        send."""
        writer = self._writer
        if self.reading and writer is not None:
            writer.transport.abort()


class FollowingSSLConnection(FollowingConnection, SSLConnection):
    pass
