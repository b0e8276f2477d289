"""An app for the CLI tests; its key prefix comes from the environment so tests stay isolated."""

from __future__ import annotations

import asyncio
import gc
import os

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-cli-test"))


@app.task(retries=0)
async def shout(word: str) -> str:
    if word == "boom":
        raise ValueError("cannot shout boom")
    return word.upper()


@app.task(timeout=None)
async def nap(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "rested"


@app.task
async def collector() -> list[int]:
    """How the worker process's garbage collector is set: [gen-0 threshold, frozen]."""
    return [gc.get_threshold()[0], gc.get_freeze_count()]


not_an_app = object()
