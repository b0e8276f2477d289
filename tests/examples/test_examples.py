"""The examples run against the suite's server (and once each on their own), so they cannot rot."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from examples import loader, quickstart, webapp
from tests.helpers import run_until_idle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def examples_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The examples' module-level apps read AIOQUEUE_REDIS_URL when they connect."""
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", redis_url)
    # The module-level app's key prefix is shared by every test: a report id of this
    # test's own keeps the demo's "once per id" from seeing an earlier test's report.
    monkeypatch.setattr(quickstart, "REPORT_ID", f"nightly-report-{uuid.uuid4().hex}")
    assert quickstart.app.redis_url == redis_url  # not pinned elsewhere by set_redis_url()
    assert webapp.queue.redis_url == redis_url
    return redis_url


def message_id(to: str, subject: str) -> str:
    """send_email's Message-ID, computed independently of the example."""
    digest = hashlib.sha256(f"To: {to}\r\nSubject: {subject}\r\n\r\n".encode()).hexdigest()
    return f"<{digest[:20]}@example.com>"


def verify_url(email: str) -> str:
    token = hashlib.sha256(f"verify:{email}".encode()).hexdigest()[:16]
    return f"https://example.com/verify/{token}"


# -- quickstart -------------------------------------------------------------------------


async def test_quickstart_runs_every_job_once(examples_url: str) -> None:
    demo = await quickstart.run_demo()

    jobs = len(quickstart.RECIPIENTS) + 1 + len(quickstart.IMAGES)  # +1: the deduplicated one
    assert demo.outcomes == {"complete": jobs}
    assert demo.deduplicated
    assert demo.message_ids == {
        **{to: message_id(to, "Welcome!") for to in quickstart.RECIPIENTS},
        "ops@example.com": message_id("ops@example.com", "Nightly report"),
    }
    # The sync handler called in-process must agree with its result after the JSON trip.
    assert demo.thumbnails == [quickstart.resize_image(*image) for image in quickstart.IMAGES]
    assert [t["size"] for t in demo.thumbnails] == [[160, 120], [80, 60]]


def test_quickstart_main_prints_the_results(
    examples_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    quickstart.main()

    out = capsys.readouterr().out
    assert "started a private" not in out  # the configured URL wins
    assert "sent 4 emails:" in out
    assert message_id("ada@example.com", "Welcome!") in out
    assert "cat.png              160x120" in out
    assert "enqueued twice, queued once: True" in out
    assert "worker outcomes: {'complete': 6}" in out


# -- webapp -----------------------------------------------------------------------------


async def test_webapp_signups_complete_through_the_embedded_worker(examples_url: str) -> None:
    emails = ["ada@example.com", "grace@example.com"]

    jobs = await webapp.sign_up_all(emails)

    assert [job["status"] for job in jobs] == ["complete", "complete"]
    assert [job["result"] for job in jobs] == [
        {"email": email, "verify_url": verify_url(email)} for email in emails
    ]
    assert len({job["id"] for job in jobs}) == 2


async def test_webapp_answers_202_before_the_job_runs(examples_url: str) -> None:
    """No lifespan here, so no worker: the request must not wait for the job."""
    transport = httpx.ASGITransport(app=webapp.web)
    async with (
        webapp.queue,
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        response = await client.post("/signup", json={"email": "ada@example.com"})
        assert response.status_code == 202
        job_id = response.json()["id"]
        assert response.json()["status_url"] == f"http://test/jobs/{job_id}"
        status = await client.get(f"/jobs/{job_id}")
        assert status.json() == {"id": job_id, "status": "queued", "attempts": 0}

        assert (await client.get("/jobs/no-such-job")).status_code == 404
        assert (await client.post("/signup", json={"mail": "x"})).status_code == 400
        assert (await client.post("/signup", content=b"{not json")).status_code == 400

        worker = await run_until_idle(webapp.queue)
        assert worker.outcomes == {"complete": 1}  # only the one valid signup was queued
        status = await client.get(f"/jobs/{job_id}")
        assert status.json()["status"] == "complete"
        assert status.json()["result"]["verify_url"] == verify_url("ada@example.com")


# -- loader -----------------------------------------------------------------------------


async def test_loader_sends_each_reminder_once(examples_url: str) -> None:
    """Overlapping windows, two loads racing, two workers' periodic schedulers: each row
    of the table becomes one job, run once."""
    demo = await loader.run_demo()
    assert sum(demo.loaded_twice_at_once) == len(demo.reminders)  # each id created once
    assert demo.sent == {reminder.id: 1 for reminder in demo.reminders}
    queue = loader.app.queue("reminders")
    for reminder in demo.reminders:
        info = await queue.job(f"reminder-{reminder.id}").info()
        assert info.status is aioqueue.JobStatus.COMPLETE
    await loader.app.close()


# -- as scripts, on a machine with no Redis configured ----------------------------------


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("examples.quickstart", "worker outcomes: {'complete': 6}"),
        ("examples.webapp", "complete  {'email': 'linus@example.com', 'verify_url': "),
        ("examples.loader", "sent: [1, 1, 1, 1, 1, 1, 1, 1] (each reminder once)"),
        ("examples.chat", "(#general [1, 2, 3] again: read at least once, never lost)"),
        ("examples.workflows", "events, in order: ['created', 'upgraded', 'paid', 'cancelled']"),
        (
            "examples.log_fanout",
            "lines seen per processor: {'errors': 10000, 'latency': 10000, 'levels': 10000}",
        ),
    ],
)
def test_example_starts_its_own_server_without_a_url(module: str, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIOQUEUE_REDIS_URL"}
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    server = EmbeddedServer().name  # redis-server, or valkey-server from the wheel
    assert f"AIOQUEUE_REDIS_URL is not set: started a private {server} at" in done.stdout
    assert expected in done.stdout
