"""The dashboard, round two, over HTTP: search by job id or task, the completed and
retrying lists, a task filter on every list, bulk actions and "run now", each behind the
same guards as every action (off by default, authorize, the page's CSRF token)."""

from __future__ import annotations

import re
import time
from html import unescape
from typing import Any

import pytest
from starlette.requests import Request

import aioqueue
from aioqueue.web import create_dashboard
from tests.helpers import drain, run_until_idle
from tests.web.test_web import client_for, csrf_of, post


@pytest.fixture
def tasks(app: aioqueue.App) -> dict[str, aioqueue.Task[..., Any]]:
    @app.task(queue="emails", retries=0)
    async def send_email(to: str) -> str:
        if to.startswith("bounce"):
            raise ValueError(f"cannot deliver to {to}")
        return f"sent to {to}"

    @app.task(queue="emails", retries=2, backoff=aioqueue.Fixed(900))
    async def sync_contacts(account: int) -> None:
        raise TimeoutError("the CRM did not answer")

    @app.task(queue="emails")
    async def log_email(to: str) -> None: ...

    return {"send_email": send_email, "sync_contacts": sync_contacts, "log_email": log_email}


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-job-id="([^"]+)"', html)


async def test_search_finds_a_job_by_id_and_tasks_by_name(app: aioqueue.App, tasks: Any) -> None:
    job = await tasks["send_email"].enqueue("ada@example.com")
    async with client_for(create_dashboard(app)) as http:
        found = await http.get("/search", params={"q": job.id})
        assert found.status_code == 303
        assert found.headers["location"] == f"/job?queue=emails&id={job.id}"
        page = unescape((await http.get("/search", params={"q": "EMAIL"})).text)
        assert 'data-task="send_email"' in page and 'data-task="log_email"' in page
        assert (
            "/queue/emails?state=dead&amp;task=send_email"
            in (await http.get("/search", params={"q": "send"})).text
        )
        nothing = (await http.get("/search", params={"q": "zzz"})).text
        assert "No job has this id" in nothing and "No task of this app" in nothing


async def test_completed_and_retrying_lists(app: aioqueue.App, tasks: Any) -> None:
    sent = await tasks["send_email"].enqueue("ada@example.com")
    quiet = await tasks["log_email"].enqueue("ada@example.com")  # returns None: not kept
    flaky = await tasks["sync_contacts"].enqueue(7)
    await drain(app, queues=["emails"], wait_retries=False)
    async with client_for(create_dashboard(app)) as http:
        page = unescape((await http.get("/queue/emails", params={"state": "complete"})).text)
        assert listed(page) == [sent.id] and quiet.id not in page
        assert "send_email(…)" in page and '→ "sent to ada@example.com"' in page
        page = unescape((await http.get("/queue/emails", params={"state": "retrying"})).text)
        assert listed(page) == [flaky.id] and "TimeoutError: the CRM did not answer" in page
        assert "Next attempt" in page and "in 15 min" in page


async def test_every_list_takes_a_task_filter(app: aioqueue.App, tasks: Any) -> None:
    emails = [await tasks["send_email"].enqueue(f"u{n}@example.com") for n in range(3)]
    others = [await tasks["log_email"].enqueue(f"u{n}@example.com") for n in range(2)]
    later = await tasks["send_email"].enqueue("later@example.com").options(delay=600)
    async with client_for(create_dashboard(app)) as http:
        page = (await http.get("/queue/emails", params={"task": "log_email"})).text
        assert listed(page) == [job.id for job in others]
        assert 'value="log_email"' in page  # the filter shows itself, and the tabs keep it
        assert "state=scheduled&amp;task=log_email" in page
        page = (await http.get("/queue/emails", params={"task": "send_email"})).text
        assert listed(page) == [job.id for job in emails]
        page = (await http.get("/queue/emails?state=scheduled&task=send_email")).text
        assert listed(page) == [later.id]
        page = (await http.get("/queue/emails?state=dead&task=send_email")).text
        assert listed(page) == [] and "No dead jobs of task send_email" in page


async def test_bulk_actions_and_run_now(app: aioqueue.App, tasks: Any) -> None:
    dead = [await tasks["send_email"].enqueue(f"bounce{n}@example.com") for n in range(3)]
    await run_until_idle(app, queues=["emails"])
    later = [await tasks["send_email"].enqueue(f"l{n}").options(delay=600) for n in range(3)]
    queue = app.queue("emails")
    async with client_for(create_dashboard(app, actions=True)) as http:
        page = (await http.get("/queue/emails?state=dead")).text
        assert 'form="bulk"' in page and 'data-action="purge"' in page
        fields = {"queue": "emails", "state": "dead", "id": [dead[0].id, dead[1].id]}
        done = await post(http, "/queue/emails?state=dead", "requeue", fields)
        assert done.status_code == 303 and "done=requeue&n=2" in done.headers["location"]
        assert [await queue.status(job.id) for job in dead[:2]] == ["queued", "queued"]
        fields = {"queue": "emails", "state": "dead", "id": [dead[2].id]}
        assert (await post(http, "/queue/emails?state=dead", "purge", fields)).status_code == 303
        assert await queue.info(dead[2].id) is None

        fields = {"queue": "emails", "state": "scheduled", "task": "send_email",
                  "id": [later[0].id, later[1].id]}  # fmt: skip
        moved = await post(http, "/queue/emails?state=scheduled", "run-now", fields)
        assert "done=run-now&n=2" in moved.headers["location"]
        assert "task=send_email" in moved.headers["location"]  # back to the filtered list
        notice = unescape((await http.get(moved.headers["location"])).text)
        assert "Moved 2 jobs to run now" in notice
        fields = {"queue": "emails", "state": "scheduled", "id": [later[2].id]}
        await post(http, "/queue/emails?state=scheduled", "cancel", fields)
    await run_until_idle(app, queues=["emails"])
    assert [await queue.status(job.id) for job in later] == ["complete", "complete", "cancelled"]


async def test_run_now_and_bulk_actions_obey_the_guards(app: aioqueue.App, tasks: Any) -> None:
    later = await tasks["send_email"].enqueue("later").options(delay=600)
    fields = {"queue": "emails", "id": later.id}
    async with client_for(create_dashboard(app)) as http:  # read-only by default
        page = (await http.get("/queue/emails?state=scheduled")).text
        assert 'form="bulk"' not in page and "Run now" not in page
        refused = await http.post("/actions/run-now", data=fields)
        assert refused.status_code == 403 and "Actions are off" in refused.text

    def nobody(request: Request) -> bool:
        return False

    async with client_for(create_dashboard(app, actions=True, authorize=nobody)) as http:
        assert (
            await post(http, "/queue/emails?state=scheduled", "run-now", fields)
        ).status_code == 403
    async with client_for(create_dashboard(app, actions=True)) as http:
        token = csrf_of((await http.get("/queue/emails?state=scheduled")).text)
        forged = await http.post("/actions/run-now", data={**fields, "csrf": "x" * 32})
        assert forged.status_code == 403
        assert await app.queue("emails").status(later.id) == "scheduled"
        done = await http.post("/actions/run-now", data={**fields, "csrf": token, "back": "job"})
        assert done.headers["location"].startswith(f"/job?queue=emails&id={later.id}")
    info = await app.queue("emails").info(later.id)
    assert info is not None and info.due_ms is not None  # still scheduled: due now
    assert info.due_ms < time.time() * 1000 + 60_000  # (it was due in ten minutes)
