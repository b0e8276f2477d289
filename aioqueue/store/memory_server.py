"""What memory:// changes in fakeredis, so that it behaves as Redis does where aioqueue
relies on it (``memory.py`` makes the clients; this module, the connection they use).

- **Blocked clients are served in order, at once.** Redis serves the clients blocked on a
  key (BLPOP, XREADGROUP ... BLOCK) oldest first, right after the command that fed the
  key, before it reads any other command. fakeredis wakes them all and lets the first
  task to run take the item, so a client that blocked a moment ago, or had not blocked
  yet, could take what an idle worker has waited for since long before (a worker that
  took a notify token it had no room for, while an idle one slept on). Here every
  command ends by serving the blocked clients of its server, oldest first.
- **Each server has its own clock**: the host's plus an offset (``memory.advance_clock``).
  fakeredis reads the time from its modules' ``time``; those read a clock shifted by the
  offset of the server running a command (a thread's own: 0 outside memory:// commands,
  so plain fakeredis clients see the host's clock).
- **WAIT** (fakeredis lacks it) answers as a server with no replicas: 0, after the
  timeout when asked for any; **CONFIG GET** and **INFO** (lacked too) answer what the
  eviction check reads: no eviction, nothing evicted. **CLIENT PAUSE** (which fakeredis
  accepts and ignores) is refused with an error that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import threading
import time
from types import ModuleType
from typing import Any

from fakeredis._command_args_parsing import Int
from fakeredis._commands import Signature
from fakeredis._helpers import NoResponse, SimpleError
from fakeredis._socket import AsyncFakeSocket
from fakeredis.aioredis import FakeAsyncRedisConnection, FakeReader, FakeWriter

importlib.import_module("lupa")  # fakeredis runs Lua with it: missing, memory:// says so

OFFSET = "aioqueue_clock_offset"  # on a FakeServer: seconds its clock is ahead of the host's
_BLOCKED = "aioqueue_blocked"  # on a FakeServer: its blocked clients, oldest first
_CHANGED = "aioqueue_changed"  # on a FakeServer: a key changed since they were served
_WATCHED = "aioqueue_watched"  # on a fakeredis Database: its changes set _CHANGED

# Where fakeredis reads the time (its modules' ``time``): TIME, a command's time for key
# expiry, stream delivery and idle times, XADD's ids, CLIENT PAUSE.
CLOCK_READERS = (
    "fakeredis._helpers",
    "fakeredis._socket._base",
    "fakeredis.commands_mixins.server_mixin",
    "fakeredis.commands_mixins.connection_mixin",
    "fakeredis.model._stream",
)


class _Running(threading.local):
    """The clock offset of the server whose command this thread runs (0 outside)."""

    offset = 0.0


_RUNNING = _Running()


class _ShiftedTime(ModuleType):
    """The ``time`` module as fakeredis sees it: ``time()`` is the running server's."""

    def __init__(self) -> None:
        super().__init__("time")

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + _RUNNING.offset

    def time_ns(self) -> int:
        return time.time_ns() + int(_RUNNING.offset * 1e9)


SHIFTED = _ShiftedTime()


def install_clock() -> None:
    """Point fakeredis's modules at the shifted clock (once)."""
    for name in CLOCK_READERS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            if getattr(module, "time", None) is time:
                module.time = SHIFTED  # type: ignore[attr-defined]


@contextlib.contextmanager
def on_clock_of(server: Any) -> Any:
    """Run what is inside on ``server``'s clock."""
    outer = _RUNNING.offset
    _RUNNING.offset = getattr(server, OFFSET, 0.0)
    try:
        yield
    finally:
        _RUNNING.offset = outer


_STILL = object()  # a blocked client's look found nothing yet


class _Blocked:
    """One blocked command: how to look again (``look``), how to shape its reply, and
    the event its connection's task waits on for it."""

    __slots__ = ("event", "look", "loop", "reply", "shape", "socket")

    def __init__(self, socket: Any, look: Any, shape: Any, loop: asyncio.AbstractEventLoop):
        self.socket, self.look, self.shape, self.loop = socket, look, shape, loop
        self.event = asyncio.Event()
        self.reply: Any = _STILL

    def empty(self) -> Any:
        return None if self.shape is None else self.shape(None)

    def answer(self, reply: Any) -> None:
        """Give the client its reply (taken now, in its turn) from any thread."""
        self.reply = reply
        with contextlib.suppress(RuntimeError):  # (its loop is closed: nobody waits)
            self.loop.call_soon_threadsafe(self.event.set)


_ADDED = {  # commands fakeredis lacks: name -> (method, signature)
    "wait": ("wait", Signature("wait", "wait", (Int, Int))),  # type: ignore[arg-type]
    "config get": ("config_get", Signature("config get", "config_get", (bytes,), (bytes,))),
    "info": ("info", Signature("info", "info", (), (bytes,))),  # type: ignore[arg-type]
}


def _sha1hex(value: Any) -> bytes:
    """Redis's ``redis.sha1hex``: the hex SHA-1 of a string (of a number's text)."""
    data = value if isinstance(value, bytes) else str(value).encode()
    return hashlib.sha1(data).hexdigest().encode()


class MemorySocket(AsyncFakeSocket):
    """fakeredis's socket, with its server's clock, blocked clients served in order, WAIT,
    and CLIENT PAUSE refused (see the module's docstring)."""

    def _process_command(self, fields: list[bytes]) -> None:
        server = self._server
        with on_clock_of(server):
            super()._process_command(fields)
        if getattr(server, _CHANGED, False):
            serve_blocked(server)

    def _get_server_runtime(self, server: Any) -> Any:
        """fakeredis's Lua runtime, with the ``redis.sha1hex`` its EVAL lacks (the done sets
        keep ids' SHA-1 fingerprints: include/done.lua)."""
        runtime = super()._get_server_runtime(server)
        api = runtime.globals().redis
        if api is not None and api.sha1hex is None:
            api.sha1hex = _sha1hex
        return runtime

    def _blocking(self, timeout: float | None, func: Any, shape: Any = None) -> Any:
        found = func(True)
        if found is not None or self._in_transaction:
            return found if shape is None else shape(found)
        loop = asyncio.get_running_loop()
        blocked = _Blocked(self, func, shape, loop)
        _watch(self._server, self._db).append(blocked)
        self._blocked = True
        self.pause()
        self.waiting = loop.create_task(self._blocked_until_answered(blocked, timeout or None))
        return NoResponse()

    async def _blocked_until_answered(self, blocked: _Blocked, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(blocked.event.wait(), timeout)
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # (the loop is closing: it waits no more)
            if self._server is not None:
                _unwatch(self._server, blocked)
            raise
        server = self._server
        if server is not None:
            with server.lock:
                if blocked.reply is _STILL:  # the timeout: nothing came
                    _unwatch(server, blocked)
                    blocked.reply = blocked.empty()
        self._blocked, self._unblock_reason = False, None
        reply = blocked.empty() if blocked.reply is _STILL else blocked.reply
        self.put_response(self._decode_result(reply))
        if self._server is not None:
            self.resume()

    def _name_to_func(self, cmd_name: str) -> tuple[Any, Any]:
        if cmd_name in _ADDED:
            method, signature = _ADDED[cmd_name]
            return getattr(self, method), signature
        return super()._name_to_func(cmd_name)

    def config_get(self, *names: bytes) -> Any:
        """CONFIG GET of what aioqueue reads: memory:// never evicts a key."""
        known = {b"maxmemory-policy": b"noeviction", b"maxmemory": b"0"}
        found = {name.lower(): known[name.lower()] for name in names if name.lower() in known}
        if self._resp_version == 3:  # (a map in RESP3)
            return found
        return [item for pair in found.items() for item in pair]

    def info(self, *_: bytes) -> bytes:
        """INFO, as far as aioqueue reads it (its eviction check): nothing evicted."""
        return b"# Stats\r\nevicted_keys:0\r\n"

    def wait(self, replicas: int, timeout_ms: int) -> Any:
        """WAIT on a server with no replicas: 0, at once if none are asked for."""
        if replicas <= 0:
            return 0
        return self._blocking(max(timeout_ms, 1) / 1000, lambda _: None, lambda _: 0)

    def client_pause(self, *_: Any) -> Any:
        raise SimpleError(
            "ERR CLIENT PAUSE is not simulated by memory:// (it would pause nothing): "
            "use a real Redis server"
        )

    def close(self) -> None:
        server = self._server
        if server is None:  # closed already
            return
        for blocked in list(getattr(server, _BLOCKED, ())):  # a closed client waits no more
            if blocked.socket is self:
                _unwatch(server, blocked)
                blocked.answer(blocked.empty())
        super().close()


class MemoryConnection(FakeAsyncRedisConnection):
    """fakeredis's connection, on a ``MemorySocket``, which it closes when it disconnects
    (fakeredis drops it unclosed: still blocked, it would take the next item pushed, as
    no closed Redis connection does)."""

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        socket = self._sock
        if socket is not None:
            socket.close()
        await super().disconnect(*args, **kwargs)

    async def _connect(self) -> None:
        self._sock = MemorySocket(
            self._server, self.db, client_class=self._client_class,
            lua_modules=self._lua_modules, client_info=self._client_info,
        )  # fmt: skip
        self._reader = FakeReader(self._sock)
        self._writer = FakeWriter(self._sock)


install_clock()


def serve_blocked(server: Any) -> None:
    """Give each blocked client of ``server`` what is there for it, oldest first."""
    with server.lock:
        setattr(server, _CHANGED, False)
        for blocked in list(getattr(server, _BLOCKED, ())):
            socket = blocked.socket
            if socket._server is None:  # closed
                _unwatch(server, blocked)
                continue
            if socket._unblock_reason is not None:  # CLIENT UNBLOCK
                reply = _unblocked(socket, blocked)
            else:
                try:
                    with on_clock_of(server):
                        found = blocked.look(False)
                except SimpleError as exc:  # (a key of another type now: as Redis does)
                    found = exc
                if found is None:
                    continue
                shaped = isinstance(found, SimpleError) or blocked.shape is None
                reply = found if shaped else blocked.shape(found)
            _unwatch(server, blocked)
            blocked.answer(reply)


def _unblocked(socket: Any, blocked: _Blocked) -> Any:
    try:
        socket._take_unblock_reason()
    except SimpleError as exc:
        return exc
    return blocked.empty()


def _watch(server: Any, db: Any) -> list[_Blocked]:
    """The server's blocked clients; ``db``'s changes mark them to be served."""
    if not getattr(db, _WATCHED, False):
        setattr(db, _WATCHED, True)
        db.add_change_callback(lambda: setattr(server, _CHANGED, True))
    waiting: list[_Blocked] | None = getattr(server, _BLOCKED, None)
    if waiting is None:
        waiting = []
        setattr(server, _BLOCKED, waiting)
    return waiting


def _unwatch(server: Any, blocked: _Blocked) -> None:
    with contextlib.suppress(ValueError):
        getattr(server, _BLOCKED).remove(blocked)
