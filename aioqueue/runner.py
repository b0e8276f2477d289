"""Run one job: decode -> look up task -> check arguments -> call under a timeout -> outcome.

Every path ends in a Settlement for the ack script, so no input can crash a worker or
vanish: bad payloads, unknown tasks and wrong arguments are buried with the reason;
errors are retried by the task's policy and buried when attempts run out.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from .deadlines import Deadlines
from .errors import Retry, SerializationError
from .job import Payload, PayloadError, encode_error, encode_result
from .middleware import CallNext, JobContext, Middleware, call_hooks, enter_job, wrap
from .scripts import Settlement, Taken
from .task import Task

logger = logging.getLogger(__name__)

TaskLookup = Callable[[str], Task[..., Any] | None]


@dataclass(frozen=True, slots=True)
class RunEnv:
    """What every job of a worker runs with."""

    find_task: TaskLookup
    middleware: Sequence[Middleware] = ()
    state: dict[str, Any] = field(default_factory=dict)
    deadlines: Deadlines = field(default_factory=Deadlines)


class HandlerTimeout(TimeoutError):
    """The handler ran past its timeout (it may have swallowed the cancellation)."""


class _Escaped(Exception):
    """A BaseException a sync handler raised in its thread, carried back as a plain
    exception: GeneratorExit or SystemExit must not travel through an asyncio Future."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


@dataclass(slots=True, eq=False)
class RunningJob:
    """One job in flight, as the worker and its watchdog see it."""

    taken: Taken
    queue: str
    handle: asyncio.Task[None] | None = None  # the asyncio task running it
    task: Task[..., Any] | None = None
    timeout: float | None = None
    deadline: float | None = None  # event-loop time when its handler is cancelled
    timed_out: bool = False  # Deadlines cancelled the handler at its deadline
    handler_done: bool = False  # the handler returned or raised (hooks may still run)
    timeout_cleared: bool = False  # the runner took back Deadlines' cancellation
    recancelled: bool = False  # the watchdog cancelled it again after its timeout
    aborted: bool = False  # cancelled on request (Queue.cancel of a running job)
    abandoned: bool = False  # the watchdog settled it: the handler ignored its cancellation

    def overdue_settlement(self) -> Settlement:
        """How a job whose handler would not stop at its timeout is settled."""
        assert self.task is not None
        error = HandlerTimeout(
            f"{self.task.name} ignored the cancellation at its {self.timeout}s timeout; "
            "abandoned (it may still be running in this process)"
        )
        return _failed(self.taken, self.task, error)


async def run_job(job: RunningJob, env: RunEnv) -> Settlement:
    """Run one taken job to its Settlement. Cancellation propagates to the caller."""
    taken = job.taken
    try:
        payload = Payload.decode(taken.payload)
    except PayloadError as exc:
        return _bury(taken, "PayloadError", str(exc))
    task = env.find_task(payload.task)
    if task is None:
        return _bury(taken, "UnknownTask", f"unknown task {payload.task!r}: no handler registered")
    try:
        task.check_arguments(payload.args, payload.kwargs)
    except TypeError as exc:  # retrying cannot help: the same arguments come back
        return _bury(taken, "TypeError", f"wrong arguments for {task.name}: {exc}")
    timeout = payload.timeout or task.options.timeout
    job.task, job.timeout = task, timeout
    context = JobContext(
        taken.job_id, job.queue, task.name, taken.attempts,
        taken.max_attempts or task.options.max_attempts, env.state,
    )  # fmt: skip
    enter_job(context)
    call = _handler_call(task, payload)
    if env.middleware:
        call = wrap(env.middleware, context, call)
    return await _run(job, env.deadlines, context, call)


async def _run(
    job: RunningJob, deadlines: Deadlines, context: JobContext, call: CallNext
) -> Settlement:
    """Call the handler (through the middleware) under the job's timeout; its Settlement.

    Deadlines cancels a handler at its timeout. Two ways around that are caught here: a
    handler that swallows the cancellation and returns, and one that blocks the event
    loop past its deadline.
    """
    taken, task, timeout = job.taken, job.task, job.timeout
    assert task is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    if timeout is not None:
        deadlines.watch(job, started + timeout)
    try:
        try:
            result = await call()
        finally:
            if timeout is not None:
                deadlines.unwatch(job)
        if job.timed_out or (timeout is not None and loop.time() - started > timeout):
            _clear_timeout_cancel(job)
            raise HandlerTimeout(
                f"{task.name} ran {loop.time() - started:.3f}s, over its {timeout}s timeout "
                "(it swallowed the cancellation or blocked the event loop)"
            )
        data = encode_result(result)
    except asyncio.CancelledError as exc:
        if job.timed_out and _clear_timeout_cancel(job):
            error = TimeoutError(f"{task.name} timed out after {timeout}s")
            return await _after(task, context, _failed(taken, task, error), error)
        if _cancelled_from_outside():
            raise  # shutdown or abort: the worker decides what happens to the job
        return await _after(task, context, _failed(taken, task, exc), exc)  # raised by itself
    except SerializationError as exc:
        return await _after(task, context, _bury(taken, "SerializationError", str(exc)), exc)
    except BaseException as exc:
        _clear_timeout_cancel(job)
        return await _after(task, context, _failed(taken, task, exc), exc)
    return await _after(task, context, Settlement(taken.id, taken.lease, "complete", data), result)


def _clear_timeout_cancel(job: RunningJob) -> bool:
    """Take back the cancellation Deadlines sent (once), so the job's own task is no longer
    marked as cancelled; True when no other cancellation (shutdown, abort) is pending."""
    if not job.timed_out or job.timeout_cleared:
        return False
    job.timeout_cleared = True
    task = asyncio.current_task()
    return task is not None and task.uncancel() == 0


async def _after(
    task: Task[..., Any], context: JobContext, settlement: Settlement, outcome: Any
) -> Settlement:
    """Run the task's hooks for this outcome (cheap when it has none)."""
    hooks = task.hooks
    if not hooks:
        return settlement
    if settlement.outcome == "complete":
        await call_hooks(hooks.success, context, outcome)
        return settlement
    error = outcome.original if isinstance(outcome, _Escaped) else outcome
    await call_hooks(hooks.failure, context, error)
    if settlement.outcome == "retry":
        await call_hooks(hooks.retry, context, error, settlement.delay_ms / 1000)
    else:
        await call_hooks(hooks.dead, context, error)
    return settlement


def _handler_call(task: Task[..., Any], payload: Payload) -> CallNext:
    async def call() -> Any:
        return await _invoke(task, payload)

    return call


async def _invoke(task: Task[..., Any], payload: Payload) -> Any:
    if task.is_async:
        return await task.fn(*payload.args, **payload.kwargs)
    call = functools.partial(_call_in_thread, task.fn, payload.args, payload.kwargs)
    result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    if inspect.isawaitable(result):  # a plain callable that returned a coroutine
        result = await result
    return result


def _call_in_thread(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception:
        raise
    except BaseException as exc:  # carried back to the loop as data
        raise _Escaped(exc) from exc


def _cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _failed(taken: Taken, task: Task[..., Any], exc: BaseException) -> Settlement:
    if isinstance(exc, _Escaped):
        exc = exc.original
    error = encode_error(type(exc).__name__, str(exc), _format(exc))
    max_attempts = taken.max_attempts or task.options.max_attempts
    retryable = not isinstance(exc, task.options.never_retry)
    if retryable and taken.attempts < max_attempts:
        if isinstance(exc, Retry) and exc.delay is not None:
            delay = exc.delay
        else:
            delay = task.options.backoff(taken.attempts)
        logger.info(
            "job %s (%s) attempt %d/%d failed: %r; retry in %.3fs",
            taken.job_id,
            task.name,
            taken.attempts,
            max_attempts,
            exc,
            delay,
        )
        return Settlement(taken.id, taken.lease, "retry", error, max(0, int(delay * 1000)))
    logger.warning(
        "job %s (%s) failed for good after %d attempt(s): %r",
        taken.job_id,
        task.name,
        taken.attempts,
        exc,
    )
    return Settlement(taken.id, taken.lease, "bury" if task.options.dead_letter else "fail", error)


def _bury(taken: Taken, error_type: str, message: str) -> Settlement:
    logger.warning("job %s buried: %s: %s", taken.job_id, error_type, message)
    return Settlement(taken.id, taken.lease, "bury", encode_error(error_type, message, ""))


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
