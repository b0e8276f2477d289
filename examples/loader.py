"""Job loaders: the database says what runs when; a periodic task loads the next window.

Reminders live in a table (SQLite stands in for your database). Every EVERY seconds a
periodic job loads the reminders due in the window around now into the queue, each
under an id of its own (``reminder-<row id>``) and at its due time. The windows overlap,
and any number of workers may run the loader at once: the ids make that harmless, since
enqueueing an id that is still known adds nothing. Rows whose load was missed (every
worker was down) are still inside the next window's look-back, so they run late rather
than never; keep the look-back shorter than ``idempotency_ttl`` (how long a job that
returned nothing keeps its id as an idempotency key), so a reminder that ran is not loaded
again.

Run it (a private redis-server is started when ``AIOQUEUE_REDIS_URL`` is unset)::

    python -m examples.loader
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

EVERY = 1.0  # seconds between loads (a minute would do in production)
AHEAD = 3.0  # load what falls due this far ahead...
BEHIND = 3.0  # ...and this far back, for loads that were missed
DB_ENV = "REMINDERS_DB"

app = aioqueue.App()
runs: Counter[str] = Counter()  # reminder id -> times sent, in this process


@dataclass(frozen=True, slots=True)
class Reminder:
    id: str
    text: str
    due: datetime


def create_table(path: str, reminders: list[Reminder]) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE reminders (id TEXT PRIMARY KEY, text TEXT, due REAL)")
        db.executemany(
            "INSERT INTO reminders VALUES (?, ?, ?)",
            [(r.id, r.text, r.due.timestamp()) for r in reminders],
        )


def due_between(path: str, start: datetime, end: datetime) -> list[Reminder]:
    """The reminders due in [start, end), from the database (blocking: run in a thread)."""
    query = "SELECT id, text, due FROM reminders WHERE due >= ? AND due < ? ORDER BY due"
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(query, (start.timestamp(), end.timestamp())).fetchall()
    return [Reminder(id, text, datetime.fromtimestamp(due, UTC)) for id, text, due in rows]


@app.task(queue="reminders")
async def send_reminder(reminder_id: str, text: str) -> str:
    runs[reminder_id] += 1
    return f"reminded: {text}"


async def load_window(path: str, now: datetime) -> int:
    """Enqueue the reminders due around ``now``; how many were new (the rest were known)."""
    window = await asyncio.to_thread(
        due_between, path, now - timedelta(seconds=BEHIND), now + timedelta(seconds=AHEAD)
    )
    jobs = await app.queue("reminders").enqueue_many(
        send_reminder.enqueue(r.id, r.text).options(id=f"reminder-{r.id}", at=r.due) for r in window
    )
    return sum(job.created for job in jobs)


@app.periodic(every=EVERY)
@app.task(queue="reminders")
async def load_reminders() -> int:
    return await load_window(os.environ[DB_ENV], datetime.now(UTC))


@dataclass
class Demo:
    """What run_demo() did, for main() to print and the tests to check."""

    reminders: list[Reminder]
    loaded_twice_at_once: tuple[int, int]  # new jobs from two loads racing each other
    sent: dict[str, int]  # reminder id -> times sent


async def run_demo(count: int = 8, spread: float = 2.0) -> Demo:
    """A table of reminders due over the next ``spread`` seconds, two loads racing, two
    workers (so two periodic schedulers), until every reminder was sent."""
    now = datetime.now(UTC)
    reminders = [
        Reminder(uuid.uuid4().hex, f"reminder {n}", now + timedelta(seconds=spread * n / count))
        for n in range(count)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "reminders.sqlite3")
        create_table(path, reminders)
        os.environ[DB_ENV] = path
        async with app:
            racing = await asyncio.gather(load_window(path, now), load_window(path, now))
            queue = app.queue("reminders")
            async with app.worker(queues=["reminders"]), app.worker(queues=["reminders"]):
                for reminder in reminders:  # each result comes at its reminder's due time
                    await queue.job(f"reminder-{reminder.id}").result(timeout=spread + 30)
    return Demo(reminders, (racing[0], racing[1]), {r.id: runs[r.id] for r in reminders})


def main() -> None:
    with contextlib.ExitStack() as stack:
        if app.redis_url is None:
            server = stack.enter_context(EmbeddedServer())
            app.set_redis_url(server.url)
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {server.url}")
        demo = asyncio.run(run_demo())
    first, second = demo.loaded_twice_at_once
    print(f"two loads racing: {first} + {second} new job(s) for {len(demo.reminders)} rows")
    print(f"sent: {sorted(demo.sent.values())} (each reminder once)")


if __name__ == "__main__":
    main()
