"""A traced app for the tracing test's worker process: its spans go to $TEST_SPANS_FILE,
one JSON object per line, and its key prefix comes from $TEST_PREFIX."""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import aioqueue
from aioqueue.ops.tracing import instrument

provider = TracerProvider()
spans = Path(os.environ["TEST_SPANS_FILE"]).open("a", encoding="utf-8")  # noqa: SIM115
exporter = ConsoleSpanExporter(out=spans, formatter=lambda span: span.to_json(None) + "\n")
provider.add_span_processor(SimpleSpanProcessor(exporter))
app = aioqueue.App(prefix=os.environ["TEST_PREFIX"])
instrument(app, tracer_provider=provider)


@app.task
async def shout(word: str) -> str:
    return word.upper()
