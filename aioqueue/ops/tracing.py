"""OpenTelemetry tracing: a span for each enqueue and one for each run, in one trace.

    from aioqueue.ops.tracing import instrument

    instrument(app)  # in the web app and in the worker's module alike

Needs the ``tracing`` extra (opentelemetry-api). Spans follow the OpenTelemetry messaging
semantic conventions:

- ``send <queue>`` (kind PRODUCER) covers one enqueue: checks, encoding and the Redis
  write. It is a child of the span current at the call (a web request's, say), ends once
  the write is done, and records the error if the enqueue raised. Its W3C trace context
  (``traceparent``, ``tracestate``, and whatever else the propagator writes, e.g.
  ``baggage``) goes into the job's headers, which are stored with the job in Redis.
- ``process <queue>`` (kind CONSUMER) covers one attempt: the middleware, the handler,
  then the task's hooks. Its parent is the context in the job's headers, so the run joins
  the enqueuing request's trace, in whatever process runs it; a job without headers gets
  a root span. Each attempt of a retried job is a span of its own with the same parent.
  While the handler runs its span is current: spans the handler starts are its children,
  and jobs it enqueues continue the trace.

A handler's exception is recorded on its span (status ERROR), then re-raised unchanged.
``aioqueue.job.outcome`` says how each attempt was settled: complete, retry, bury, fail,
abort (cancelled on request) or release (handed back by a stopping worker). An abort or a
shutdown is not the job's failure: its span keeps an unset status. A timeout is one: the
status is ERROR and ``error.type`` is ``timeout``.

With no tracer provider configured, the API's no-op tracer makes this nearly free: no
headers are added, no span is recorded. ``instrument()`` may run before the SDK is set
up: the global provider is looked up on each span.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import __version__
from ..core.errors import ConfigError
from ..core.observers import Observer

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context, attach, detach
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # say which extra is missing
    raise ImportError(
        "aioqueue tracing needs opentelemetry-api: pip install 'aioqueue[tracing]'"
    ) from exc

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import TracebackType

    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ..app import App
    from ..core.middleware import CallNext, JobContext
    from ..core.observers import JobEvent

__all__ = ["Tracing", "instrument"]

SYSTEM = "aioqueue"  # messaging.system: not one the conventions list, so our own name

# Settlement outcomes that are a failed attempt (the others: complete, abort, release).
_FAILURES = frozenset({"retry", "bury", "fail"})

# A job without headers starts a trace of its own: never a child of whatever happens to
# be current in the worker (its job tasks inherit the context the worker started in).
_ROOT = Context()


def instrument(
    app: App,
    *,
    tracer_provider: TracerProvider | None = None,
    propagator: TextMapPropagator | None = None,
) -> Tracing:
    """Trace every enqueue of ``app`` and every job its workers run.

    ``tracer_provider`` defaults to the global one (set up now or later); ``propagator``
    to the global text-map propagator (W3C trace context and baggage unless configured
    otherwise). Call it in every process: where jobs are enqueued and where a worker runs
    them, before the worker starts. The tracing middleware goes first, outermost: its span
    covers the app's other middleware, and it records the exception aioqueue's retry logic
    sees. Returns the registered ``Tracing``; ConfigError if the app has one already.
    """
    if any(isinstance(observer, Tracing) for observer in app.registry.observers):
        raise ConfigError("instrument(app): this app is instrumented already")
    tracer = trace.get_tracer("aioqueue", __version__, tracer_provider)
    tracing = app.add_observer(Tracing(tracer, propagator))
    app.registry.middleware.insert(0, tracing.process)
    return tracing


class Tracing(Observer):
    """The observer (send spans, and the end of each run's span) and the middleware
    (``process``: each run's span) that ``instrument()`` registers on an app."""

    def __init__(self, tracer: Tracer, propagator: TextMapPropagator | None = None) -> None:
        self._tracer = tracer
        self._propagator = propagator  # None: the global one, looked up on each use
        # Runs whose span is open, by (queue, job id, attempt): ``job_ended`` ends them.
        self._runs: dict[tuple[str, str, int], _Run] = {}

    # -- producer side -------------------------------------------------------------------

    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> _Sending | None:
        """Start the job's send span and put its trace context in ``headers``; the span
        ends when the write is done (or failed)."""
        span = self._tracer.start_span(
            f"send {queue}",
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": queue,
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "aioqueue.task.name": task,
            },
        )
        try:
            # A span that is not recorded (sampled out, or no SDK but a trace coming in)
            # still passes its context on, so the job's run follows the same decision.
            if span.get_span_context().is_valid:
                self._inject(headers, trace.set_span_in_context(span))
        except BaseException:
            span.end()
            raise
        return _Sending(span) if span.is_recording() else None

    def _inject(self, headers: dict[str, str], context: Context) -> None:
        if self._propagator is None:
            propagate.inject(headers, context)
        else:
            self._propagator.inject(headers, context)

    # -- worker side ---------------------------------------------------------------------

    async def process(self, job: JobContext, call_next: CallNext) -> Any:
        """The middleware: run the attempt inside its CONSUMER span, made current. The
        span ends in ``job_ended``, once the worker has settled the attempt."""
        parent = self._extract(job.headers) if job.headers else _ROOT
        span = self._tracer.start_span(
            f"process {job.queue}",
            parent,
            SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": job.queue,
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.message.id": job.id,
                "aioqueue.task.name": job.task,
                "aioqueue.job.attempt": job.attempt,
                "aioqueue.job.max_attempts": job.max_attempts,
            },
        )
        if not span.is_recording():
            if not span.get_span_context().is_valid:
                return await call_next()  # tracing is off and no trace came with the job
            token = attach(trace.set_span_in_context(span, parent))  # pass the context on
            try:
                return await call_next()
            finally:
                detach(token)
        run = self._runs[(job.queue, job.id, job.attempt)] = _Run(span)
        token = attach(trace.set_span_in_context(span, parent))
        try:
            return await call_next()
        except BaseException as exc:
            if not (isinstance(exc, asyncio.CancelledError) and _cancelling()):
                run.failed(exc)  # a CancelledError the handler raised itself is a failure
            raise
        finally:
            # Cancelled from outside (a timeout, an abort, a shutdown), whether the handler
            # let the cancellation through or swallowed it: the outcome says which.
            run.cut_short = _cancelling()
            run.returned = True
            detach(token)

    def _extract(self, headers: Mapping[str, str]) -> Context:
        if self._propagator is None:
            return propagate.extract(headers, _ROOT)
        return self._propagator.extract(headers, _ROOT)

    def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
        """End the attempt's span with its outcome. The worker calls this once for every
        attempt it started, after the hooks; for an abandoned handler (one that ignored
        its cancellation) before the handler has returned."""
        if not self._runs:
            return  # nothing recorded: tracing is off, or the middleware never ran
        run = self._runs.pop((job.queue, job.id, job.attempt), None)
        if run is not None:
            run.end(outcome)


@dataclass(slots=True, eq=False)
class _Run:
    """One attempt's open span, and what the middleware saw of the attempt."""

    span: Span
    errored: bool = False  # an exception was recorded
    cut_short: bool = False  # its task was cancelled from outside the handler
    returned: bool = False  # the middleware is done (False: abandoned, still running)
    ended: bool = False

    def failed(self, exc: BaseException) -> None:
        if not self.ended:  # an abandoned handler that ended after all: its span is closed
            _record_error(self.span, exc)
            self.errored = True

    def end(self, outcome: str) -> None:
        span = self.span
        span.set_attribute("aioqueue.job.outcome", outcome)
        if outcome in _FAILURES and not self.errored:
            if self.cut_short or not self.returned:
                # Only a timeout makes a run cut short from outside a failure (an abort or
                # a shutdown does not): TimeoutError, or HandlerTimeout once abandoned.
                span.set_attribute("error.type", "timeout")
                span.set_status(Status(StatusCode.ERROR, "timed out"))
            else:  # it returned, then failed: an unstorable result, or it blocked the loop
                span.set_attribute("error.type", "_OTHER")
                span.set_status(Status(StatusCode.ERROR, f"the attempt ended as {outcome}"))
        span.end()
        self.ended = True


class _Sending:
    """Keeps a send span open while the job is written; ends it, with the error if any."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, asyncio.CancelledError):
            # The caller was cancelled (the job may or may not be written): not an error.
            self._span.set_attribute("aioqueue.enqueue.cancelled", True)
        elif exc is not None:
            _record_error(self._span, exc)
        self._span.end()


def _cancelling() -> bool:
    """The current task has a cancellation pending: it was cancelled from outside."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _record_error(span: Span, exc: BaseException) -> None:
    """The exception as an event, ERROR status and ``error.type``, as the conventions ask."""
    kind = type(exc)
    module = kind.__module__
    qualified = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    span.record_exception(exc)
    span.set_attribute("error.type", qualified)
    span.set_status(Status(StatusCode.ERROR, f"{kind.__qualname__}: {exc}"))
