"""The App's Redis clients over their life: made on first use, per event loop, and closed.

A client belongs to the event loop that made it, so the clients are made again when the
App is used from another loop. First uses that race (a page's reads fanned out at once)
share one connect: each would otherwise build clients of its own, and all but one would
leak. A failed first contact keeps nothing, so the next use tries afresh.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from redis.exceptions import RedisClusterException

from ..core.errors import ConfigError, ServerUnavailable
from ..core.settings import ENV_REDIS_URL, check_redis_url, mask_url, redis_url_from_env
from .connection import Clients, describe_client, make_clients, settle_cluster
from .scripts import load_all
from .server import warn_if_evicting

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

    from ..core.settings import AppSettings


class Connector:
    """Makes and keeps the App's clients: for ``settings.redis_url`` (or the URL set at
    run time, or the environment's), or around the user's own ``given`` client."""

    def __init__(self, settings: AppSettings, given: Redis | RedisCluster | None) -> None:
        self._settings = settings
        self._given = given
        self._clients: Clients | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None
        self._connecting_loop: asyncio.AbstractEventLoop | None = None
        self._url_override: str | None = None

    @property
    def url(self) -> str | None:
        """The URL in force (for a given client: its address, for messages)."""
        if self._given is not None:
            return describe_client(self._given)
        return self._url_override or self._settings.redis_url or redis_url_from_env()

    def set_url(self, url: str | None) -> None:
        if self._clients is not None:
            raise ConfigError("set_redis_url() must be called while the app is not connected")
        self._url_override = check_redis_url(url) if url else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the clients belong to, while connected."""
        return self._loop if self._clients is not None else None

    async def connect(self) -> Clients:
        loop = asyncio.get_running_loop()
        if self._clients is not None and self._loop is loop:
            return self._clients
        if self._connecting is None or self._connecting_loop is not loop:
            self._connecting, self._connecting_loop = asyncio.Lock(), loop
        async with self._connecting:
            if self._clients is None or self._loop is not loop:
                self._clients, self._loop = await self._make(), loop
            return self._clients

    async def _make(self) -> Clients:
        if self._given is not None:
            given = cast("Redis", self._given)  # (see connection.make_clients)
            await load_all(given)
            await warn_if_evicting(given)
            return Clients(given, given, owned=False)
        url = self.url
        if not url:
            raise ServerUnavailable(f"no Redis URL: pass App(redis_url=...) or set {ENV_REDIS_URL}")
        clients = make_clients(check_redis_url(url), self._settings)
        try:
            await load_all(clients.internal)
            await warn_if_evicting(clients.internal)
            await settle_cluster(clients.shared)
        except RedisClusterException as exc:  # no node of the cluster answered
            await clients.aclose()
            raise ServerUnavailable(f"cannot reach the cluster at {mask_url(url)}: {exc}") from exc
        except BaseException:
            await clients.aclose()
            raise
        return clients

    async def close(self) -> None:
        clients, self._clients, self._loop = self._clients, None, None
        if clients is not None:
            await clients.aclose()
