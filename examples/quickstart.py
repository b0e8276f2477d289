"""Quickstart: two tasks, a few jobs, one burst worker.

Run it (a private redis-server is started when ``AIOQUEUE_REDIS_URL`` is unset)::

    python -m examples.quickstart

Or enqueue from one process and run a long-lived worker for these tasks in another::

    aioqueue worker examples.quickstart:app
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

# No URL here: the app reads AIOQUEUE_REDIS_URL when it first connects, and the CLI
# (or main() below) points it at a private server when none is configured.
app = aioqueue.App()


@app.task(queue="emails", timeout=30)
async def send_email(to: str, subject: str, body: str = "") -> str:
    """Render a message and "deliver" it; return its Message-ID."""
    message = f"To: {to}\r\nSubject: {subject}\r\n\r\n{body}".encode()
    await asyncio.sleep(0.01)  # stands in for the SMTP round trip
    return f"<{hashlib.sha256(message).hexdigest()[:20]}@example.com>"


@app.task(queue="images", timeout=60, retries=1)
def resize_image(name: str, width: int, height: int, factor: int = 4) -> dict[str, Any]:
    """Shrink a grayscale image by ``factor`` (nearest neighbour) and fingerprint it.

    A plain ``def``: CPU-bound handlers run in a thread, so the worker's loop stays free.
    """
    pixels = hashlib.shake_256(name.encode()).digest(width * height)  # a made-up image
    rows = (pixels[y * width : (y + 1) * width] for y in range(0, height, factor))
    thumbnail = b"".join(row[::factor] for row in rows)
    return {
        "name": name,
        "size": [len(range(0, width, factor)), len(range(0, height, factor))],
        "sha256": hashlib.sha256(thumbnail).hexdigest(),
    }


RECIPIENTS = ["ada@example.com", "grace@example.com", "linus@example.com"]
IMAGES = [("cat.png", 640, 480), ("dog.png", 320, 240)]
REPORT_ID = f"nightly-report-{date.today():%Y-%m-%d}"  # one report a day


@dataclass
class Demo:
    """What run_demo() did, for main() to print and the tests to check."""

    message_ids: dict[str, str] = field(default_factory=dict)  # recipient -> Message-ID
    thumbnails: list[dict[str, Any]] = field(default_factory=list)
    deduplicated: bool = False  # the second enqueue with REPORT_ID added nothing
    outcomes: dict[str, int] = field(default_factory=dict)  # the worker's settlements


async def run_demo() -> Demo:
    """Enqueue a few jobs, drain the queues with a burst worker, collect the results."""
    async with app:  # connects now, closes the client at the end
        emails = {to: await send_email.enqueue(to, subject="Welcome!") for to in RECIPIENTS}
        images = [
            await resize_image.enqueue(name, width, height).options(priority="high")
            for name, width, height in IMAGES
        ]
        # A job id of your own is an idempotency key: while a job with that id exists
        # (until its result expires), enqueueing it again adds nothing (job.created is False).
        report = send_email.enqueue("ops@example.com", subject="Nightly report")
        emails["ops@example.com"] = await report.options(id=REPORT_ID)
        again = await report.options(id=REPORT_ID)

        worker = app.worker(burst=True, concurrency=10)
        await worker.run_until_idle()

        return Demo(
            message_ids={to: await job.result(timeout=5) for to, job in emails.items()},
            thumbnails=[await job.result(timeout=5) for job in images],
            deduplicated=not again.created,
            outcomes=dict(worker.outcomes),
        )


def main() -> None:
    with contextlib.ExitStack() as stack:
        if app.redis_url is None:
            server = stack.enter_context(EmbeddedServer())
            app.set_redis_url(server.url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {server.url}")
        demo = asyncio.run(run_demo())
    print(f"sent {len(demo.message_ids)} emails:")
    for to, message_id in demo.message_ids.items():
        print(f"  {to:<20} {message_id}")
    print(f"resized {len(demo.thumbnails)} images:")
    for thumb in demo.thumbnails:
        width, height = thumb["size"]
        print(f"  {thumb['name']:<20} {width}x{height}  sha256 {thumb['sha256'][:16]}")
    print(f"{REPORT_ID!r} enqueued twice, queued once: {demo.deduplicated}")
    print(f"worker outcomes: {demo.outcomes}")


if __name__ == "__main__":
    main()
