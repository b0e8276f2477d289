"""The dashboard, round two, in a real browser (Debian's chromium, as
``test_web_browser.py``): search, the completed and retrying lists, the task filter, bulk
selection with its actions, "run now", and every page at a phone's width. Screenshots go
to ``artifacts/`` (``round2-*.png``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

import aioqueue
from tests.helpers import run_until_idle, wait_until
from tests.web.test_web_browser import (
    MOUNT,
    WAIT_MS,
    artifacts,
    browser,
    chromium,
    console_errors,
    mounted,
    open_page,
    serving,
    status_is,
)

__all__ = ["artifacts", "browser", "chromium", "console_errors"]  # fixtures used here


@pytest.fixture
def tasks(app: aioqueue.App) -> dict[str, aioqueue.Task[..., Any]]:
    @app.task(queue="emails", retries=0)
    async def send_email(to: str) -> str:
        if to.startswith("bounce"):
            raise ConnectionError(f"{to} refused the connection")
        return "sent"

    @app.task(queue="emails", retries=2, backoff=aioqueue.Fixed(900))
    async def sync_contacts(account: int) -> None:
        raise TimeoutError("the CRM did not answer in 10 s")

    return {"send_email": send_email, "sync_contacts": sync_contacts}


def rows(page: Page) -> Any:
    return page.locator("#jobs tbody tr")


async def test_search_lists_and_the_task_filter(
    app: aioqueue.App,
    tasks: Any,
    browser: Browser,
    artifacts: Path,
    console_errors: list[str],
) -> None:
    sent = await tasks["send_email"].enqueue("ada@example.com")
    flaky = await tasks["sync_contacts"].enqueue(42)
    await run_until_idle(app, queues=["emails"], wait_retries=False)
    waiting = [await tasks["send_email"].enqueue(f"u{n}@example.com") for n in range(2)]
    await tasks["sync_contacts"].enqueue(43)
    async with serving(mounted(app)) as url:
        page = await open_page(browser, console_errors, viewport={"width": 1280, "height": 900})
        await page.goto(f"{url}{MOUNT}/")

        # a job id in the header's search box opens the job
        await page.get_by_role("searchbox").fill(sent.id)
        await page.get_by_role("searchbox").press("Enter")
        await expect(page.locator("h1 .job-id")).to_have_text(sent.id, timeout=WAIT_MS)
        await expect(page.locator("#priority")).to_have_text("5")

        # part of a task's name lists the task, with links to its jobs in each list
        await page.get_by_role("searchbox").fill("send")
        await page.get_by_role("searchbox").press("Enter")
        found = page.locator('#found-tasks tr[data-task="send_email"]')
        await expect(found).to_contain_text("emails", timeout=WAIT_MS)
        await page.screenshot(path=artifacts / "round2-search.png", full_page=True)
        await found.get_by_role("link", name="ready", exact=True).click()
        await expect(rows(page)).to_have_count(2, timeout=WAIT_MS)
        for job in waiting:
            await expect(page.locator(f'tr[data-job-id="{job.id}"]')).to_be_visible()
        await expect(page.locator("#task-filter")).to_have_value("send_email")
        await page.screenshot(path=artifacts / "round2-filtered.png", full_page=True)

        # the filter stays on as the tabs change; Clear lifts it
        await page.locator('.tabs a[data-state="complete"]').click()
        await expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
        await expect(rows(page)).to_contain_text("send_email(…)")
        await expect(rows(page)).to_contain_text('→ "sent"')
        await page.locator("[data-clear]").click()
        await page.locator('.tabs a[data-state="retrying"]').click()
        await expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
        await expect(page.locator(f'tr[data-job-id="{flaky.id}"]')).to_contain_text(
            "TimeoutError: the CRM did not answer"
        )
        await page.screenshot(path=artifacts / "round2-retrying.png", full_page=True)

        # the filter takes any name, by typing it
        await page.locator("#task-filter").fill("sync_contacts")
        await page.locator(".filter").get_by_role("button", name="Filter").click()
        await expect(page.locator("#task-filter")).to_have_value("sync_contacts")
        await expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
        await page.close()


async def test_bulk_selection_and_run_now(
    app: aioqueue.App,
    tasks: Any,
    browser: Browser,
    artifacts: Path,
    console_errors: list[str],
) -> None:
    dead = [await tasks["send_email"].enqueue(f"bounce{n}@example.com") for n in range(3)]
    await run_until_idle(app, queues=["emails"])
    queue = app.queue("emails")
    async with app.worker(queues=["emails"]), serving(mounted(app, actions=True)) as url:
        page = await open_page(browser, console_errors, viewport={"width": 1280, "height": 900})
        dialogs: list[str] = []
        answers: set[asyncio.Future[None]] = set()

        def accept(dialog: Any) -> None:
            dialogs.append(dialog.message)
            answers.add(asyncio.ensure_future(dialog.accept()))

        page.on("dialog", accept)
        await page.goto(f"{url}{MOUNT}/queue/emails?state=dead")
        bar = page.locator("form[data-bulk]")
        await expect(bar.get_by_role("button", name="Requeue")).to_be_disabled()

        # select one, then all: the bar counts them, and the page stops refreshing
        await page.get_by_label(f"Select job {dead[0].id}").check()
        await expect(bar.locator("[data-selected]")).to_have_text("1 job selected")
        await expect(page.locator("#live-status")).to_have_text("paused")
        await bar.get_by_label("All on this page").check()
        await expect(bar.locator("[data-selected]")).to_have_text("3 jobs selected")
        await page.screenshot(path=artifacts / "round2-bulk.png", full_page=True)
        for job in dead:  # they run again, and fail again: the same ids, dead once more
            assert await queue.status(job.id) == "dead"
        await bar.get_by_role("button", name="Delete").click()
        await expect(page.locator(".notice")).to_have_text("Purged 3 dead jobs.", timeout=WAIT_MS)
        assert dialogs == ["Delete 3 jobs? This cannot be undone."]
        assert (await queue.counts()).dead == 0

        # run now: a scheduled job's row sends it to the workers at once
        later = await tasks["send_email"].enqueue("later@example.com").options(delay=3600)
        await page.goto(f"{url}{MOUNT}/queue/emails?state=scheduled")
        row = page.locator(f'tr[data-job-id="{later.id}"]')
        await expect(row).to_contain_text("in 1.0 h", timeout=WAIT_MS)
        await row.get_by_role("button", name="Run now").click()
        await expect(page.locator(".notice")).to_contain_text("Moved 1 job to run now")
        await wait_until(status_is(queue, later.id, aioqueue.JobStatus.COMPLETE), timeout=10)

        # bulk cancel of scheduled jobs
        more = [await tasks["send_email"].enqueue(f"m{n}").options(delay=3600) for n in range(2)]
        await page.goto(f"{url}{MOUNT}/queue/emails?state=scheduled")
        await expect(rows(page)).to_have_count(2, timeout=WAIT_MS)
        await page.locator("form[data-bulk]").get_by_label("All on this page").check()
        await page.locator("form[data-bulk]").get_by_role("button", name="Cancel").click()
        await expect(page.locator(".notice")).to_contain_text("Cancelled 2 jobs")
        assert [await queue.status(job.id) for job in more] == ["cancelled", "cancelled"]
        await page.close()


PHONE = {"width": 390, "height": 844}


async def test_every_page_fits_a_phone(
    app: aioqueue.App,
    tasks: Any,
    browser: Browser,
    artifacts: Path,
    console_errors: list[str],
) -> None:
    """At 390 px nothing is wider than the screen: the header wraps, a table is a card
    per row, the tabs and the chart scroll within themselves."""
    dead = [await tasks["send_email"].enqueue(f"bounce{n}@example.com") for n in range(2)]
    await tasks["sync_contacts"].enqueue(1)
    await run_until_idle(app, queues=["emails"], wait_retries=False)
    await tasks["send_email"].enqueue("a-rather-long-address-for-a-phone@example.com")
    async with serving(mounted(app, actions=True)) as url:
        page = await open_page(browser, console_errors, viewport=PHONE, is_mobile=True)
        for name, path in {
            "overview": "/",
            "ready": "/queue/emails",
            "dead": "/queue/emails?state=dead",
            "retrying": "/queue/emails?state=retrying",
            "job": f"/job?queue=emails&id={dead[0].id}",
            "search": "/search?q=sync",
            "periodic": "/periodic",
        }.items():
            await page.goto(f"{url}{MOUNT}{path}")
            await expect(page.locator("main")).to_be_visible()
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{name} is {width} px wide"
            await page.screenshot(path=artifacts / f"round2-phone-{name}.png", full_page=True)
        # the cards keep their labels, and the bulk bar still works with a thumb
        await page.goto(f"{url}{MOUNT}/queue/emails?state=dead")
        card = page.locator(f'tr[data-job-id="{dead[0].id}"]')
        await expect(card.locator('td[data-label="Attempts"]')).to_be_visible()
        await card.get_by_label(f"Select job {dead[0].id}").check()
        await expect(page.locator("[data-selected]")).to_have_text("1 job selected")
        await page.close()
