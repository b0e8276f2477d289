"""The dashboard in a real browser: Debian's ``chromium`` driven by Playwright.

Playwright is pointed at the system's browser (``AIOQUEUE_CHROMIUM``, else ``chromium`` on
PATH): nothing downloads one. Without a browser these tests skip, unless
``AIOQUEUE_REQUIRE_BROWSER=1`` (CI), where a missing browser fails them. The dashboard is
served by uvicorn on a free loopback port, mounted under ``/dash`` in a Starlette app, and
a real worker runs the jobs. Screenshots go to ``artifacts/``; with
``AIOQUEUE_WRITE_SCREENSHOT=docs/dashboard.png`` the overview is also written there for
the README.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Page,
    Response,
    async_playwright,
    expect,
)
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.routing import Mount

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.web import create_dashboard
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
MOUNT = "/dash"
WAIT_MS = 10_000  # Playwright's deadline for a condition on the page


def find_chromium() -> str | None:
    configured = os.environ.get("AIOQUEUE_CHROMIUM")
    if configured:
        return configured if Path(configured).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        message = "no chromium (apt-get install chromium, or set AIOQUEUE_CHROMIUM)"
        if os.environ.get("AIOQUEUE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"AIOQUEUE_REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    return path


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@asynccontextmanager
async def serving(asgi: Any) -> AsyncIterator[str]:
    """Serve ``asgi`` with uvicorn on a free port of 127.0.0.1; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(asgi, lifespan="off", ws="none", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        if task.done():
            task.result()  # uvicorn failed: raise its error here
        return server.started

    try:
        await wait_until(started, timeout=10)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


def mounted(app: aioqueue.App, **options: Any) -> Starlette:
    """The dashboard as an operator mounts it: inside their own app, under a prefix."""
    return Starlette(routes=[Mount(MOUNT, create_dashboard(app, **options))])


@pytest.fixture
def console_errors() -> Iterator[list[str]]:
    """Errors the pages log (a script error, a style refused by the CSP): none allowed."""
    errors: list[str] = []
    yield errors
    assert errors == []


async def open_page(browser: Browser, errors: list[str], **options: Any) -> Page:
    page = await browser.new_page(**options)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def on_response(response: Response) -> None:
        if response.status >= 400:
            errors.append(f"{response.status} {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", on_response)
    return page


def status_is(queue: aioqueue.Queue, job_id: str, status: aioqueue.JobStatus) -> Callable[..., Any]:
    async def check() -> bool:
        return await queue.status(job_id) == status

    return check


async def test_the_dashboard_shows_jobs_live_and_requeues_a_dead_one(
    app: aioqueue.App, browser: Browser, artifacts: Path, console_errors: list[str]
) -> None:
    healed = asyncio.Event()

    @app.task(queue="web", retries=0)
    async def fragile(n: int) -> str:
        if not healed.is_set():
            raise RuntimeError(f"fragile {n} broke")
        return f"fixed {n}"

    queue = app.queue("web")
    async with (
        app.worker(queues=["web"], concurrency=4),
        serving(mounted(app, actions=True)) as url,
    ):
        await wait_until(lambda: _has_workers(queue))
        later = await fragile.enqueue(1).options(id="later-1", delay=3600)
        page = await open_page(browser, console_errors, viewport={"width": 1280, "height": 900})

        # the overview shows the queue, its scheduled job, and the live worker
        await page.goto(f"{url}{MOUNT}/")
        row = page.locator('#queues tr[data-queue="web"]')
        await expect(row.locator('[data-count="scheduled"]')).to_have_text("1", timeout=WAIT_MS)
        await expect(page.locator("#workers tbody tr")).to_have_count(1, timeout=WAIT_MS)

        # live update: a second scheduled job shows up without a reload
        await fragile.enqueue(2).options(id="later-2", delay=3600)
        await expect(row.locator('[data-count="scheduled"]')).to_have_text("2", timeout=WAIT_MS)
        await page.screenshot(path=artifacts / "browser-overview.png", full_page=True)

        # the queue's scheduled tab lists the job the test enqueued, and its detail opens
        await row.locator('[data-count="scheduled"] a').click()
        listed = page.locator(f'#jobs tr[data-job-id="{later.id}"]')
        await expect(listed).to_contain_text("fragile(1)", timeout=WAIT_MS)
        await listed.locator("td.id a").click()
        await expect(page.locator("h1 .job-id")).to_have_text(later.id, timeout=WAIT_MS)
        await expect(page.locator("#args")).to_contain_text("1")

        # a job that fails with no retries left is dead: requeue it from its row
        doomed = await fragile.enqueue(3)
        await wait_until(status_is(queue, doomed.id, aioqueue.JobStatus.DEAD))
        await page.goto(f"{url}{MOUNT}/queue/web?state=dead")
        dead_row = page.locator(f'#jobs tr[data-job-id="{doomed.id}"]')
        await expect(dead_row).to_contain_text("RuntimeError: fragile 3 broke", timeout=WAIT_MS)
        await page.screenshot(path=artifacts / "browser-dead.png", full_page=True)
        healed.set()
        await dead_row.get_by_role("button", name="Requeue").click()

        await expect(page.locator(".notice")).to_have_text("Requeued 1 dead job.", timeout=WAIT_MS)
        await wait_until(status_is(queue, doomed.id, aioqueue.JobStatus.COMPLETE))
        assert await doomed.result(timeout=5) == "fixed 3"  # dead, then run again
        assert (await queue.counts()).dead == 0
        await expect(page.locator("#jobs")).to_have_count(0, timeout=WAIT_MS)  # live: gone
        await page.screenshot(path=artifacts / "browser-requeued.png", full_page=True)
        await page.close()


async def test_a_queue_is_paused_and_resumed_in_the_browser(
    app: aioqueue.App, browser: Browser, artifacts: Path, console_errors: list[str]
) -> None:
    """The queue page says whether workers take its jobs and what limits it; Pause asks
    first (the browser's confirm), then every worker leaves the queue alone."""
    ran: list[int] = []

    @app.task(queue="web")
    async def work(n: int) -> None:
        ran.append(n)

    queue = app.queue("web")
    await queue.set_limits(rate="50/s", burst=5, concurrency=3)
    async with app.worker(queues=["web"]), serving(mounted(app, actions=True)) as url:
        page = await open_page(browser, console_errors, viewport={"width": 1280, "height": 700})
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.goto(f"{url}{MOUNT}/queue/web")
        state = page.locator(".queue-state")
        await expect(state).to_contain_text("taking jobs")
        await expect(state).to_contain_text("Limits: at most 3 running, 50/s (burst 5)")
        await state.get_by_role("button", name="Pause").click()
        await expect(page.locator(".notice")).to_contain_text("Paused", timeout=WAIT_MS)
        await expect(state).to_contain_text("paused")
        assert await queue.paused()
        job = await work.enqueue(1)
        await page.screenshot(path=artifacts / "browser-paused.png", full_page=True)
        await state.get_by_role("button", name="Resume").click()
        await expect(page.locator(".notice")).to_contain_text("Resumed", timeout=WAIT_MS)
        await job.result(timeout=10)  # taken once resumed
        assert ran == [1] and not await queue.paused()
        await page.close()


async def _has_workers(queue: aioqueue.Queue) -> bool:
    return bool(await queue.workers())


# -- the README's screenshot ------------------------------------------------------------


async def test_a_dashboard_without_redis_says_retrying_then_comes_back(
    prefix: str, browser: Browser, artifacts: Path
) -> None:
    """Redis away: the page says so, and so does the header ("retrying", not a green
    "live"); once Redis answers, the page shows the overview by itself."""
    server = EmbeddedServer()  # its port chosen, nothing listening on it yet
    app = aioqueue.App(redis_url=server.url, prefix=prefix)
    errors: list[str] = []
    try:
        async with serving(mounted(app)) as url:
            page = await open_page(browser, errors)
            await page.goto(f"{url}{MOUNT}/")
            await expect(page.locator("h1")).to_contain_text("Redis is not available")
            status = page.locator("#live-status")
            await expect(status).to_have_text("retrying")
            await expect(status).to_have_attribute("data-state", "error")
            await page.wait_for_event("response", timeout=WAIT_MS)  # a refresh: still so
            await expect(status).to_have_text("retrying")
            await page.screenshot(path=artifacts / "browser-no-redis.png")

            await asyncio.to_thread(server.start)
            await expect(page.locator("#queues")).to_be_visible(timeout=WAIT_MS)
            await expect(status).to_have_text("live", timeout=WAIT_MS)
            await expect(status).to_have_attribute("data-state", "ok")
            await page.close()
    finally:
        await app.close()
        await asyncio.to_thread(server.stop)
    unexpected = [e for e in errors if not e.startswith("503 ") and "status of 503" not in e]
    assert unexpected == []  # (the 503s and their console lines: what it showed)


@pytest.mark.skipif(
    not os.environ.get("AIOQUEUE_WRITE_SCREENSHOT"),
    reason="writes the README's screenshot: AIOQUEUE_WRITE_SCREENSHOT=docs/dashboard.png",
)
async def test_a_busy_dashboard_for_the_readme(
    app: aioqueue.App,
    prefix: str,
    redis: Redis,
    browser: Browser,
    artifacts: Path,
    console_errors: list[str],
) -> None:
    """Realistic traffic: three queues with an hour of history, two workers busy with
    long jobs, a backlog, scheduled and dead jobs, periodic jobs. The overview goes to
    ``$AIOQUEUE_WRITE_SCREENSHOT``; it and the other pages to ``artifacts/``. (It waits
    for the workers' next heartbeat, up to 5 s, to show them busy.)"""
    release = asyncio.Event()

    @app.periodic(cron="0 6 * * MON-FRI", tz="Europe/Paris")
    @app.task(queue="emails")
    async def daily_digest() -> None:
        await release.wait()

    @app.task(queue="emails", retries=0)
    async def send_email(to: str, subject: str) -> str:
        await release.wait()
        return "sent"

    @app.periodic(every=3600, args=[0, "current"])
    @app.task(queue="reports", timeout=None)
    async def render_report(account: int, month: str) -> int:
        await aioqueue.current_job().set_progress({"done": 420, "of": 1000})
        await release.wait()
        return 1000

    @app.task(queue="webhooks", retries=0)
    async def deliver(url: str, event: str) -> None:
        raise ConnectionError(f"{url} refused the connection")

    await _seed_history(redis, prefix)
    emails, reports, hooks = app.queue("emails"), app.queue("reports"), app.queue("webhooks")
    await app.add_periodic(deliver, every=300, args=["https://status.example.com", "ping"])
    dead = [
        await deliver.enqueue(f"https://hooks.example.com/{i}", "invoice.paid") for i in range(6)
    ]
    async with app.worker(queues=["webhooks"]):
        await wait_until(lambda: _counted(hooks, dead=6))
    for i in range(190):
        await send_email.enqueue(f"user{i}@example.com", subject="Your invoice")
    running = [await render_report.enqueue(1000 + i, "2025-05") for i in range(27)]
    for i in range(14):
        await send_email.enqueue(f"user{i}@example.com", subject="Reminder").options(delay=600)

    dashboard = create_dashboard(
        app, queues=["emails", "reports", "webhooks"], actions=True, title="acme · aioqueue"
    )
    async with (
        app.worker(queues=["emails", "reports"], concurrency=16),
        app.worker(queues=["reports"], concurrency=8),
        serving(dashboard) as url,
    ):
        await wait_until(lambda: _counted(emails, active=16))
        await wait_until(lambda: _counted(reports, active=8))
        await wait_until(lambda: _busy(reports, running=24), timeout=10)  # the next beats
        page = await open_page(browser, console_errors, viewport={"width": 1280, "height": 900})
        await page.goto(f"{url}/")
        await expect(page.locator("#workers tbody tr")).to_have_count(2, timeout=WAIT_MS)
        await expect(page.locator("svg.chart rect.bar").first).to_be_visible()
        shot = await page.screenshot(path=artifacts / "dashboard.png", full_page=True)
        (ROOT / os.environ["AIOQUEUE_WRITE_SCREENSHOT"]).write_bytes(shot)
        pages = {
            "queue": "/queue/emails",
            "running-job": f"/job?queue=reports&id={running[0].id}",
            "dead-job": f"/job?queue=webhooks&id={dead[0].id}",
            "periodic": "/periodic",
        }
        for name, path in pages.items():
            await page.goto(f"{url}{path}")
            await page.screenshot(path=artifacts / f"dashboard-{name}.png", full_page=True)
        await page.close()
        release.set()


async def _counted(queue: aioqueue.Queue, **expected: int) -> bool:
    counts = await queue.counts()
    return all(getattr(counts, state) >= n for state, n in expected.items())


async def _busy(queue: aioqueue.Queue, running: int) -> bool:
    return sum(int(beat.get("running", 0)) for beat in await queue.workers()) >= running


async def _seed_history(redis: Redis, prefix: str) -> None:
    """An hour of per-minute outcomes, written as the ack script counts them (its hashes
    ``history:<hour>``, fields ``<minute>:<code>``), so the chart has a past to show."""
    seconds, _ = await redis.time()
    now_minute = seconds // 60
    rng = random.Random(7)
    shapes = {"emails": (180, 0.01), "reports": (12, 0.04), "webhooks": (60, 0.06)}
    async with redis.pipeline(transaction=False) as pipe:
        for name, (rate, failing) in shapes.items():
            keys = QueueKeys.for_queue(prefix, name)
            for minute in range(now_minute - 59, now_minute):
                wave = 1 + 0.45 * ((minute % 37) / 37) + rng.uniform(-0.15, 0.15)
                done = int(rate * wave)
                failed = int(done * failing * rng.uniform(0.2, 2.0))
                hash_key = keys.history(minute // 60)
                pipe.hincrby(hash_key, f"{minute % 60}:c", done)
                pipe.hincrby(hash_key, f"{minute % 60}:r", failed)
                pipe.expire(hash_key, 7200)
        await pipe.execute()
