"""Eager mode, for the tests of code that enqueues (a web app's): within ``with
app.eager():`` (or ``async with``) an enqueue returns once its job, and whatever that job
enqueued, has run in this process, so the test sees its effects at once.

Nothing is short-circuited: the App is diverted to an in-process server of its own
(``memory://``: ``pip install 'aioqueue[testing]'``) for the block, the enqueue writes
the job as always (the same checks and JSON round trip: an argument that cannot travel
still fails, an annotated one arrives decoded as a worker decodes it), and a burst worker
runs it with the App's middleware, hooks and retries (whose backoff the server's clock
skips, as it does a delay). The job handle it returns is finished: ``status()`` says how
it ended, ``result()`` returns or raises at once. An enqueue made by a job that runs
eagerly is run by the run under way, after that job.

The App's own server is untouched, and its clients come back when the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol, Self

from ..core.errors import ConfigError
from ..store import memory

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

_RUNNING: ContextVar[bool] = ContextVar("aioqueue_eager_running", default=False)


class Closable(Protocol):
    async def aclose(self) -> None: ...


class Divertible(Protocol):
    """What eager mode needs of the App's clients (``store.clients.Connector``)."""

    def divert(self, url: str | None) -> Closable | None: ...


class Eager:
    """One App's eager mode (``App.eager()``): a context manager, sync or async."""

    def __init__(self, clients: Divertible, run: Callable[[str], Awaitable[object]]) -> None:
        self._clients, self._run = clients, run
        self._url: str | None = None
        self._depth = 0
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def on(self) -> bool:
        """Whether the App is in eager mode now."""
        return self._url is not None

    async def run(self) -> None:
        """Run what the enqueue just written needs run (see the module's docstring)."""
        url = self._url
        if url is None or _RUNNING.get():  # (a job running eagerly enqueued it)
            return
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop) or self._locks.setdefault(loop, asyncio.Lock())
        async with lock:  # one run at a time: each enqueue returns once all has run
            token = _RUNNING.set(True)
            try:
                await self._run(url)
            finally:
                _RUNNING.reset(token)

    def __enter__(self) -> Self:
        if self._depth == 0:
            url = f"memory://eager-{secrets.token_hex(6)}"
            memory.check_available()
            self._clients.divert(url)
            self._url = url
        self._depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        diverted = self._leave()
        if diverted is not None:  # (a sync exit cannot wait: they close in the background)
            with contextlib.suppress(RuntimeError):  # no loop runs: nothing to close
                closing = asyncio.get_running_loop().create_task(diverted.aclose())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clients = self._leave()
        if clients is not None:
            await clients.aclose()

    def _leave(self) -> Closable | None:
        """Leave one level; at the last, the App's own clients come back. Returns the
        in-process server's clients and listener, to close."""
        if self._depth == 0:
            raise ConfigError("eager mode was left more often than it was entered")
        self._depth -= 1
        if self._depth or self._url is None:
            return None
        url, self._url = self._url, None
        clients = self._clients.divert(None)
        memory.forget(url.removeprefix("memory://"))
        return clients
