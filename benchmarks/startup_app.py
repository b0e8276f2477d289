"""The app ``python -m benchmarks.startup`` starts workers of: one task that ends its
worker's process as soon as it runs, so the process lives exactly from start to first job.

The Redis URL comes from the environment (``AIOQUEUE_REDIS_URL``), as in a deployment.
"""

from __future__ import annotations

import os

import aioqueue

QUEUE = "startup"

app = aioqueue.App(prefix="startup-bench", default_queue=QUEUE)


@app.task(queue=QUEUE, timeout=None)
async def first() -> None:
    """The first job taken: exit now, leaving its lease to expire (nobody waits on it)."""
    os._exit(0)
