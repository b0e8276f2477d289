"""An app whose task is a plain ``def`` that blocks (in its thread) for as long as it is
told, marking a file when it starts and when it ends: for the process-exit tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-threads-test"))


@app.task(queue="threads", timeout=None)
def block(marker: str, seconds: float) -> str:
    Path(marker).write_text("started")
    time.sleep(seconds)
    Path(marker).write_text("ended")
    return "done"
