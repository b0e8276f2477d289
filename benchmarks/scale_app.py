"""The no-op tasks of ``benchmarks.scale``: one per queue, the queues named so that on a
cluster each lives on a different master (see ``benchmarks.scale.queue_names``)."""

from __future__ import annotations

import os

import aioqueue

QUEUES = os.environ.get("SCALE_QUEUES", "q0").split(",")
app = aioqueue.App(prefix=os.environ.get("SCALE_PREFIX", "scale"))


def _register(queue: str) -> None:
    @app.task(queue=queue, name=f"noop_{queue}")
    async def noop(n: int) -> None:
        return None


for _queue in QUEUES:
    _register(_queue)
