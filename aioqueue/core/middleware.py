"""Middleware around every job, per-task outcome hooks, and the running job's context.

Middleware (app-wide) has the shape ``async def mw(job: JobContext, call_next) -> Any``:
it runs around the handler, may do work before and after ``await call_next()``, and sees
(and may transform) the result or the exception. Hooks (per task) run once an attempt's
outcome is decided: on success, on every failure, on retry and on dead. A hook that
raises is logged; it never changes the outcome.

``current_job()`` gives the running job's context anywhere inside its handler, including
``state``: the dict that worker startup hooks fill with shared resources (DB pools, HTTP
clients) and shutdown hooks close.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

ProgressReporter = Callable[[Any], Awaitable[bool]]

logger = logging.getLogger(__name__)


@dataclass(slots=True)  # not frozen: one is made per job, and a frozen __init__ costs 4x
class JobContext:
    """The job a handler (or middleware, or hook) is running for (read-only: what is
    written on it goes nowhere)."""

    id: str
    queue: str
    task: str
    attempt: int  # 1 on the first run
    max_attempts: int  # -1: unlimited (retries="forever")
    state: dict[str, Any]  # the worker's shared state, filled by startup hooks
    headers: Mapping[str, str] = field(default_factory=dict)  # set at enqueue by observers
    _report: ProgressReporter | None = field(default=None, repr=False, compare=False)

    async def set_progress(self, value: Any) -> bool:
        """Record how far the job has got: any JSON value (a fraction, a dict of counts),
        readable as ``await job.progress()`` and in the dashboard. One round trip; the
        last value wins. False if the job is no longer this worker's (its lease was
        lost); raises SerializationError if JSON cannot hold ``value``."""
        if self._report is None:
            raise LookupError("this job context cannot report progress")
        return await self._report(value)


CallNext = Callable[[], Awaitable[Any]]
Middleware = Callable[[JobContext, CallNext], Awaitable[Any]]
LifecycleHook = Callable[[dict[str, Any]], Awaitable[None]]

SuccessHook = Callable[[JobContext, Any], Awaitable[None] | None]
FailureHook = Callable[[JobContext, BaseException], Awaitable[None] | None]
RetryHook = Callable[[JobContext, BaseException, float], Awaitable[None] | None]

_CURRENT: ContextVar[JobContext] = ContextVar("aioqueue_current_job")


def current_job() -> JobContext:
    """The context of the job whose handler is running; LookupError outside a job."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise LookupError("current_job() is only available inside a running job") from None


def enter_job(context: JobContext) -> None:
    """Make ``context`` the current job (each job runs in its own asyncio task)."""
    _CURRENT.set(context)


def wrap(middleware: Sequence[Middleware], context: JobContext, handler: CallNext) -> CallNext:
    """The handler call wrapped in the middleware, the first one outermost."""
    call = handler
    for layer in reversed(middleware):
        call = _bind(layer, context, call)
    return call


def _bind(layer: Middleware, context: JobContext, call_next: CallNext) -> CallNext:
    async def call() -> Any:
        return await layer(context, call_next)

    return call


@dataclass(slots=True)
class TaskHooks:
    """Callbacks a task runs once an attempt's outcome is decided."""

    success: list[SuccessHook] = field(default_factory=list)
    failure: list[FailureHook] = field(default_factory=list)
    retry: list[RetryHook] = field(default_factory=list)
    dead: list[FailureHook] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.success or self.failure or self.retry or self.dead)


async def call_hooks(hooks: Sequence[Callable[..., Any]], *args: Any) -> None:
    """Run hooks in order; log (never raise) what they raise."""
    for hook in hooks:
        try:
            result = hook(*args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("hook %r failed", getattr(hook, "__name__", hook))
