"""The web side of the FastAPI example: it enqueues and reads jobs, and never runs one.

Run the API and the worker as separate processes, against the same Redis::

    export AIOQUEUE_REDIS_URL=redis://127.0.0.1:6379/0
    aioqueue worker examples.fastapi_app.tasks:app        # one or more, anywhere
    uvicorn examples.fastapi_app.web:api --port 8000      # add --workers N as needed

    curl -si -X POST localhost:8000/reports -H 'content-type: application/json' \\
        -H 'Idempotency-Key: q3-sales' -d '{"title": "Q3 sales", "pages": 5}'
    curl -s localhost:8000/reports/report-q3-sales              # status and progress
    curl -s 'localhost:8000/reports/report-q3-sales/wait?timeout=10'   # until it settles

No Redis at hand? ``python -m examples.fastapi_app`` starts a private one, a worker and
this API together.

(No ``from __future__ import annotations`` here: FastAPI and pydantic read the
annotations at run time.)
"""

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import aioqueue

from . import resources, tasks

logger = logging.getLogger(__name__)

MAX_WAIT = 30.0  # seconds a /wait request may hold its connection (proxies time out)


# -- the App's lifecycle, and how handlers get the queue ----------------------------------


@contextlib.asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Connect at startup, so a wrong URL or an unreachable Redis fails the deploy rather
    than the first request; close the connections at shutdown. No worker is started:
    jobs run in `aioqueue worker` processes."""
    async with tasks.app:
        yield


def reports_queue() -> aioqueue.Queue:
    """The queue handlers enqueue to and read from. A dependency rather than a global in
    each handler: one place chooses it, and tests can swap it (dependency_overrides)."""
    return tasks.app.queue(tasks.REPORTS)


ReportsQueue = Annotated[aioqueue.Queue, Depends(reports_queue)]
# The worker's own provider (tasks.build_report takes it with aioqueue.Depends): here
# FastAPI opens a renderer per request and closes it once the response is sent.
PageRenderer = Annotated[resources.Renderer, Depends(resources.open_renderer)]

api = FastAPI(title="Reports (aioqueue example)", lifespan=lifespan)


# -- request and response bodies ---------------------------------------------------------


class ReportRequest(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    pages: int = Field(ge=1, le=tasks.MAX_PAGES)


class Accepted(BaseModel):
    id: str
    status_url: str
    created: bool  # False: a retried POST (same Idempotency-Key) found its job in place


class Progress(BaseModel):
    done: int
    of: int


class Report(BaseModel):
    """The API's view of tasks.Report: its own model, so that the task may grow fields
    without changing the API (pydantic drops the ones it does not declare)."""

    title: str
    pages: int
    words: int
    url: str


class PagePreview(BaseModel):
    title: str
    page: int
    text: str


class Failure(BaseModel):
    type: str
    message: str  # no traceback: that is for the worker's logs, not for API clients


class ReportStatus(BaseModel):
    id: str
    status: aioqueue.JobStatus  # queued, scheduled, active, complete, failed, dead, cancelled
    attempts: int
    progress: Progress | None = None
    result: Report | None = None
    error: Failure | None = None  # the last failed attempt's (also while it is retried)


# -- errors ------------------------------------------------------------------------------


@api.exception_handler(aioqueue.JobNotFound)
async def job_not_found(_: Request, exc: aioqueue.JobNotFound) -> JSONResponse:
    detail = f"no report {exc.job_id!r} (never enqueued, or its result expired)"
    return JSONResponse({"detail": detail}, status_code=status.HTTP_404_NOT_FOUND)


@api.exception_handler(aioqueue.ServerUnavailable)
async def redis_unavailable(_: Request, exc: aioqueue.ServerUnavailable) -> JSONResponse:
    """Redis is down or unreachable: 503, and the details go to the log, not the client."""
    logger.warning("answering 503: %s", exc)
    detail = "the queue is unavailable; try again"
    if isinstance(exc, aioqueue.EnqueueUnconfirmed):  # the job may have been written
        detail += " with the same Idempotency-Key, so as not to enqueue the report twice"
    return JSONResponse(
        {"detail": detail},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "5"},
    )


# -- endpoints ---------------------------------------------------------------------------


@api.post("/reports", status_code=status.HTTP_202_ACCEPTED)
async def create_report(
    body: ReportRequest,
    request: Request,
    response: Response,
    queue: ReportsQueue,
    # URL-safe, so that the job id built from it fits in a path segment.
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._~-]+$")
    ] = None,
) -> Accepted:
    """Enqueue a report and answer at once (202) with where to follow it.

    With an ``Idempotency-Key`` header, the job id is derived from it: while that job is
    known (until its result expires), a retried POST returns the same job and enqueues
    nothing, so a client may retry after a timeout without building the report twice.
    (In a real service, put the user in the id: keys are only unique per client.)
    """
    call = queue.enqueue(tasks.build_report, body.title, body.pages)
    if idempotency_key is not None:
        # The "report-" prefix keeps client keys apart from other ids in the queue and
        # from the ones aioqueue reserves ("periodic:...", "poison-...").
        call = call.options(id=f"report-{idempotency_key}")
    job = await call  # returns once the job is in Redis
    status_url = str(request.url_for("report_status", job_id=job.id))
    response.headers["Location"] = status_url
    return Accepted(id=job.id, status_url=status_url, created=job.created)


@api.get("/reports/{job_id}")
async def report_status(job_id: str, queue: ReportsQueue) -> ReportStatus:
    """Where the job is, how far it has got, and its result or error."""
    return await describe(queue.job(job_id))


@api.get(
    "/reports/{job_id}/wait",
    responses={202: {"model": ReportStatus, "description": "not finished yet: ask again"}},
)
async def wait_for_report(
    job_id: str,
    queue: ReportsQueue,
    response: Response,
    timeout: Annotated[float, Query(gt=0, le=MAX_WAIT)] = 10.0,
) -> ReportStatus:
    """Hold the request until the job settles (200) or ``timeout`` passes (202).

    ``job.result()`` wakes on the worker's announcement (pub/sub, one subscription per
    process), so this costs no polling however many requests wait. A job still running
    at the deadline is no error (408 would blame the client's upload): 202 says "not
    yet", as the POST did.
    """
    job = queue.job(job_id)
    try:
        await job.result(timeout=timeout)
    except aioqueue.ResultTimeout:
        response.status_code = status.HTTP_202_ACCEPTED
    except (aioqueue.JobFailed, aioqueue.JobCancelled):
        pass  # settled, just not successfully: the body says how
    return await describe(job)


@api.get("/preview")
async def preview_page(
    renderer: PageRenderer,
    title: Annotated[str, Query(min_length=1, max_length=200)],
    page: Annotated[int, Query(ge=1, le=tasks.MAX_PAGES)] = 1,
) -> PagePreview:
    """One page, rendered in the request (a whole report is a job: POST /reports), by
    the same code the worker renders reports with."""
    return PagePreview(title=title, page=page, text=await renderer.page(title, page))


@api.get("/healthz")
async def healthz() -> dict[str, bool]:
    """Liveness: this process answers. Deliberately no Redis round trip: an outage of
    Redis must not get every web pod restarted (requests get 503 meanwhile)."""
    return {"ok": True}


async def describe(job: aioqueue.Job[Any]) -> ReportStatus:
    """The job as the API shows it, from one read of its record (a consistent snapshot
    of status, progress, result and error; ``job.status()`` and ``job.progress()`` read
    one field each)."""
    info = await job.info()  # raises JobNotFound: 404
    complete = info.status is aioqueue.JobStatus.COMPLETE
    error = None
    if info.error is not None and not complete:
        error = Failure(type=info.error.type, message=info.error.message)
    return ReportStatus(
        id=info.id,
        status=info.status,
        attempts=info.attempts,
        progress=info.progress,
        result=info.result() if complete else None,
        error=error,
    )
