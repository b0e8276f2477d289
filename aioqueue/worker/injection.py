"""What a handler's ``Depends()`` parameters get (planned at registration by
``core/dependencies.py``): per job, around its handler's call, and per worker, from start
to stop.

Per job (``call_injected``): the job-scoped providers are called in the plan's order, each
once (a provider two others need is called once), with what they need: other providers'
values, the worker-scoped ones' (``WorkerResources``), the JobContext. Generators are
entered, and left however the call ends (returned, raised, cancelled by a timeout, an
abort or a shutdown; for a ``def`` handler, only once its thread has returned), in
reverse order, with the handler's exception thrown in as a ``with`` block does. This runs
inside the handler's call: under its timeout, inside the middleware. A provider that
raises fails the attempt with DependencyFailed naming it (the task's retry policy applies);
a cleanup that raises is logged and changes nothing. A ``def`` provider runs in the
worker's handler threads, as a ``def`` handler does (FastAPI runs them in a thread pool
too), so a blocking one never stalls the loop.

Per worker (``WorkerResources``): the startup hooks, then the worker-scoped providers of
every task and subscriber, when the worker starts (one that raises stops the start, and
what was opened is closed); when it stops, after its jobs, the providers' cleanup in
reverse order, then the shutdown hooks. Providers still in use by jobs left running in
threads at shutdown are closed when those jobs end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..core.dependencies import provider_name
from ..core.errors import DependencyFailed, Retry, describe
from .threads import escaping, unescaped

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping
    from types import TracebackType

    from ..core.dependencies import Injection, Provider
    from ..core.handlers import Handler
    from ..core.middleware import JobContext
    from ..core.registry import Registry
    from .threads import HandlerThreads

logger = logging.getLogger(__name__)


class Interruptible(Protocol):
    """The job a provider runs for (``runner.Run``): its owner may have interrupted it
    while a ``def`` provider ran in a thread, which no cancellation reaches."""

    @property
    def interrupted(self) -> bool: ...


async def call_injected(
    plan: Injection,
    call: Callable[[Mapping[str, Any]], Awaitable[Any]],
    kwargs: Mapping[str, Any],
    context: JobContext,
    provided: Mapping[Callable[..., Any], Any],
    threads: HandlerThreads,
    job: Interruptible,
) -> Any:
    """Resolve the job's dependencies, ``await call(kwargs)`` (the handler, given the job's
    keyword arguments and the injected ones), and clean up however it ends.
    ``provided``: the worker-scoped values."""
    async with contextlib.AsyncExitStack() as stack:
        values: dict[Provider, Any] = {}
        for provider in plan.steps:
            arguments = _arguments(provider, values, context, provided)
            values[provider] = await _provide(provider, arguments, stack, threads, job)
        named = dict(kwargs)
        for name, provider in plan.parameters:
            job_scoped = provider.scope == "job"
            named[name] = values[provider] if job_scoped else _worker(provided, provider)
        return await call(named)


def _arguments(
    provider: Provider,
    values: Mapping[Provider, Any],
    context: JobContext | None,
    provided: Mapping[Callable[..., Any], Any],
) -> dict[str, Any]:
    """What a provider is called with: each need's value (None: the JobContext)."""
    arguments: dict[str, Any] = {}
    for name, need in provider.needs:
        if need is None:
            arguments[name] = context
        elif need.scope == "job":
            arguments[name] = values[need]
        else:
            arguments[name] = _worker(provided, need)
    return arguments


def _worker(provided: Mapping[Callable[..., Any], Any], provider: Provider) -> Any:
    try:
        return provided[provider.fn]
    except KeyError:  # a runner built without a worker's resources
        raise DependencyFailed(
            provider.name,
            f"worker-scoped provider {provider.name} is not open here: it is opened when a "
            "worker starts",
        ) from None


async def _provide(
    provider: Provider,
    arguments: dict[str, Any],
    stack: contextlib.AsyncExitStack,
    threads: HandlerThreads | None,
    job: Interruptible | None,
) -> Any:
    """Call one provider (a generator: enter it, its exit pushed on ``stack``). What it
    raises becomes a DependencyFailed naming it; a Retry it raises and a cancellation
    pass as they are."""
    try:
        return await _open(provider, arguments, stack, threads, job)
    except (Retry, asyncio.CancelledError, DependencyFailed):
        raise
    except BaseException as exc:
        cause = unescaped(exc)
        scope = "worker-scoped provider" if provider.scope == "worker" else "provider"
        raise DependencyFailed(
            provider.name, f"{scope} {provider.name} raised {describe(cause)}"
        ) from cause


async def _open(
    provider: Provider,
    arguments: dict[str, Any],
    stack: contextlib.AsyncExitStack,
    threads: HandlerThreads | None,
    job: Interruptible | None,
) -> Any:
    fn, kind = provider.fn, provider.kind
    if kind == "async":
        return await fn(**arguments)
    if kind == "agen":
        manager = contextlib.asynccontextmanager(fn)(**arguments)
        value = await manager.__aenter__()
        stack.push_async_exit(_cleanup(provider, manager.__aexit__))
        return value
    run = functools.partial(_in_thread, threads, job)
    if kind == "gen":
        sync_manager = contextlib.contextmanager(fn)(**arguments)
        value = await run(sync_manager.__enter__)
        stack.push_async_exit(_cleanup(provider, functools.partial(run, sync_manager.__exit__)))
    else:
        value = await run(functools.partial(fn, **arguments))
    if job is not None and job.interrupted:  # cut short while its thread ran (which held
        raise asyncio.CancelledError  # the cancellation): go no further
    if inspect.isawaitable(value):  # a plain callable that returned a coroutine
        value = await value
    return value


def _cleanup(
    provider: Provider, leave: Callable[..., Awaitable[bool | None]]
) -> Callable[..., Awaitable[bool]]:
    """A generator's exit as the exit stack calls it: what it raises is logged, and it
    never suppresses the handler's exception (a cleanup changes nothing)."""

    async def leave_quietly(
        kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool:
        try:
            await leave(kind, error, tb)
        except Exception as exc:
            if exc is not error:  # (a generator that let the handler's error through)
                cause = unescaped(exc)
                logger.error(
                    "cleanup of provider %s raised %s; ignored",
                    provider.name, describe(cause), exc_info=cause,
                )  # fmt: skip
        return False

    return leave_quietly


async def _in_thread(
    threads: HandlerThreads | None, job: Interruptible | None, call: Callable[..., Any], *args: Any
) -> Any:
    """Run a ``def`` provider's step in a thread: the job's handler threads (which hold a
    cancellation until the thread returns), or the loop's default executor for the
    worker-scoped ones."""
    step = functools.partial(escaping, call, *args)
    if threads is None or job is None:
        return await asyncio.to_thread(step)
    return await threads.run(step, job)


# -- per worker ----------------------------------------------------------------------------


class WorkerResources:
    """A worker's shared resources: its startup hooks' ``state``, and the values of every
    worker-scoped provider its tasks and subscribers declare (``values``, by function)."""

    def __init__(self, registry: Registry, state: dict[str, Any]) -> None:
        self._registry = registry
        self.state = state
        self.values: dict[Callable[..., Any], Any] = {}
        self._stack = contextlib.AsyncExitStack()
        self._closing: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Run the startup hooks, then open the worker-scoped providers (raises
        DependencyFailed if one raises, after closing those opened)."""
        for hook in self._registry.startup_hooks:
            await hook(self.state)
        try:
            for provider in _worker_providers(self._handlers()):
                if provider.fn not in self.values:
                    arguments = _arguments(provider, {}, None, self.values)
                    value = await _provide(provider, arguments, self._stack, None, None)
                    self.values[provider.fn] = value
        except BaseException:
            await self._stack.aclose()
            raise
        if self.values:
            names = ", ".join(map(provider_name, self.values))
            logger.info("worker-scoped dependencies open: %s", names)

    async def close(self, running: asyncio.Future[None] | None = None) -> None:
        """Close the providers (now, or once ``running``, the jobs still running in
        threads, has ended), then run the shutdown hooks."""
        if running is not None and not running.done() and self.values:
            logger.info(
                "worker-scoped dependencies stay open until the jobs still running in threads end"
            )
            closing = self._close_after(running)
            self._closing = asyncio.get_running_loop().create_task(closing)
        else:
            await self._stack.aclose()
        for hook in reversed(self._registry.shutdown_hooks):
            try:
                await hook(self.state)
            except Exception:
                logger.exception("shutdown hook %r failed", getattr(hook, "__name__", hook))

    async def _close_after(self, running: asyncio.Future[None]) -> None:
        try:
            await asyncio.wait({running})
        finally:  # (cancelled too: the process is exiting)
            await self._stack.aclose()

    def _handlers(self) -> Iterable[Handler[..., Any]]:
        yield from self._registry.tasks.values()
        for subscriber in self._registry.subscribers.values():
            yield subscriber.task


def _worker_providers(handlers: Iterable[Handler[..., Any]]) -> list[Provider]:
    """The worker-scoped providers the handlers need, each after those it needs."""
    return [
        provider
        for handler in handlers
        if handler.injection is not None
        for provider in handler.injection.worker
    ]
