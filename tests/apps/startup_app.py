"""An app whose one task reports which of the modules a worker should not need are
loaded in the process that runs it (see tests/test_startup_imports.py)."""

from __future__ import annotations

import os
import sys

import aioqueue

UNNEEDED = (
    "aioqueue.client.messaging", "aioqueue.client.topics", "aioqueue.client.workflows",
    "aioqueue.ops.commands", "aioqueue.ops.embedded", "aioqueue.ops.metrics",
    "aioqueue.ops.tables", "aioqueue.ops.tracing", "aioqueue.store.sentinel", "aioqueue.testing",
    "aioqueue.web", "cronsim", "ctypes", "difflib", "fakeredis", "jinja2", "lupa",
    "opentelemetry", "prometheus_client", "rich", "starlette", "uvicorn", "zoneinfo",
)  # fmt: skip
"""Module prefixes a worker running plain jobs never uses: the dashboard, the one-shot
commands' tables, tracing, metrics, the memory:// backend, the embedded server (and the
ctypes it loads), Sentinel, periodic jobs' cron and time zones, messaging and workflows."""

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-startup-test"))


def unneeded_loaded() -> list[str]:
    """The modules of ``UNNEEDED`` this process has loaded, sorted."""
    return sorted(name for name in sys.modules if name.startswith(UNNEEDED))


@app.task
async def loaded() -> list[str]:
    """What the worker running this, its first job, has loaded of ``UNNEEDED``."""
    return unneeded_loaded()
