"""A Starlette app that enqueues work per request and runs it on the same event loop.

``POST /signup`` with ``{"email": "..."}`` enqueues a welcome job and answers 202 with its
id at once; ``GET /jobs/{id}`` reports the job's status (and result, or error). The
worker is embedded: the app's lifespan runs ``async with queue.worker(...)``, so the
handlers and the jobs share one process and one event loop. Run it with any ASGI
server, e.g. uvicorn (not a dependency of aioqueue)::

    AIOQUEUE_REDIS_URL=redis://127.0.0.1:6379/0 uvicorn examples.webapp:web
    curl -si -X POST localhost:8000/signup -H 'content-type: application/json' \\
        -d '{"email": "ada@example.com"}'
    curl -s localhost:8000/jobs/<id>

Without a server (CI): ``python -m examples.webapp`` signs up a few addresses through an
in-process HTTP client, waits for their jobs, prints the results and exits (it starts a
private redis-server when ``AIOQUEUE_REDIS_URL`` is unset).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from starlette.requests import Request

queue = aioqueue.App()  # the Redis URL comes from AIOQUEUE_REDIS_URL


@queue.task(queue="signups", timeout=30)
async def send_welcome(email: str) -> dict[str, str]:
    """The slow part of a signup, kept out of the request: "send" the welcome mail."""
    await asyncio.sleep(0.05)  # stands in for the mail provider's API
    token = hashlib.sha256(f"verify:{email}".encode()).hexdigest()[:16]
    return {"email": email, "verify_url": f"https://example.com/verify/{token}"}


async def signup(request: Request) -> JSONResponse:
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "expected a JSON body"}, status_code=400)
    email = body.get("email") if isinstance(body, dict) else None
    if not isinstance(email, str) or "@" not in email:
        return JSONResponse({"error": 'expected {"email": "..."}'}, status_code=400)
    job = await send_welcome.enqueue(email)  # returns once the job is in Redis
    return JSONResponse(
        {"id": job.id, "status_url": str(request.url_for("job", id=job.id))}, status_code=202
    )


async def job_status(request: Request) -> JSONResponse:
    info = await queue.queue(send_welcome.options.queue).info(request.path_params["id"])
    if info is None:
        return JSONResponse({"error": "no such job (or its result expired)"}, status_code=404)
    body: dict[str, Any] = {"id": info.id, "status": info.status, "attempts": info.attempts}
    if info.status is aioqueue.JobStatus.COMPLETE:
        body["result"] = info.result()
    elif info.error is not None:
        body["error"] = {"type": info.error.type, "message": info.error.message}
    return JSONResponse(body)


@contextlib.asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    """Connect at startup and run an embedded worker; at shutdown, let running jobs finish
    (unfinished ones go back to the queue) and close the connections."""
    async with queue, queue.worker(concurrency=50):
        yield


web = Starlette(
    routes=[
        Route("/signup", signup, methods=["POST"]),
        Route("/jobs/{id}", job_status, name="job"),
    ],
    lifespan=lifespan,
)


async def sign_up_all(emails: Sequence[str], *, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Drive the app in-process: POST each signup, then poll each job until it finishes.

    httpx's ASGITransport does not send lifespan events, so the lifespan (connection and
    embedded worker) is entered here, the way an ASGI server would.
    """
    transport = httpx.ASGITransport(app=web)
    async with (
        web.router.lifespan_context(web),
        httpx.AsyncClient(transport=transport, base_url="http://webapp") as client,
    ):
        accepted = []
        for email in emails:
            response = await client.post("/signup", json={"email": email})
            response.raise_for_status()
            accepted.append(response.json())
        return [await _wait_finished(client, job["status_url"], timeout) for job in accepted]


async def _wait_finished(client: httpx.AsyncClient, url: str, timeout: float) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            response = await client.get(url)
            response.raise_for_status()
            body: dict[str, Any] = response.json()
            if aioqueue.JobStatus(body["status"]).finished:
                return body
            await asyncio.sleep(0.02)


def main() -> None:
    emails = ["ada@example.com", "grace@example.com", "linus@example.com"]
    with contextlib.ExitStack() as stack:
        if queue.redis_url is None:
            server = stack.enter_context(EmbeddedServer())
            queue.set_redis_url(server.url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {server.url}")
        jobs = asyncio.run(sign_up_all(emails))
    for job in jobs:
        print(f"{job['id']}  {job['status']:<8}  {job.get('result') or job.get('error')}")


if __name__ == "__main__":
    main()
