"""The dashboard renders any record in Redis: a finished job says what it kept (never
"(unknown)" or a wrong priority), and an absurd due time (an older version's ``delay=10**12``,
another program's ``inf``) is shown as its number, never a bare 500."""

from __future__ import annotations

import re
from html import unescape

from redis.asyncio import Redis

import aioqueue
from aioqueue.web import create_dashboard
from tests.helpers import run_until_idle
from tests.web.test_web import client_for


async def test_far_future_records_render(app: aioqueue.App, redis: Redis) -> None:
    @app.task(queue="emails")
    async def send_email(to: str) -> None: ...

    queue = app.queue("emails")
    job = await send_email.enqueue("later@example.com").options(delay=60)
    await redis.zadd(queue.keys.schedule, {job.id: 10**15})
    await redis.hset(queue.keys.job("foreign"), mapping={"s": "scheduled", "et": "1e300"})
    await redis.zadd(queue.keys.schedule, {"foreign": float("-inf")})
    async with client_for(create_dashboard(app)) as http:
        page = await http.get("/queue/emails", params={"state": "scheduled"})
        assert page.status_code == 200
        assert "1000000000000000 ms" in page.text and "-inf ms" in page.text
        for job_id in (job.id, "foreign"):
            detail = await http.get("/job", params={"queue": "emails", "id": job_id})
            assert detail.status_code == 200, detail.text
        assert "1000000000000000 ms" in unescape((await http.get(
            "/job", params={"queue": "emails", "id": job.id})).text)  # fmt: skip
        assert (await http.get("/")).status_code == 200


async def test_a_finished_job_says_what_it_kept(app: aioqueue.App) -> None:
    @app.task(queue="emails", priority=7)
    async def send_email(to: str) -> str:
        return "sent"

    @app.task(queue="emails")
    async def log_email(to: str) -> None: ...

    kept, gone = await send_email.enqueue("ada@example.com"), await log_email.enqueue("x")
    await run_until_idle(app, queues=["emails"])
    async with client_for(create_dashboard(app)) as http:
        page = unescape((await http.get("/job", params={"queue": "emails", "id": kept.id})).text)
        assert "<code>send_email</code>" in page and '<dd id="priority">7</dd>' in page
        assert 'id="args-not-kept"' in page and "(unknown)" not in page
        page = unescape((await http.get("/job", params={"queue": "emails", "id": gone.id})).text)
        assert page.count("(not kept)") >= 6 and "keeps only its id" in page
        assert '<dd id="priority">0</dd>' not in page


async def test_rates_are_the_last_sixty_seconds_and_retries_are_apart(app: aioqueue.App) -> None:
    """Right after a burst the overview's per-minute figures show it (the last 60 s, as
    ``aioqueue info`` does per second, not the last full minute, which reads 0), and a
    retried attempt is not a failure for good."""
    attempts: dict[int, int] = {}

    @app.task(queue="emails", retries=1, backoff=aioqueue.Fixed(0))
    async def flaky(n: int) -> None:
        attempts[n] = attempts.get(n, 0) + 1
        if n < 0 or attempts[n] == 1:
            raise RuntimeError("try again")

    for n in range(-1, 20):
        await flaky.enqueue(n)
    await run_until_idle(app, queues=["emails"])
    async with client_for(create_dashboard(app)) as http:
        page = (await http.get("/")).text
    row = page[page.index('data-queue="emails"') :]
    rates = dict(re.findall(r'data-rate="(\w+)">(\d+)<', row))
    assert int(rates["complete"]) >= 19  # 20 (19 if the minute turned just now)
    assert rates["failed"] == "1"  # the one that died, not its retry
    assert int(rates["retried"]) >= 20
    assert "failed for good" in page
