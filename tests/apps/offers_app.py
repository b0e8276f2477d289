"""The app of tests/worker/test_offers.py's worker process (``python -m aioqueue worker
tests.apps.offers_app:app``, with AIOQUEUE_REDIS_URL and AIOQUEUE_PREFIX)."""

from __future__ import annotations

import aioqueue

app = aioqueue.App()


@app.task
async def echo(value: int) -> int:
    return value
