"""The App's Redis clients over their life: made on first use, per event loop, and closed.

A client belongs to the event loop that made it, so the clients are made again when the
App is used from another loop. First uses that race (a page's reads fanned out at once)
share one connect: each would otherwise build clients of its own, and all but one would
leak. A failed first contact keeps nothing, so the next use tries afresh.

The App's settled listener (what ``Job.result()`` waits on) listens through these
clients, so it is kept here with them: one per loop, closed with them.

Eager mode (``App.eager``) diverts an App to an in-process server of its own for a while
(``divert``): the App's own clients and listener are set aside, untouched, and come back
after.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from ..core.errors import ConfigError, ServerUnavailable
from ..core.keys import listener_wake_channel
from ..core.settings import ENV_REDIS_URL, check_redis_url, mask_url, redis_url_from_env
from .connection import Clients, describe_client, make_clients, settle_cluster
from .scripts import load_all
from .server import warn_if_evicting
from .settled import SettledListener

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

    from ..core.settings import AppSettings


@dataclass(slots=True)
class InUse:
    """The clients in use (and the loop they belong to), and the listener on them."""

    clients: Clients | None = None
    loop: asyncio.AbstractEventLoop | None = None
    listener: SettledListener | None = None

    async def aclose(self) -> None:
        """Close the listener (through these clients: its wake message; bounded, a
        stalled server is not waited for: ``SettledListener.close``), then them."""
        listener, self.listener = self.listener, None
        if listener is not None and listener.loop is asyncio.get_running_loop():
            await listener.close()
        clients, self.clients, self.loop = self.clients, None, None
        if clients is not None:
            await clients.aclose()


class Connector:
    """Makes and keeps the App's clients: for ``settings.redis_url`` (or the URL set at
    run time, or the environment's), or around the user's own ``given`` client."""

    def __init__(self, settings: AppSettings, given: Redis | RedisCluster | None) -> None:
        self._settings = settings
        self._given = given
        self._in_use = InUse()
        self._connecting: asyncio.Lock | None = None
        self._connecting_loop: asyncio.AbstractEventLoop | None = None
        self._url_override: str | None = None
        self._diverted: str | None = None
        self._set_aside = InUse()

    @property
    def url(self) -> str | None:
        """The URL in force (for a given client: its address, for messages)."""
        if self._diverted is not None:
            return self._diverted
        if self._given is not None:
            return describe_client(self._given)
        return self._url_override or self._settings.redis_url or redis_url_from_env()

    def divert(self, url: str | None) -> InUse | None:
        """Use ``url`` in place of the App's own server until called again with None, which
        brings the App's clients back and returns the diverted ones (to close)."""
        if url is not None:
            self._set_aside, self._in_use, self._diverted = self._in_use, InUse(), url
            return None
        diverted, self._in_use, self._set_aside = self._in_use, self._set_aside, InUse()
        self._diverted = None
        return diverted

    def set_url(self, url: str | None) -> None:
        if self._in_use.clients is not None:
            raise ConfigError("set_redis_url() must be called while the app is not connected")
        self._url_override = check_redis_url(url) if url else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the clients belong to, while connected."""
        return self._in_use.loop if self._in_use.clients is not None else None

    async def connect(self) -> Clients:
        loop, in_use = asyncio.get_running_loop(), self._in_use
        if in_use.clients is not None and in_use.loop is loop:
            return in_use.clients
        if self._connecting is None or self._connecting_loop is not loop:
            self._connecting, self._connecting_loop = asyncio.Lock(), loop
        async with self._connecting:
            in_use = self._in_use
            if in_use.clients is None or in_use.loop is not loop:
                in_use.clients, in_use.loop = await self._make(), loop
            return in_use.clients

    def settled_listener(self, prefix: str) -> SettledListener:
        """The listener ``Job.result()`` waits on: one per loop, on the clients in use."""
        in_use = self._in_use
        if in_use.listener is None or in_use.listener.loop is not asyncio.get_running_loop():
            wake = listener_wake_channel(prefix, secrets.token_hex(8))
            in_use.listener = SettledListener(functools.partial(self._internal, in_use), wake)
        return in_use.listener

    async def _internal(self, in_use: InUse) -> Redis:
        """The internal client of ``in_use``: the clients in use (made if need be), or the
        ones it held when it was set aside (to close its listener)."""
        if in_use is self._in_use:
            return (await self.connect()).internal
        if in_use.clients is None:
            raise RedisConnectionError("the App's clients were closed")
        return in_use.clients.internal

    async def _make(self) -> Clients:
        if self._given is not None and self._diverted is None:
            given = cast("Redis", self._given)  # (see connection.make_clients)
            await load_all(given)
            await warn_if_evicting(given)
            return Clients(given, given, owned=False)
        url = self.url
        if not url:
            raise ServerUnavailable(f"no Redis URL: pass App(redis_url=...) or set {ENV_REDIS_URL}")
        clients = make_clients(check_redis_url(url), self._settings)
        try:
            await _prepare(clients)
        except RedisClusterException as exc:  # no node of the cluster answered
            await clients.aclose()
            raise ServerUnavailable(f"cannot reach the cluster at {mask_url(url)}: {exc}") from exc
        except BaseException:
            await clients.aclose()
            raise
        return clients

    async def close(self) -> None:
        in_use, self._in_use = self._in_use, InUse()
        await in_use.aclose()


async def _prepare(clients: Clients) -> None:
    """Load the scripts and look at the eviction policy (the internal client), and read a
    Cluster's slot map (the shared one: see ``settle_cluster``), both at once: on a
    Cluster, each client's first look at the topology is a few round trips."""

    async def prepare_internal() -> None:
        await load_all(clients.internal)
        await warn_if_evicting(clients.internal)

    done = await asyncio.gather(
        prepare_internal(), settle_cluster(clients.shared), return_exceptions=True
    )
    for result in done:  # (both ended: the caller may close the clients at once)
        if isinstance(result, BaseException):
            raise result
