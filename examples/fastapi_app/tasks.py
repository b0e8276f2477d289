"""The App and the task of the FastAPI example: what the worker runs.

Both processes import this module: the web app to enqueue (its calls are type-checked
against the task's signature), the worker to run the task::

    export AIOQUEUE_REDIS_URL=redis://127.0.0.1:6379/0
    aioqueue worker examples.fastapi_app.tasks:app --grace 30

It imports nothing of the web side (no FastAPI, no pydantic), so a worker image or
virtualenv needs only aioqueue. What the task needs besides its arguments it declares
with ``aioqueue.Depends``, from the providers the API uses too (``resources.py``).
"""

from __future__ import annotations

import hashlib
from typing import TypedDict

import aioqueue
from aioqueue import Depends

from .resources import Renderer, Settings, get_settings, open_renderer

REPORTS = "reports"
MAX_PAGES = 50

# No URL in code: every process reads AIOQUEUE_REDIS_URL (and AIOQUEUE_PREFIX), so one
# image serves every environment. The default queue is the example's own, so that
# `aioqueue worker`/`aioqueue check` serve and check exactly that one.
app = aioqueue.App(default_queue=REPORTS)


class Report(TypedDict):
    """What a finished job returns (stored as JSON, read back by the web app)."""

    title: str
    pages: int
    words: int
    url: str


# ValueError means bad input: another attempt would fail the same way, so it goes
# straight to the dead set; anything else (a flaky database, a timeout) is retried twice.
@app.task(timeout=120, retries=2, never_retry=(ValueError,))
async def build_report(
    title: str,
    pages: int,
    *,
    # Injected by the worker, never job arguments: `build_report.enqueue(title, pages)`
    # type-checks without them (a default of Depends(...) makes them optional for mypy).
    renderer: Renderer = Depends(open_renderer, scope="worker"),  # one per worker
    settings: Settings = Depends(get_settings),  # per job
    job: aioqueue.JobContext = Depends(aioqueue.current_job),
) -> Report:
    """Render ``pages`` pages, reporting progress after each, and "store" the result."""
    if not 1 <= pages <= MAX_PAGES:
        raise ValueError(f"pages must be between 1 and {MAX_PAGES}, got {pages}")
    digest, words = hashlib.sha256(), 0
    for page in range(1, pages + 1):
        text = await renderer.page(title, page)
        digest.update(text.encode())
        words += len(text.split())
        # One small write per page: readers see it at once with `await job.progress()`.
        # (It returns False if this worker lost the job's lease: another worker runs it.)
        await job.set_progress({"done": page, "of": pages})
    # A real task would upload the file; the result is only where to find it, kept small
    # because results live in Redis (for result_ttl, a day by default).
    return {
        "title": title,
        "pages": pages,
        "words": words,
        "url": f"{settings.files_url}/{digest.hexdigest()[:16]}.pdf",
    }
