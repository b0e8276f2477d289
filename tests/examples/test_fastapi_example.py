"""The FastAPI example (examples/fastapi_app) against the suite's Redis, so it cannot rot.

Most tests run the API in-process (httpx's ASGITransport, with the lifespan entered here:
the transport sends no lifespan events) and a worker of the example's App in the same
event loop, with ``resources.render_page`` replaced by a stand-in that the test lets
through page by page. The providers in ``resources.py`` serve both sides: FastAPI's
``Depends`` opens a renderer per preview request, aioqueue's one per worker. The last test
runs it as it is deployed: uvicorn and an `aioqueue worker` process, started by ``python
-m examples.fastapi_app``. The deploy files (examples/deploy) are checked against the real
CLI: their commands parse, and every kill timeout leaves the worker its grace.

The example's App is a module-level one with the default key prefix (like the other
examples'), so the in-process tests keep apart by their own titles and ids.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import shlex
import signal
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import aioqueue
from aioqueue.ops import cli
from aioqueue.ops.embedded import free_loopback_port
from examples.fastapi_app import resources, tasks
from examples.fastapi_app.web import api
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Pages:
    """Stands in for ``resources.render_page``: counts the pages rendered per title and, when
    held, renders each page only once the test lets it through."""

    def __init__(self) -> None:
        self.rendered: Counter[str] = Counter()
        self.held = False
        self.fail_with: Exception | None = None
        self._through = asyncio.Semaphore(0)

    def let_through(self, pages: int = 1) -> None:
        for _ in range(pages):
            self._through.release()

    async def render(self, title: str, page: int) -> str:
        if self.held:
            await self._through.acquire()
        if self.fail_with is not None:
            raise self.fail_with
        self.rendered[title] += 1
        return f"{title}/{page}"


def expected_report(title: str, pages: int) -> dict[str, Any]:
    """build_report's result over Pages' texts, computed independently of the task."""
    texts = [f"{title}/{page}" for page in range(1, pages + 1)]
    digest = hashlib.sha256("".join(texts).encode()).hexdigest()
    return {
        "title": title,
        "pages": pages,
        "words": sum(len(text.split()) for text in texts),
        "url": f"https://files.example.com/reports/{digest[:16]}.pdf",
    }


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Pages:
    stand_in = Pages()
    monkeypatch.setattr(resources, "render_page", stand_in.render)
    return stand_in


class Renderers:
    """Records each renderer ``resources.open_renderer`` makes (its class replaced by a
    subclass that counts), to see who opens one, how many, and when they are closed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        made = self.made = list[resources.Renderer]()

        class Counted(resources.Renderer):
            def __init__(self) -> None:
                super().__init__()
                made.append(self)

        monkeypatch.setattr(resources, "Renderer", Counted)

    def closed(self) -> list[bool]:
        return [renderer.closed for renderer in self.made]


@pytest.fixture
def renderers(monkeypatch: pytest.MonkeyPatch) -> Renderers:
    return Renderers(monkeypatch)


@pytest.fixture
async def client(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The API in-process, its lifespan entered as an ASGI server would (connect, close)."""
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", redis_url)  # the example's App reads it
    assert tasks.app.redis_url == redis_url  # not pinned elsewhere by set_redis_url()
    transport = httpx.ASGITransport(app=api)
    async with (
        api.router.lifespan_context(api),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        yield http


@pytest.fixture
async def worker(client: httpx.AsyncClient) -> AsyncIterator[aioqueue.Worker]:
    """A worker of the example's App on this event loop (after the client, so it stops
    before the lifespan closes the App's connections)."""
    async with tasks.app.worker(concurrency=10, grace=0.5) as running:
        yield running


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def get(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await client.get(url)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def post_report(
    client: httpx.AsyncClient, title: str, pages: int, *, key: str | None = None
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return await client.post("/reports", json={"title": title, "pages": pages}, headers=headers)


# -- enqueue, then follow the job ------------------------------------------------------------


async def test_post_answers_202_and_get_follows_progress_to_the_result(
    client: httpx.AsyncClient, worker: aioqueue.Worker, pages: Pages
) -> None:
    pages.held = True
    title = unique("Q3 sales")

    response = await post_report(client, title, 3)

    assert response.status_code == 202
    job_id = response.json()["id"]
    status_url = f"http://test/reports/{job_id}"
    assert response.json() == {"id": job_id, "status_url": status_url, "created": True}
    assert response.headers["location"] == status_url

    async def shows(**expected: Any) -> bool:
        body = await get(client, status_url)
        return all(body[name] == value for name, value in expected.items())

    # Taken by the worker, held before its first page: running, no progress yet.
    await wait_until(lambda: shows(status="active", progress=None))
    for done in (1, 2):
        pages.let_through()
        page_done = functools.partial(shows, status="active", progress={"done": done, "of": 3})
        await wait_until(page_done)
        assert (await get(client, status_url))["result"] is None
    pages.let_through()
    await wait_until(lambda: shows(status="complete"))

    assert await get(client, status_url) == {
        "id": job_id,
        "status": "complete",
        "attempts": 1,
        "progress": {"done": 3, "of": 3},
        "result": expected_report(title, 3),
        "error": None,
    }


async def test_a_retried_post_returns_the_same_job_and_runs_it_once(
    client: httpx.AsyncClient, worker: aioqueue.Worker, pages: Pages
) -> None:
    title, key = unique("Board pack"), unique("board-pack")

    # A client retrying (or racing itself): five POSTs with one key, all at once.
    responses = await asyncio.gather(*(post_report(client, title, 2, key=key) for _ in range(5)))

    assert {response.status_code for response in responses} == {202}
    assert {response.json()["id"] for response in responses} == {f"report-{key}"}
    assert sorted(response.json()["created"] for response in responses) == [False] * 4 + [True]

    waited = await client.get(f"/reports/report-{key}/wait", params={"timeout": 10})
    assert waited.status_code == 200
    assert waited.json()["status"] == "complete"
    assert waited.json()["attempts"] == 1

    # Once it has run, the key still names that job (until its result expires).
    again = await post_report(client, title, 2, key=key)
    assert again.status_code == 202
    assert again.json()["created"] is False
    assert pages.rendered[title] == 2  # two pages: one run


async def test_without_a_key_each_post_is_a_new_job(
    client: httpx.AsyncClient, worker: aioqueue.Worker, pages: Pages
) -> None:
    title = unique("Weekly")
    first, second = [await post_report(client, title, 1) for _ in range(2)]
    assert first.json()["id"] != second.json()["id"]
    for response in (first, second):
        waited = await client.get(f"/reports/{response.json()['id']}/wait")
        assert waited.json()["result"] == expected_report(title, 1)
    assert pages.rendered[title] == 2


async def test_wait_answers_202_at_its_deadline_and_200_once_settled(
    client: httpx.AsyncClient, worker: aioqueue.Worker, pages: Pages
) -> None:
    pages.held = True
    job_id = (await post_report(client, unique("Slow"), 1)).json()["id"]

    early = await client.get(f"/reports/{job_id}/wait", params={"timeout": 0.2})
    assert early.status_code == 202
    assert early.json()["status"] in {"queued", "active"}

    waiting = asyncio.ensure_future(client.get(f"/reports/{job_id}/wait", params={"timeout": 10}))
    await wait_until(lambda: _is_active(client, job_id))
    pages.let_through()
    late = await asyncio.wait_for(waiting, 10)
    assert late.status_code == 200
    assert late.json()["status"] == "complete"


async def _is_active(client: httpx.AsyncClient, job_id: str) -> bool:
    status: str = (await get(client, f"/reports/{job_id}"))["status"]
    return status == "active"


async def test_a_failed_job_shows_its_error_without_a_traceback(
    client: httpx.AsyncClient, worker: aioqueue.Worker, pages: Pages
) -> None:
    # ValueError is never retried (bad input): the job goes straight to the dead set.
    pages.fail_with = ValueError("no data for page 1")
    job_id = (await post_report(client, unique("Broken"), 2)).json()["id"]

    waited = await client.get(f"/reports/{job_id}/wait", params={"timeout": 10})

    assert waited.status_code == 200
    assert waited.json() == {
        "id": job_id,
        "status": "dead",
        "attempts": 1,
        "progress": None,
        "result": None,
        "error": {"type": "ValueError", "message": "no data for page 1"},
    }


# -- the same providers on both sides: FastAPI's Depends and aioqueue's ----------------------


async def test_a_preview_renders_in_the_request_with_a_renderer_of_its_own(
    client: httpx.AsyncClient, pages: Pages, renderers: Renderers
) -> None:
    """No worker here: FastAPI resolves ``resources.open_renderer`` for the request and
    runs its cleanup once the response is sent."""
    response = await client.get("/preview", params={"title": "Q4", "page": 2})

    assert response.status_code == 200
    assert response.json() == {"title": "Q4", "page": 2, "text": "Q4/2"}
    assert renderers.closed() == [True]
    assert (await client.get("/preview", params={"title": "", "page": 0})).status_code == 422


async def test_a_worker_renders_every_report_with_one_renderer_closed_when_it_stops(
    client: httpx.AsyncClient, pages: Pages, renderers: Renderers
) -> None:
    """aioqueue's ``Depends(open_renderer, scope="worker")``: opened once when the worker
    starts, shared by its jobs, closed when it stops after its last job; the per-job
    ``get_settings`` (a plain def, as in FastAPI) gives each report its files URL."""
    titles = [unique("Monthly") for _ in range(3)]
    async with tasks.app.worker(concurrency=10, grace=5):
        assert renderers.closed() == [False]  # opened at start, before any job
        posted = [await post_report(client, title, 2) for title in titles]
        for title, response in zip(titles, posted, strict=True):
            waited = await client.get(f"/reports/{response.json()['id']}/wait?timeout=10")
            assert waited.json()["result"] == expected_report(title, 2)
        assert renderers.closed() == [False]
    assert renderers.closed() == [True]
    assert all(pages.rendered[title] == 2 for title in titles)


async def test_the_workers_files_url_comes_from_its_settings_provider(
    client: httpx.AsyncClient, pages: Pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPORTS_FILES_URL", "https://cdn.example.org/r")
    title = unique("Settings")
    async with tasks.app.worker(concurrency=1, grace=1):
        job_id = (await post_report(client, title, 1)).json()["id"]
        waited = await client.get(f"/reports/{job_id}/wait?timeout=10")
    url = waited.json()["result"]["url"]
    assert url == expected_report(title, 1)["url"].replace(
        "https://files.example.com/reports", "https://cdn.example.org/r"
    )


async def test_the_injected_parameters_are_no_job_arguments(client: httpx.AsyncClient) -> None:
    """The task's enqueue type-checks without them (``web.py`` is checked by mypy with
    the suite) and refuses them when given: nothing is written."""
    queue = tasks.app.queue(tasks.REPORTS)
    before = await queue.counts()
    with pytest.raises(aioqueue.InvalidArguments, match=r"parameter 'renderer' \(Depends\("):
        await queue.enqueue(tasks.build_report, "Q1", 1, renderer=resources.Renderer())
    assert await queue.counts() == before


# -- what the API refuses ------------------------------------------------------------------


async def test_unknown_ids_are_404(client: httpx.AsyncClient) -> None:
    for url in ("/reports/no-such-report", "/reports/no-such-report/wait?timeout=1"):
        response = await client.get(url)
        assert response.status_code == 404
        assert "no report 'no-such-report'" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({"title": "Q3"}, {}),  # no pages
        ({"title": "", "pages": 1}, {}),
        ({"title": "Q3", "pages": 0}, {}),
        ({"title": "Q3", "pages": tasks.MAX_PAGES + 1}, {}),
        ({"title": "Q3", "pages": "many"}, {}),
        ({"title": "Q3", "pages": 1}, {"Idempotency-Key": "not/url-safe"}),
        ({"title": "Q3", "pages": 1}, {"Idempotency-Key": "k" * 65}),
    ],
)
async def test_bad_requests_are_422_and_enqueue_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
) -> None:
    before = await tasks.app.queue(tasks.REPORTS).counts()
    response = await client.post("/reports", json=body, headers=headers)
    assert response.status_code == 422
    assert await tasks.app.queue(tasks.REPORTS).counts() == before


async def test_a_bad_wait_timeout_is_422(client: httpx.AsyncClient) -> None:
    for timeout in ("0", "-1", "31", "soon"):
        response = await client.get("/reports/any/wait", params={"timeout": timeout})
        assert response.status_code == 422


async def test_without_redis_requests_are_503(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens on the port: the lifespan fails (a deploy stops at startup), and a
    process that is up answers 503 with Retry-After, not a 500 with a traceback."""
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", f"redis://127.0.0.1:{free_loopback_port()}/0")
    with pytest.raises(Exception, match=re.escape("connecting to 127.0.0.1")):
        async with api.router.lifespan_context(api):
            pass
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        posted = await post_report(client, "Q3", 1, key="offline")
        read = await client.get("/reports/report-offline")
    assert (posted.status_code, read.status_code) == (503, 503)
    assert posted.headers["retry-after"] == "5"
    assert "same Idempotency-Key" in posted.json()["detail"]
    assert "redis://" not in posted.text + read.text  # no server address for clients


# -- as deployed: uvicorn, and a worker in a process of its own ----------------------------


@pytest.mark.real_redis("uvicorn and worker processes")
async def test_uvicorn_and_a_worker_process_serve_it_and_stop_gracefully(
    redis_url: str, prefix: str
) -> None:
    """``python -m examples.fastapi_app`` runs uvicorn and `aioqueue worker` (a child
    process); `aioqueue check` passes while the worker lives; on SIGTERM a running job
    finishes within the worker's grace and the worker leaves cleanly."""
    port = free_loopback_port()
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "AIOQUEUE_PREFIX": prefix}
    launcher = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.fastapi_app", "--port", str(port),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    producer = aioqueue.App(redis_url=redis_url, prefix=prefix)  # to look from outside
    reports = producer.queue(tasks.REPORTS)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await wait_until(lambda: _answers(client), timeout=20)
            await wait_until(lambda: _has_workers(reports), timeout=20)

            done = await post_report(client, "Q1", 1)
            assert done.status_code == 202
            waited = await client.get(f"/reports/{done.json()['id']}/wait?timeout=10")
            assert waited.json()["status"] == "complete"
            assert waited.json()["result"]["title"] == "Q1"

            check = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aioqueue", "check", "examples.fastapi_app.tasks:app",
                cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(check.communicate(), 30)
            assert check.returncode == 0, out
            assert b"reports: 1 live worker(s)" in out

            # A job of about a second is running when the service is told to stop.
            running = await post_report(client, "Q2", 5)
            job = reports.job(running.json()["id"])
            await wait_until(lambda: _is_running(job), timeout=10)
        launcher.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(launcher.wait(), 30) == 0
        assert await job.status() is aioqueue.JobStatus.COMPLETE  # finished within grace
        assert await reports.workers() == []  # a clean stop removes the heartbeat
    finally:
        if launcher.returncode is None:
            launcher.kill()
            await launcher.wait()
        await producer.close()


async def _answers(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/healthz")).status_code == 200
    except httpx.TransportError:
        return False


async def _has_workers(queue: aioqueue.Queue) -> bool:
    return bool(await queue.workers())


async def _is_running(job: aioqueue.Job[Any]) -> bool:
    return await job.status() is aioqueue.JobStatus.ACTIVE


# -- examples/deploy: real commands, and the kill comes well after the grace ---------------

DEPLOY = ROOT / "examples" / "deploy"


def deploy_commands() -> list[tuple[str, list[str]]]:
    """Every aioqueue command line in examples/deploy: the exec-form lists of Compose and
    Kubernetes, and systemd's ExecStart."""
    found = []
    for path in sorted(DEPLOY.iterdir()):
        text = path.read_text()
        for flow in re.findall(r"\[[^\[\]]*\"aioqueue\"[^\[\]]*\]", text):
            argv: list[str] = json.loads(flow)
            found.append((path.name, argv[argv.index("aioqueue") + 1 :]))
        execs = re.findall(r"^ExecStart=\S+/aioqueue (.+)$", text, re.MULTILINE)
        found.extend((path.name, shlex.split(line)) for line in execs)
    return found


def test_the_deploy_files_run_real_commands_on_the_example() -> None:
    commands = deploy_commands()
    assert {(name, argv[0]) for name, argv in commands} == {
        ("docker-compose.yml", "worker"),
        ("docker-compose.yml", "check"),
        ("k8s.yaml", "worker"),
        ("k8s.yaml", "check"),
        ("aioqueue-worker.service", "worker"),
    }
    for name, argv in commands:
        args = cli.parse(argv)  # an unknown option exits 2 here
        assert cli.load_app(args.target) is tasks.app, name


@pytest.mark.parametrize(
    ("name", "worker_part", "kill_after"),
    [
        ("docker-compose.yml", r"\n  worker:\n(.*)", r"stop_grace_period: (\d+)s"),
        ("aioqueue-worker.service", r"(.*)", r"TimeoutStopSec=(\d+)"),
        ("k8s.yaml", r"reports-worker\n(.*?)\n---", r"terminationGracePeriodSeconds: (\d+)"),
    ],
)
def test_the_orchestrator_kills_well_after_the_workers_grace(
    name: str, worker_part: str, kill_after: str
) -> None:
    """SIGKILL must come after the grace plus the put-back and the exit."""
    text = (DEPLOY / name).read_text()
    worker = re.search(worker_part, text, re.DOTALL)
    assert worker is not None
    assert '"worker"' in worker.group(1) or "aioqueue worker" in worker.group(1)
    (argv,) = [argv for file, argv in deploy_commands() if file == name and argv[0] == "worker"]
    grace = cli.parse(argv).grace
    kill = re.search(kill_after, worker.group(1))
    assert kill is not None
    assert float(kill.group(1)) >= grace + 10
