"""OpenTelemetry tracing: a send span per enqueue, a process span per attempt, one trace from
the request that enqueued to the run, across apps and processes. Spans go to the SDK's
in-memory exporter through a provider passed to ``instrument()``: the global one is never set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import attach, detach
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import (
    NonRecordingSpan,
    NoOpTracerProvider,
    ProxyTracerProvider,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
)

import aioqueue
from aioqueue import current_job
from aioqueue.ops.tracing import Tracing, instrument
from tests.helpers import drain, wait_until


class Traced:
    """A tracer provider that keeps its spans in memory, and ways to look at them."""

    def __init__(self, **options: Any) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(**options)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        finished = self.exporter.get_finished_spans()
        return [span for span in finished if name is None or span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.spans(name)
        return span


@pytest.fixture
def traced() -> Iterator[Traced]:
    traced = Traced()
    yield traced
    traced.provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def ids(span: ReadableSpan) -> tuple[int, int]:
    """(trace id, span id)."""
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def attribute(span: ReadableSpan, key: str) -> object:
    assert span.attributes is not None
    return span.attributes.get(key)


async def _ended(traced: Traced) -> bool:
    """The run's span has ended."""
    return bool(traced.spans("process default"))


async def test_a_run_continues_the_trace_of_the_request_that_enqueued(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)
    seen: list[tuple[dict[str, str], int]] = []

    @app.task
    async def welcome(user: str) -> str:
        job = current_job()
        seen.append((dict(job.headers), trace.get_current_span().get_span_context().span_id))
        return f"hi {user}"

    with traced.tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER):
        job = await welcome.enqueue("ada")
    assert await drain(app) == {"complete": 1}
    assert await job.result(timeout=5) == "hi ada"

    request, send, process = (
        traced.one("POST /signup"), traced.one("send default"), traced.one("process default")
    )  # fmt: skip
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert parent_of(send) == ids(request)[1]
    assert parent_of(process) == ids(send)[1]
    assert process.parent is not None and process.parent.is_remote  # it came through Redis
    assert ids(request)[0] == ids(send)[0] == ids(process)[0]
    [(headers, current)] = seen
    _, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert (int(trace_id, 16), int(span_id, 16)) == ids(send)
    assert int(flags, 16) & TraceFlags.SAMPLED
    assert current == ids(process)[1]  # the run's span is current in the handler
    assert dict(send.attributes or {}) == {
        "messaging.system": "aioqueue",
        "messaging.destination.name": "default",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "aioqueue.task.name": "welcome",
    }
    assert dict(process.attributes or {}) == {
        "messaging.system": "aioqueue",
        "messaging.destination.name": "default",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.message.id": job.id,
        "aioqueue.task.name": "welcome",
        "aioqueue.job.attempt": 1,
        "aioqueue.job.max_attempts": 3,
        "aioqueue.job.outcome": "complete",
    }
    assert send.status.status_code is process.status.status_code is StatusCode.UNSET


async def test_a_job_enqueued_by_a_handler_continues_the_trace(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task
    async def child() -> None:
        with traced.tracer.start_as_current_span("inside child"):
            pass

    @app.task
    async def parent() -> None:
        await child.enqueue()

    with traced.tracer.start_as_current_span("request"):
        await parent.enqueue()
    assert await drain(app) == {"complete": 2}

    runs = {attribute(span, "aioqueue.task.name"): span for span in traced.spans("process default")}
    sends = {attribute(span, "aioqueue.task.name"): span for span in traced.spans("send default")}
    assert parent_of(sends["parent"]) == ids(traced.one("request"))[1]
    assert parent_of(runs["parent"]) == ids(sends["parent"])[1]
    assert parent_of(sends["child"]) == ids(runs["parent"])[1]
    assert parent_of(runs["child"]) == ids(sends["child"])[1]
    assert parent_of(traced.one("inside child")) == ids(runs["child"])[1]
    assert len({span.context.trace_id for span in traced.spans() if span.context}) == 1


async def test_many_jobs_enqueued_at_once_have_a_send_span_each(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task
    async def work(n: int) -> int:
        return n

    with traced.tracer.start_as_current_span("request"):
        await app.queue().enqueue_many(work.enqueue(n) for n in range(3))
    await drain(app)
    sends, runs = traced.spans("send default"), traced.spans("process default")
    assert len(sends) == len(runs) == 3
    assert {parent_of(span) for span in runs} == {ids(span)[1] for span in sends}


async def test_a_failing_handler_records_its_error(app: aioqueue.App, traced: Traced) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task(retries=0)
    async def broken() -> None:
        raise ValueError("no such user")

    await broken.enqueue()
    assert await drain(app) == {"bury": 1}
    span = traced.one("process default")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: no such user"
    assert attribute(span, "error.type") == "ValueError"
    assert attribute(span, "aioqueue.job.outcome") == "bury"
    [event] = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "ValueError"
    assert dict(event.attributes or {})["exception.message"] == "no such user"


async def test_each_attempt_of_a_retried_job_is_a_span_with_the_same_parent(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task(retries=2, backoff=aioqueue.Fixed(0))
    async def flaky() -> str:
        if current_job().attempt < 3:
            raise ConnectionError("upstream down")
        return "ok"

    await flaky.enqueue()
    assert await drain(app) == {"retry": 2, "complete": 1}
    runs = sorted(traced.spans("process default"), key=lambda span: span.start_time or 0)
    assert [attribute(span, "aioqueue.job.attempt") for span in runs] == [1, 2, 3]
    assert [attribute(span, "aioqueue.job.outcome") for span in runs] == [
        "retry", "retry", "complete",
    ]  # fmt: skip
    assert [span.status.status_code for span in runs] == [
        StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET,
    ]  # fmt: skip
    assert {parent_of(span) for span in runs} == {ids(traced.one("send default"))[1]}
    assert len({ids(span)[1] for span in runs}) == 3


async def test_a_timeout_is_an_error_of_type_timeout(app: aioqueue.App, traced: Traced) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task(timeout=0.05, retries=0)
    async def stuck() -> None:
        await asyncio.Event().wait()

    @app.task(timeout=0.05, retries=0)
    async def stubborn() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # swallows its timeout: aioqueue
            await asyncio.Event().wait()  # fails it with HandlerTimeout

    await stuck.enqueue()
    await stubborn.enqueue()
    assert await drain(app) == {"bury": 2}
    for span in traced.spans("process default"):
        assert attribute(span, "error.type") == "timeout"
        assert span.status.status_code is StatusCode.ERROR
        assert attribute(span, "aioqueue.job.outcome") == "bury"


async def test_a_cancelled_job_keeps_an_unset_status(app: aioqueue.App, traced: Traced) -> None:
    instrument(app, tracer_provider=traced.provider)
    started = asyncio.Event()

    @app.task
    async def long_job() -> None:
        started.set()
        await asyncio.Event().wait()

    job = await long_job.enqueue()
    async with app.worker() as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await job.cancel() is True
        await wait_until(lambda: _ended(traced), timeout=5)
        assert worker.outcomes["abort"] == 1
    span = traced.one("process default")
    assert attribute(span, "aioqueue.job.outcome") == "abort"
    assert span.status.status_code is StatusCode.UNSET
    assert attribute(span, "error.type") is None and not span.events


async def test_a_job_released_by_a_stopping_worker_keeps_an_unset_status(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)
    started = asyncio.Event()

    @app.task
    async def long_job() -> None:
        started.set()
        await asyncio.Event().wait()

    await long_job.enqueue()
    async with app.worker(grace=0):
        await asyncio.wait_for(started.wait(), 5)
    span = traced.one("process default")
    assert attribute(span, "aioqueue.job.outcome") == "release"
    assert span.status.status_code is StatusCode.UNSET


async def test_a_failed_enqueue_ends_its_send_span_with_the_error(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task
    async def work(value: object) -> None:
        pass

    with pytest.raises(aioqueue.SerializationError):
        await work.enqueue(object())
    span = traced.one("send default")
    assert span.status.status_code is StatusCode.ERROR
    assert attribute(span, "error.type") == "aioqueue.core.errors.SerializationError"


async def test_a_job_without_trace_context_starts_a_trace_of_its_own(
    app: aioqueue.App, traced: Traced, redis_url: str, prefix: str
) -> None:
    producer = aioqueue.App(redis_url=redis_url, prefix=prefix)  # not instrumented
    instrument(app, tracer_provider=traced.provider)

    @app.task
    async def work() -> None:
        pass

    await producer.queue().enqueue("work")
    await producer.close()
    with traced.tracer.start_as_current_span("worker startup"):
        await drain(app)  # the job's task inherits this context: its span must not
    assert traced.one("process default").parent is None


@pytest.mark.parametrize("provider", ["no-op", "global, not set up"])
async def test_without_a_tracer_provider_no_headers_are_added(
    app: aioqueue.App, provider: str
) -> None:
    if provider == "no-op":
        instrument(app, tracer_provider=NoOpTracerProvider())
    elif isinstance(trace.get_tracer_provider(), ProxyTracerProvider):
        instrument(app)
    else:
        pytest.skip("something in this process set up a global tracer provider")
    seen: list[dict[str, str]] = []

    @app.task
    async def work() -> None:
        seen.append(dict(current_job().headers))

    await work.enqueue()
    await drain(app)
    assert seen == [{}]


async def test_without_an_sdk_a_trace_coming_in_still_reaches_the_run(app: aioqueue.App) -> None:
    instrument(app, tracer_provider=NoOpTracerProvider())
    incoming = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    seen: list[tuple[str, SpanContext]] = []

    @app.task
    async def work() -> None:
        current = trace.get_current_span().get_span_context()
        seen.append((current_job().headers["traceparent"], current))

    token = attach(trace.set_span_in_context(NonRecordingSpan(incoming)))
    try:
        await work.enqueue()
    finally:
        detach(token)
    await drain(app)
    [(traceparent, current)] = seen
    assert traceparent == f"00-{0xABC:032x}-{0xDEF:016x}-01"
    assert (current.trace_id, current.span_id) == (0xABC, 0xDEF)


async def test_sampled_out_traces_record_nothing_but_keep_their_context(
    app: aioqueue.App,
) -> None:
    traced = Traced(sampler=ALWAYS_OFF)
    instrument(app, tracer_provider=traced.provider)
    seen: list[str] = []

    @app.task
    async def work() -> None:
        seen.append(current_job().headers["traceparent"])

    await work.enqueue()
    await drain(app)
    assert traced.spans() == []
    flags = int(seen[0].rsplit("-", 1)[1], 16)
    assert not flags & TraceFlags.SAMPLED  # not sampled, and the run follows that decision
    assert not app.registry.observers[0]._runs  # type: ignore[attr-defined]
    traced.provider.shutdown()


async def test_an_app_is_instrumented_once(app: aioqueue.App, traced: Traced) -> None:
    tracing = instrument(app, tracer_provider=traced.provider)
    assert isinstance(tracing, Tracing) and app.registry.middleware[0] == tracing.process
    with pytest.raises(aioqueue.ConfigError):
        instrument(app, tracer_provider=traced.provider)


async def test_the_trace_goes_from_one_app_to_another_apps_worker(
    traced: Traced, redis_url: str, prefix: str
) -> None:
    web = aioqueue.App(redis_url=redis_url, prefix=prefix)  # a producer without the code
    worker_app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    web_provider = Traced()  # its own provider too, as in another process
    instrument(web, tracer_provider=web_provider.provider)
    instrument(worker_app, tracer_provider=traced.provider)

    @worker_app.task
    async def resize(width: int) -> int:
        return width // 2

    try:
        with web_provider.tracer.start_as_current_span("POST /upload"):
            job = await web.queue().enqueue("resize", 640)
        assert await drain(worker_app) == {"complete": 1}
        assert await job.result(timeout=5) == 320
    finally:
        await web.close()
        await worker_app.close()
    send, process = web_provider.one("send default"), traced.one("process default")
    assert parent_of(send) == ids(web_provider.one("POST /upload"))[1]
    assert parent_of(process) == ids(send)[1]
    assert ids(process)[0] == ids(send)[0]
    web_provider.provider.shutdown()


async def test_spans_of_a_sync_handler_are_children_of_its_run(
    app: aioqueue.App, traced: Traced
) -> None:
    instrument(app, tracer_provider=traced.provider)

    @app.task
    def blocking() -> None:  # runs in a worker thread, which gets the job's context
        with traced.tracer.start_as_current_span("in thread"):
            pass

    await blocking.enqueue()
    assert await drain(app) == {"complete": 1}
    assert parent_of(traced.one("in thread")) == ids(traced.one("process default"))[1]


# -- a worker process of its own (``aioqueue worker tests.apps.tracing_app:app``) --------


async def run_worker(args: Sequence[str], env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", *args, env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()


@pytest.mark.real_redis("a worker process")
async def test_the_trace_reaches_a_worker_process(
    app: aioqueue.App, traced: Traced, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    instrument(app, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("POST /shout"):
        job = await app.queue().enqueue("shout", "hey")
    spans_file = tmp_path / "spans.jsonl"
    env = {
        **os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix,
        "TEST_SPANS_FILE": str(spans_file),
    }  # fmt: skip
    await run_worker(["worker", "tests.apps.tracing_app:app", "--burst"], env)
    assert await job.result(timeout=5) == "HEY"

    [process] = [json.loads(line) for line in spans_file.read_text().splitlines()]
    trace_id, send_id = ids(traced.one("send default"))
    assert process["name"] == "process default"
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["context"]["trace_id"] == f"0x{trace_id:032x}"
    assert process["parent_id"] == f"0x{send_id:016x}"
    assert process["attributes"]["messaging.message.id"] == job.id
    assert process["attributes"]["aioqueue.job.outcome"] == "complete"
