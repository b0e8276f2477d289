"""An app with tasks on two queues, for the CLI tests of commands given no ``-q``; its key
prefix comes from the environment so that tests stay isolated."""

from __future__ import annotations

import os

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-cli-test"))


@app.task(queue="emails", priority=7, retries=0)
async def send_email(to: str) -> str:
    if to == "bounce":
        raise ValueError(f"cannot deliver to {to}")
    return f"sent to {to}"


@app.task(queue="emails")
async def log_email(to: str) -> None:
    return None


@app.task(retries=0)
async def ping(n: int) -> int:
    if n < 0:
        raise ValueError("negative ping")
    return n
