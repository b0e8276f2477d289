"""The threads plain ``def`` handlers run in, and what a cancellation does to them: nothing.

A thread cannot be stopped from outside. A handler's thread that a timeout, an abort or a
shutdown cut loose would run on while its job is retried, released or taken by another
worker: the job would run in two places at once. So the coroutine that awaits a handler's
thread holds every cancellation until the thread returns, then returns what the thread
returned (or raises what it raised), as a handler that swallows a cancellation does. The
job's owner (``inflight``) knows which jobs run in a thread (``busy``): it sends them no
cancellation, keeps their slot and lease, and settles them by what the thread did and why
it was interrupted (a timeout: HandlerTimeout).

The threads are daemon threads, pooled: they never hold a process's exit. Once a worker
has given up on them (``let_go``, at the end of its shutdown), a cancellation ends the
wait at once (the process is exiting: the thread dies with it, and the job's lease, no
longer renewed, expires).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

IDLE_EXIT = 10.0  # seconds an idle thread waits for a call before it ends


class HandlerThreads:
    """Runs calls in daemon threads, one call per thread at a time; knows for whom each
    runs (the job: whichever task of it waits, a middleware's included)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call that no submitted call is promised to
        self._running: dict[object, asyncio.Future[Any]] = {}  # by whom it runs for
        self._let_go = False

    def busy(self, key: object) -> bool:
        """Whether a call for ``key`` runs in a thread (which cannot be stopped) now."""
        return key in self._running

    async def run(self, call: Callable[[], Any], key: object) -> Any:
        """Run ``call`` for ``key`` in a thread and return its result (or raise its
        exception). A cancellation waits until the thread returns (see the module
        docstring), unless the threads were let go."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._running[key] = future
        future.add_done_callback(lambda _: self._running.pop(key, None))
        context = contextvars.copy_context()  # (current_job() in the handler)
        self._submit(lambda: _run_call(loop, future, context, call))
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                if self._let_go:
                    raise
        return future.result()

    def let_go(self) -> None:
        """Stop holding cancellations: the worker is done with the calls still running."""
        self._let_go = True

    def close(self) -> None:
        """End the idle threads now (the others end when their call returns and they
        stay idle)."""
        with self._lock:
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._calls.put(None)

    def _submit(self, call: Callable[[], None]) -> None:
        with self._lock:
            spawn = not self._idle
            if not spawn:
                self._idle -= 1
        self._calls.put(call)
        if spawn:
            threading.Thread(target=self._serve, name="aioqueue-handler", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # no call is promised to this thread: it may end
                        self._idle -= 1
                        return
                continue
            if call is None:
                return
            call()
            with self._lock:
                self._idle += 1


class Escaped(Exception):
    """A BaseException a call raised in its thread (SystemExit, GeneratorExit...), carried
    back as a plain exception: those must not travel through an asyncio Future."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


def escaping(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, in a thread: what it raises beyond an Exception comes
    back as an Escaped (data, not control flow)."""
    try:
        return call(*args, **kwargs)
    except Exception:
        raise
    except BaseException as exc:
        raise Escaped(exc) from exc


def unescaped(exc: BaseException) -> BaseException:
    """What a call really raised: an Escaped's original, else ``exc`` itself."""
    return exc.original if isinstance(exc, Escaped) else exc


def _run_call(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    context: contextvars.Context,
    call: Callable[[], Any],
) -> None:
    """In a thread: run the call and hand its outcome to the loop."""
    result, error = None, None
    try:
        result = context.run(call)
    except BaseException as exc:
        error = exc
    if isinstance(error, StopIteration):  # a Future cannot carry it
        error = RuntimeError(f"the handler raised StopIteration: {error!r}")
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_deliver, future, result, error)


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
