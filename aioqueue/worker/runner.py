"""What a taken job runs, and what its outcome means: decode -> find the task -> check the
arguments -> call the handler (through the middleware; its ``Depends()`` resolved around
it, ``injection``) -> hooks -> a Settlement.

Every path ends in a Settlement for the ack script, so no input can crash a worker or
vanish: bad payloads, unknown tasks and wrong arguments are buried with the reason;
errors are retried by the task's policy and buried when attempts run out.

``run_job`` is a function from a job to its Settlement: it reads the job (``Run``: its
Taken, its queue, whether it was settled without the run) and writes nothing on it. What
it learns on the way it reports to the job's owner (``Owner``, the worker's ``InFlight``):
the task the job starts as, and, with the handler's call, its task, timeout and context.
How long the handler may run, and what an abort or a shutdown does to it, is the owner's
business: the runner only asks it to call the handler.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..core.errors import PayloadError, Retry, SerializationError, UnknownTask, describe
from ..core.lifecycle import Settlement
from ..core.middleware import JobContext, Middleware, call_hooks, enter_job, wrap
from ..core.observers import JobWatchers
from ..core.payload import Payload, decode_inputs, encode_error, encode_result
from ..core.records import ErrorInfo
from . import injection
from .threads import HandlerThreads, escaping, unescaped

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ..core.handlers import Handler
    from ..core.lifecycle import Taken
    from ..core.middleware import CallNext
    from .acks import Batcher

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunEnv:
    """What every job of a worker runs with."""

    find_task: Callable[[str], Handler[..., Any] | None]
    middleware: Sequence[Middleware] = ()
    state: dict[str, Any] = field(default_factory=dict)
    watchers: JobWatchers = field(default_factory=JobWatchers)  # observers' job callbacks
    # a workflow parent's inputs hash, by queue name and job id (reads.inputs)
    read_inputs: Callable[[str, bytes], Awaitable[Mapping[bytes, bytes]]] | None = None
    threads: HandlerThreads = field(default_factory=HandlerThreads)  # plain def handlers'
    # worker-scoped dependencies' values, by provider (injection.WorkerResources.values)
    provided: Mapping[Callable[..., Any], Any] = field(default_factory=dict)


class Run(Protocol):
    """A job as the runner sees it: read-only (its owner alone writes its state)."""

    @property
    def taken(self) -> Taken: ...

    @property
    def queue(self) -> str: ...

    @property
    def acks(self) -> Batcher: ...  # where its progress reports go

    @property
    def settled(self) -> bool: ...  # settled without the run (abandoned: its hooks ran then)

    @property
    def interrupted(self) -> bool: ...  # cancelled from outside its handler


J = TypeVar("J", bound=Run)
J_contra = TypeVar("J_contra", bound=Run, contravariant=True)


class Owner(Protocol[J_contra]):
    """What the runner reports to the owner of the job it runs, and asks of it."""

    def observe(self, job: J_contra, task: str) -> None:
        """The job starts as ``task``: tell the observers (called only when there are)."""

    async def call_handler(
        self,
        job: J_contra,
        call: CallNext,
        task: Handler[..., Any],
        timeout: float | None,
        context: JobContext,
    ) -> Any:
        """Await ``call`` (the handler, through the middleware) under ``timeout``. Raises
        what the handler raised; TimeoutError or HandlerTimeout when it ran out of time;
        CancelledError when the job is interrupted otherwise."""


async def run_job(job: J, env: RunEnv, owner: Owner[J]) -> Settlement:
    """Run one taken job to its Settlement. A CancelledError that the handler did not
    raise itself (an abort, a shutdown) propagates: the owner settles that."""
    taken = job.taken
    found = _find(job, env, owner)
    if isinstance(found, Settlement):
        return _unrun(job, found)
    found_payload, task = found
    _started(job, env, owner, task.name)
    if found_payload.inputs is not None:  # a workflow's parent
        checked = _checked(taken, task, await _with_inputs(job, env, task, found_payload))
    else:
        checked = _checked(taken, task, found_payload)
    if isinstance(checked, Settlement):
        return _unrun(job, checked, task.name)
    payload = checked
    timeout = payload.timeout or task.options.timeout
    context = _context(taken, job.queue, task, env, payload.headers, job.acks)
    enter_job(context)
    call = _handler_call(task, payload, env, job, context)
    if env.middleware:
        call = wrap(env.middleware, context, call)
    try:
        result = await owner.call_handler(job, call, task, timeout, context)
        data = encode_result(result)
    except asyncio.CancelledError as exc:
        if job.interrupted:
            raise
        return await _failed(job, task, context, exc)  # raised by the handler itself
    except SerializationError as exc:
        settlement = _unrun(job, bury(taken, "SerializationError", str(exc)), task.name)
        return await _ended(job, task, context, settlement, exc)
    except BaseException as exc:
        return await _failed(job, task, context, exc)
    settlement = Settlement(taken.id, taken.lease, "complete", data)
    if not task.hooks:  # (most tasks: no coroutine for nothing)
        return settlement
    return await _ended(job, task, context, settlement, result)


def _find(job: J, env: RunEnv, owner: Owner[J]) -> tuple[Payload, Handler[..., Any]] | Settlement:
    """The job's payload and task, or how it ends without running: expired, or buried
    (an undecodable payload, a task this worker lacks)."""
    taken, payload = job.taken, None
    try:
        payload = Payload.decode(taken.payload)
        if _expired(taken, payload):
            return expire(taken, payload.expires_ms)
        task = env.find_task(payload.task)
        if task is None:
            raise UnknownTask(payload.task)
    except (PayloadError, UnknownTask) as exc:
        _started(job, env, owner, payload.task if payload else "?")
        return bury(taken, type(exc).__name__, str(exc))
    return payload, task


def _checked(
    taken: Taken, task: Handler[..., Any], payload: Payload | Settlement
) -> Payload | Settlement:
    """The payload, its arguments decoded as the task's annotations declare, if the task
    can take them; else the job is buried."""
    if isinstance(payload, Settlement):
        return payload
    try:
        task.check_arguments(payload.args, payload.kwargs)
        if task.decoder is not None:  # what its annotations declare (core/arguments.py)
            skip = 0 if payload.inputs is None else 1  # a parent's inputs come first
            payload.args, payload.kwargs = task.decoder.decode(payload.args, payload.kwargs, skip)
    except TypeError as exc:  # retrying cannot help: the same arguments come back
        return bury(taken, "TypeError", f"wrong arguments for {task.name}: {exc}")
    return payload


async def _with_inputs(
    job: Run, env: RunEnv, task: Handler[..., Any], payload: Payload
) -> Payload | Settlement:
    """A workflow's parent: its children's outcomes become its first argument."""
    if env.read_inputs is None or payload.inputs is None:  # (no Redis: a test's runner)
        return payload
    try:
        outcomes = await env.read_inputs(job.queue, job.taken.id)
    except Exception as exc:  # (Redis unreachable) an attempt that failed
        return failed(job.taken, task, exc, job.queue)
    try:
        inputs = decode_inputs(payload.inputs, outcomes)
    except ValueError as exc:
        return bury(job.taken, "PayloadError", f"undecodable workflow inputs: {exc}")
    return dataclasses.replace(payload, args=(inputs, *payload.args))


async def _failed(
    job: Run, task: Handler[..., Any], context: JobContext, exc: BaseException
) -> Settlement:
    if job.settled:  # abandoned meanwhile: settled (and logged) without it
        return Settlement(job.taken.id, job.taken.lease, "release")
    return await _ended(job, task, context, failed(job.taken, task, exc, job.queue), exc)


async def _ended(
    job: Run, task: Handler[..., Any], context: JobContext, settlement: Settlement, outcome: Any
) -> Settlement:
    """The hooks of how the run ended, unless the job was settled without it (abandoned
    past its timeout: its hooks ran then). The owner ignores a settled job's Settlement."""
    if job.settled:
        return settlement
    return await run_hooks(task, context, settlement, outcome)


async def run_hooks(
    task: Handler[..., Any], context: JobContext, settlement: Settlement, outcome: Any
) -> Settlement:
    """Run the task's hooks for this outcome (cheap when it has none): on_success; or
    on_failure, then on_retry or on_dead. ``outcome`` is the result or the error."""
    hooks = task.hooks
    if not hooks:
        return settlement
    if settlement.outcome == "complete":
        await call_hooks(hooks.success, context, outcome)
        return settlement
    error = unescaped(outcome)
    await call_hooks(hooks.failure, context, error)
    if settlement.outcome == "retry":
        await call_hooks(hooks.retry, context, error, settlement.delay_ms / 1000)
    else:
        await call_hooks(hooks.dead, context, error)
    return settlement


def _started(job: J, env: RunEnv, owner: Owner[J], task: str) -> None:
    """Tell the observers (if any: a truth test per job) that the job starts."""
    if env.watchers.started or env.watchers.ended:
        owner.observe(job, task)


def _context(
    taken: Taken,
    queue: str,
    task: Handler[..., Any],
    env: RunEnv,
    headers: Mapping[str, str] | None = None,
    acks: Batcher | None = None,
) -> JobContext:
    max_attempts = taken.max_attempts or task.options.max_attempts
    # Not a partial of the job: the job holds its context, and that cycle would leave every
    # finished job to the garbage collector (measured: ~2 us per no-op job).
    report = None if acks is None else functools.partial(_report_progress, acks, taken)
    return JobContext(
        taken.job_id, queue, task.name, taken.attempts, max_attempts, env.state,
        headers or {}, report,
    )  # fmt: skip


async def _report_progress(acks: Batcher, taken: Taken, value: Any) -> bool:
    data = encode_result(value)  # the same rule as a result: JSON, or SerializationError
    return await acks.report_progress(taken, data)


async def expired_hooks(env: RunEnv, queue: str, job: Taken, error: BaseException) -> None:
    """A job this worker's lease reclaim buried (its worker died, attempts used): run its
    on_failure and on_dead hooks here. The reclaim that buries it is one atomic step, so
    no other worker runs them; if its reply is lost (a dropped connection: the resend finds
    nothing left to bury), nobody does: at most once. A worker without the task says so."""
    try:
        task = env.find_task(Payload.decode(job.payload).task)
    except PayloadError:
        task = None
    if task is None:
        logger.warning(
            "job %s of %s died of an expired lease; this worker has no task for it, so its "
            "on_failure/on_dead hooks did not run", job.job_id, queue,
        )  # fmt: skip
        return
    settlement = Settlement(job.id, job.lease, "bury")
    await run_hooks(task, _context(job, queue, task, env), settlement, error)


def _handler_call(
    task: Handler[..., Any], payload: Payload, env: RunEnv, job: Run, context: JobContext
) -> CallNext:
    threads, args, kwargs = env.threads, payload.args, payload.kwargs
    if task.injection is None:  # no Depends() (read once, at registration)
        if task.is_async:  # its own coroutine: no frame of ours around it
            return functools.partial(task.fn, *args, **kwargs)
        return functools.partial(_invoke, task, threads, job, args, kwargs)
    invoke = functools.partial(_invoke, task, threads, job, args)  # (given its kwargs)
    return functools.partial(
        injection.call_injected, task.injection, invoke, kwargs, context, env.provided, threads,
        job,
    )  # fmt: skip


async def _invoke(
    task: Handler[..., Any],
    threads: HandlerThreads,
    job: Run,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """Call the handler: a plain ``def`` in a thread, which nothing can stop: a cancellation
    waits until it returns (``threads``; its owner knows it runs there by ``job``), and the
    owner settles the job by what it did."""
    if task.is_async:
        return await task.fn(*args, **kwargs)
    call = functools.partial(escaping, task.fn, *args, **kwargs)
    result = await threads.run(call, job)
    if inspect.isawaitable(result):  # a plain callable that returned a coroutine
        result = await result
    return result


def failed(taken: Taken, task: Handler[..., Any], exc: BaseException, queue: str) -> Settlement:
    """A failed attempt: retried by the task's policy, or dead (failed) when it is over."""
    exc = unescaped(exc)
    error = encode_error(type(exc).__name__, str(exc), _format(exc))
    max_attempts = taken.max_attempts or task.options.max_attempts
    retryable = not isinstance(exc, task.options.never_retry)
    fields = job_fields(taken, task.name, queue, attempt=taken.attempts)
    if retryable and (max_attempts < 0 or taken.attempts < max_attempts):  # < 0: forever
        if isinstance(exc, Retry) and exc.delay is not None:
            delay = exc.delay
        else:
            delay = task.options.backoff(taken.attempts)
        logger.info(
            "job %s (%s) attempt %d/%d failed, retry in %.3fs: %s",
            taken.job_id, task.name, taken.attempts, max_attempts, delay, describe(exc),
            extra=fields,
        )  # fmt: skip
        return Settlement(taken.id, taken.lease, "retry", error, max(0, int(delay * 1000)))
    logger.error(  # with the handler's traceback: the job is dead
        "job %s (%s) failed for good after %d attempt(s): %s",
        taken.job_id, task.name, taken.attempts, describe(exc), exc_info=exc, extra=fields,
    )  # fmt: skip
    return Settlement(taken.id, taken.lease, "bury" if task.options.dead_letter else "fail", error)


def job_fields(taken: Taken, task: str, queue: str, **more: object) -> dict[str, object]:
    """The fields of a log line about a job (``extra=``: JSON logs show them)."""
    return {"job_id": taken.job_id, "task": task, "queue": queue, **more}


def _unrun(job: Run, settlement: Settlement, task: str = "?") -> Settlement:
    """A job that ends without running its handler (expired, or buried: bad input, a task
    this worker lacks): say so, with the reason."""
    if settlement.outcome in ("bury", "expire"):
        error = ErrorInfo.decode(settlement.data)
        log = logger.warning if settlement.outcome == "bury" else logger.info
        log(
            "job %s (%s) %s: %s: %s", job.taken.job_id, task,
            "buried" if settlement.outcome == "bury" else "expired", error.type, error.message,
            extra=job_fields(job.taken, task, job.queue),
        )  # fmt: skip
    return settlement


def _expired(taken: Taken, payload: Payload) -> bool:
    """Not started within its ``expires`` of being due (by the Redis clock: how long the
    take found it ready). Only a first start expires: a retry has started before."""
    limit = payload.expires_ms
    return limit is not None and taken.attempts == 1 and taken.waited_ms > limit


def expire(taken: Taken, expires_ms: int | None) -> Settlement:
    message = f"not started within {expires_ms} ms of being due (waited {taken.waited_ms} ms)"
    return Settlement(taken.id, taken.lease, "expire", encode_error("JobExpired", message, ""))


def bury(taken: Taken, error_type: str, message: str) -> Settlement:
    """Straight to the dead set: retrying cannot help (bad input, a result JSON can't hold).
    (``run_job`` logs it.)"""
    return Settlement(taken.id, taken.lease, "bury", encode_error(error_type, message, ""))


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
