"""What a queue's handle needs from its App (``QueueHost``), and how its calls report a
Redis failure (``clear_errors``): shared by ``QueueAdmin`` (``client/admin.py``) and the
tenants' calls it inherits (``client/tenants.py``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from ..store import deadline
from ..store.connection import CALL_FAILURES, failure

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from redis.asyncio import Redis

    from ..core.registry import Registry
    from ..core.settings import AppSettings
    from ..store.settled import SettledListener
    from .eager import Eager

P = ParamSpec("P")
R = TypeVar("R")


class QueueHost(Protocol):
    """What a Queue needs from its App."""

    @property
    def settings(self) -> AppSettings: ...

    @property
    def redis_url(self) -> str | None: ...

    async def client(self) -> Redis: ...

    async def internal_client(self) -> Redis: ...

    def settled_listener(self) -> SettledListener: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def eager_mode(self) -> Eager: ...


class Hosted(Protocol):
    """A queue's handle: it reaches Redis through its App."""

    @property
    def _host(self) -> QueueHost: ...


H = TypeVar("H", bound=Hosted)


def clear_errors(
    method: Callable[Concatenate[H, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[H, P], Coroutine[Any, Any, R]]:
    """A Redis failure of a queue's read or admin call raised as an aioqueue error that
    names the server and the cause (ServerUnavailable, AuthenticationFailed, ...; a
    connection closed under the call too); the call has one deadline in all, retries
    included (the App's ``call_timeout``)."""

    @functools.wraps(method)
    async def call(self: H, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            async with deadline.within(self._host.settings.call_timeout, "call_timeout"):
                return await method(self, *args, **kwargs)
        except CALL_FAILURES as exc:
            mapped = failure(exc, self._host.redis_url or "")
            if mapped is None:
                raise  # (a bug: as it is)
            raise mapped from exc

    return call
