"""The dashboard over HTTP (httpx.ASGITransport, no server): pages, actions and their
guards, errors, and links when mounted under a prefix."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from html import unescape
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

import aioqueue
from aioqueue.core.records import MinuteCounts
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.web import create_dashboard
from aioqueue.web.chart import nice_step, throughput
from aioqueue.web.formatting import fraction
from tests.helpers import drain, wait_until

BASE = "http://dashboard.test"


def client_for(asgi: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=BASE)


@pytest.fixture
def tasks(app: aioqueue.App) -> dict[str, aioqueue.Task[..., Any]]:
    @app.task(queue="emails", retries=0)
    async def send_email(to: str, subject: str = "hi") -> str:
        if to == "bounce":
            raise ValueError(f"cannot deliver to {to}")
        return f"sent to {to}"

    @app.task(queue="reports")
    async def report(n: int) -> int:
        return n

    return {"send_email": send_email, "report": report}


@pytest.fixture
async def client(app: aioqueue.App, tasks: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_dashboard(app, actions=True)) as http:
        yield http


async def dead_job(app: aioqueue.App, tasks: Any) -> str:
    job = await tasks["send_email"].enqueue("bounce", subject="x")
    await drain(app, queues=["emails"])
    assert await job.status() == aioqueue.JobStatus.DEAD
    return str(job.id)


async def post(
    http: httpx.AsyncClient, page: str, action: str, fields: dict[str, Any], root: str = ""
) -> httpx.Response:
    """POST an action the way the page's form does: with the token the page handed out."""
    token = csrf_of((await http.get(page)).text)
    return await http.post(f"{root}/actions/{action}", data={"csrf": token, **fields})


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no action form"
    return found.group(1)


def count_cell(html: str, queue: str, state: str) -> int:
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', html, re.S)
    assert row, f"no row for queue {queue}"
    cell = re.search(rf'data-count="{state}">(?:<a [^>]*>)?([^<]+)<', row.group(1))
    assert cell, f"no {state} cell for queue {queue}"
    return int(cell.group(1).replace("\u202f", ""))


# -- pages --------------------------------------------------------------------------------


async def test_the_overview_shows_each_queue_with_counts_history_and_workers(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    for i in range(3):
        await tasks["send_email"].enqueue(f"u{i}")
    await tasks["report"].enqueue(7).options(delay=3600)
    await dead_job(app, tasks)  # runs the three emails too: three complete, one dead
    for i in range(2):
        await tasks["send_email"].enqueue(f"v{i}")

    async with app.worker(queues=["reports"]) as worker:
        await wait_until(lambda: has_workers(app.queue("reports")))
        page = await client.get("/")

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert count_cell(html, "emails", "ready") == 2
    assert count_cell(html, "emails", "dead") == 1
    assert count_cell(html, "emails", "complete") == 3
    assert count_cell(html, "emails", "failed") == 1
    assert count_cell(html, "reports", "scheduled") == 1
    assert worker.id in html
    assert '<rect class="bar complete"' in html  # the chart has this minute's bar
    assert 'href="/queue/emails"' in html
    assert "server-problem" not in html  # (the suite's server is safe, and not full)


@pytest.mark.real_redis("a server of its own, evicting")
async def test_the_overview_says_when_redis_needs_attention(prefix: str) -> None:
    """What ``aioqueue check`` fails on (an evicting policy; a full server) tops the
    overview, where an operator looks."""
    with EmbeddedServer(extra_args=["--maxmemory-policy", "allkeys-lru"]) as server:
        app = aioqueue.App(redis_url=server.url, prefix=prefix)
        try:
            async with client_for(create_dashboard(app, queues=["default"])) as http:
                html = unescape((await http.get("/")).text)
        finally:
            await app.close()
    assert 'id="server-problem"' in html and "Redis needs attention" in html
    assert "Redis maxmemory-policy is 'allkeys-lru': when memory is full" in html


async def has_workers(queue: aioqueue.Queue) -> bool:
    return bool(await queue.workers())


async def test_a_queue_lists_its_jobs_by_state_a_page_at_a_time(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    jobs = [await tasks["send_email"].enqueue(f"user{i}") for i in range(30)]
    later = await tasks["send_email"].enqueue("later").options(delay=600)

    first = (await client.get("/queue/emails")).text
    assert jobs[0].id in first and jobs[24].id in first and jobs[25].id not in first
    assert "1\N{EN DASH}25 of 30" in first and 'rel="next"' in first
    second = (await client.get("/queue/emails?state=ready&page=2")).text
    assert jobs[25].id in second and jobs[0].id not in second and "26\N{EN DASH}30 of 30" in second

    scheduled = (await client.get("/queue/emails?state=scheduled")).text
    assert later.id in scheduled and jobs[0].id not in scheduled
    assert re.search(r"in (9\.\d|10) min", scheduled), "the due time is shown"
    assert (await client.get("/queue/emails?state=dead")).text.count("No dead jobs") == 1


async def test_a_job_shows_args_result_attempts_and_timings(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    job = await tasks["send_email"].enqueue("ada@example.com", subject="welcome")
    queued = unescape((await client.get(f"/job?queue=emails&id={job.id}")).text)
    assert '"ada@example.com"' in queued and '"subject": "welcome"' in queued
    await drain(app, queues=["emails"])

    html = (await client.get(f"/job?queue=emails&id={job.id}")).text
    assert "status-complete" in html
    assert '<pre class="json" id="result">&#34;sent to ada@example.com&#34;</pre>' in html
    assert re.search(r"Attempts</dt><dd>1<span class=\"muted\"> / 1", html)
    assert html.count("<time datetime=") == 3  # enqueued, started, finished
    assert "Ran for" in html and " ms" in html


async def test_a_workflows_jobs_show_their_links(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    @app.task(queue="emails")
    async def tally(results: list[str]) -> int:
        return len(results)

    children = [tasks["send_email"].enqueue(f"{n}@example.com") for n in range(2)]
    workflow = await aioqueue.chord(children, tally.callback())
    parent = (await client.get(f"/job?queue=emails&id={workflow.id}")).text
    assert "status-waiting" in parent
    assert re.search(r'id="children">2 <span class="muted">\(2 pending, 0 complete', parent)
    child = (await client.get(f"/job?queue=emails&id={workflow.id}/1")).text
    assert f"id={workflow.id}" in unescape(child)  # a link to its parent
    grouped = await tasks["send_email"].enqueue("g@example.com").options(group="customer-7")
    assert "customer-7" in (await client.get(f"/job?queue=emails&id={grouped.id}")).text
    queue_page = (await client.get("/queue/emails")).text
    assert re.search(r"data-waiting>1 waiting for their group or children", queue_page)


async def test_a_dead_job_shows_its_error_and_traceback(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    job_id = await dead_job(app, tasks)
    html = (await client.get(f"/job?queue=emails&id={job_id}")).text
    assert "<strong>ValueError</strong>: cannot deliver to bounce" in html
    assert "Traceback (most recent call last)" in html and "send_email" in html
    assert 'data-action="requeue"' in html and 'data-action="purge"' in html

    listed = (await client.get("/queue/emails?state=dead")).text
    assert job_id in listed and "ValueError: cannot deliver to bounce" in listed


async def test_the_progress_of_a_running_job_shows_in_its_detail(
    app: aioqueue.App, client: httpx.AsyncClient
) -> None:
    release = asyncio.Event()

    @app.task(queue="imports")
    async def import_rows(n: int) -> int:
        await aioqueue.current_job().set_progress({"done": 250, "of": n})
        await release.wait()
        return n

    job = await import_rows.enqueue(1000)
    queue = app.queue("imports")
    async with app.worker(queues=["imports"]):
        await wait_until(lambda: has_progress(queue, job.id))
        html = (await client.get(f"/job?queue=imports&id={job.id}")).text
        listed = (await client.get("/queue/imports?state=active")).text
        release.set()
        assert await job.result(timeout=5) == 1000

    assert 'id="progress"' in html and "reported by the running job" in html
    assert '<meter min="0" max="1" value="0.25">' in html and "25.0 %" in html
    assert '"done": 250' in unescape(html)
    assert "progress: {&#34;done&#34;:250,&#34;of&#34;:1000}" in listed


async def has_progress(queue: aioqueue.Queue, job_id: str) -> bool:
    return await queue.progress(job_id) is not None


async def test_job_arguments_are_escaped(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    job = await tasks["send_email"].enqueue("<script>alert(1)</script>", subject="<b>x</b>")
    for path in ("/queue/emails", f"/job?queue=emails&id={job.id}"):
        html = (await client.get(path)).text
        assert "<script>alert" not in html and "<b>x</b>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_periodic_specs_show_with_their_next_run(app: aioqueue.App) -> None:
    @app.periodic(every=300, args=["eu"])
    @app.task(queue="sync")
    async def sync_region(region: str) -> None: ...

    await app.add_periodic(sync_region, every=60, args=["us"], name="sync-us")
    async with client_for(create_dashboard(app)) as http:
        html = (await http.get("/periodic")).text

    declared = re.search(r'<tr data-periodic="sync_region">(.*?)</tr>', html, re.S)
    added = re.search(r'<tr data-periodic="sync-us">(.*?)</tr>', html, re.S)
    assert declared and added
    assert "every 5 min" in declared.group(1) and "declared, not yet stored" in declared.group(1)
    assert "sync_region(&#34;eu&#34;)" in declared.group(1)
    assert "every 1 min" in added.group(1) and "added at run time" in added.group(1)
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z">', added.group(1))
    # "in 4.2 s" (tenths under 10 s), "in 1 min", or "now" within a second of the tick
    assert re.search(r"in (\d+(\.\d)? s|1 min)|now", added.group(1))


async def test_the_live_refresh_gets_the_fragment_alone(client: httpx.AsyncClient) -> None:
    whole = await client.get("/")
    fragment = await client.get("/?partial=1")
    assert "<html" in whole.text and 'id="live" data-live' in whole.text
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert 'id="queues"' in fragment.text
    assert fragment.headers["cache-control"] == "no-store"


async def test_unknown_things_are_404_pages(client: httpx.AsyncClient) -> None:
    for path, says in (
        ("/job?queue=emails&id=nope", "no job &#39;nope&#39; in emails"),
        ("/job?queue=nowhere&id=x", "shows no queue &#39;nowhere&#39;"),
        ("/queue/nowhere", "shows no queue &#39;nowhere&#39;"),
    ):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert "<html" in response.text and says in response.text
    assert (await client.get("/queue/emails?state=bogus")).status_code == 400


async def test_an_unreachable_redis_is_a_503_page_that_retries() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = aioqueue.App(redis_url=f"redis://:secret@127.0.0.1:{port}/0", prefix="nowhere")
    try:
        async with client_for(create_dashboard(app, queues=["default"])) as http:
            for path in ("/", "/queue/default", "/job?queue=default&id=x", "/periodic"):
                response = await http.get(path)
                assert response.status_code == 503, path
                assert "Redis is not available" in response.text
                assert f"127.0.0.1:{port}" in response.text and "secret" not in response.text
                assert "data-reload-on-ok" in response.text  # comes back by itself
            fragment = await http.get("/?partial=1")
            assert fragment.status_code == 503 and "<html" not in fragment.text
    finally:
        await app.close()


# -- actions ------------------------------------------------------------------------------


async def test_a_dead_job_is_requeued_from_its_row(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    job_id = await dead_job(app, tasks)
    fields = {"queue": "emails", "id": job_id, "state": "dead", "page": "1", "back": "list"}
    response = await post(client, "/queue/emails?state=dead", "requeue", fields)
    assert response.status_code == 303
    assert response.headers["location"] == "/queue/emails?state=dead&page=1&done=requeue&n=1"
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.QUEUED
    banner = (await client.get(response.headers["location"])).text
    assert "Requeued 1 dead job." in banner


async def test_purge_cancel_and_the_bulk_actions(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    queue = app.queue("emails")
    dead = [await dead_job(app, tasks) for _ in range(3)]
    purged = await post(
        client, "/queue/emails?state=dead", "purge", {"queue": "emails", "id": dead[0]}
    )
    assert purged.status_code == 303 and (await queue.counts()).dead == 2
    requeued = await post(client, "/queue/emails?state=dead", "requeue-all", {"queue": "emails"})
    assert requeued.status_code == 303 and "n=2" in requeued.headers["location"]
    assert (await queue.counts()).dead == 0

    later = await tasks["send_email"].enqueue("later").options(delay=600)
    fields = {"queue": "emails", "id": later.id, "back": "job"}
    cancelled = await post(client, f"/job?queue=emails&id={later.id}", "cancel", fields)
    assert cancelled.headers["location"] == f"/job?queue=emails&id={later.id}&done=cancel&n=1"
    assert await later.status() == aioqueue.JobStatus.CANCELLED
    again = await post(client, "/queue/emails", "cancel", {"queue": "emails", "id": later.id})
    assert "n=0" in again.headers["location"]
    assert "Nothing was cancelled" in (await client.get(again.headers["location"])).text


async def test_a_queue_is_paused_and_resumed_from_its_page_which_shows_its_limits(
    app: aioqueue.App, client: httpx.AsyncClient
) -> None:
    queue = app.queue("emails")
    await queue.set_limits(rate="100/s", burst=10, concurrency=5)
    page = (await client.get("/queue/emails")).text
    assert 'data-paused="false"' in page and 'data-action="pause"' in page
    assert "Limits: at most 5 running, 100/s (burst 10)" in page
    paused = await post(client, "/queue/emails", "pause", {"queue": "emails"})
    assert paused.headers["location"] == "/queue/emails?page=1&done=pause&n=1"
    assert await queue.paused()
    page = (await client.get(paused.headers["location"])).text
    assert "Paused: workers take none" in page and 'data-action="resume"' in page
    overview = (await client.get("/")).text
    assert re.search(r'data-queue="emails">.*?status-paused', overview, re.S)
    resumed = await post(client, "/queue/emails", "resume", {"queue": "emails"})
    assert "done=resume&n=1" in resumed.headers["location"] and not await queue.paused()
    again = await post(client, "/queue/emails", "resume", {"queue": "emails"})
    assert "The queue was not paused." in (await client.get(again.headers["location"])).text


async def test_actions_are_refused_while_they_are_off(app: aioqueue.App, tasks: Any) -> None:
    job_id = await dead_job(app, tasks)
    async with client_for(create_dashboard(app)) as http:
        page = (await http.get("/queue/emails?state=dead")).text
        assert job_id in page and "data-action" not in page and "read-only" in page
        response = await http.post("/actions/requeue", data={"queue": "emails", "id": job_id})
    assert response.status_code == 403 and "Actions are off" in response.text
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.DEAD


async def test_authorize_decides_every_action(app: aioqueue.App, tasks: Any) -> None:
    asked: list[str] = []

    def nobody(request: Request) -> bool:
        asked.append(request.url.path)
        return False

    async def admins(request: Request) -> bool:
        await asyncio.sleep(0)
        return request.headers.get("x-role") == "admin"

    job_id = await dead_job(app, tasks)
    fields = {"queue": "emails", "id": job_id}
    async with client_for(create_dashboard(app, actions=True, authorize=nobody)) as http:
        refused = await post(http, "/queue/emails?state=dead", "requeue", fields)
    assert refused.status_code == 403 and "Not allowed" in refused.text
    assert asked == ["/actions/requeue"]
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.DEAD

    async with client_for(create_dashboard(app, actions=True, authorize=admins)) as http:
        assert (await post(http, "/queue/emails?state=dead", "requeue", fields)).status_code == 403
        http.headers["x-role"] = "admin"
        assert (await post(http, "/queue/emails?state=dead", "requeue", fields)).status_code == 303
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.QUEUED


async def test_a_post_without_its_pages_token_is_refused(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    job_id = await dead_job(app, tasks)
    fields = {"queue": "emails", "id": job_id}
    page = await client.get("/queue/emails?state=dead")
    cookie = page.cookies["aioqueue_csrf"]
    assert "samesite=strict" in page.headers["set-cookie"].lower()
    assert "httponly" in page.headers["set-cookie"].lower()
    token = csrf_of(page.text)
    assert token == cookie

    forged = [
        await client.post("/actions/requeue", data=fields),  # no token in the form
        await client.post("/actions/requeue", data={**fields, "csrf": "x" * 32}),  # not it
        await client.post(
            "/actions/requeue",
            data={**fields, "csrf": token},
            headers={"sec-fetch-site": "cross-site"},
        ),
    ]
    async with client_for(create_dashboard(app, actions=True)) as stranger:  # no cookie
        forged.append(await stranger.post("/actions/requeue", data={**fields, "csrf": token}))
    assert [response.status_code for response in forged] == [403] * 4
    assert all("Refused" in response.text for response in forged)
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.DEAD

    done = await client.post("/actions/requeue", data={**fields, "csrf": token})
    assert done.status_code == 303


async def test_links_and_actions_work_under_a_mount(app: aioqueue.App, tasks: Any) -> None:
    job_id = await dead_job(app, tasks)
    outer = Starlette(routes=[Mount("/ops/queues", create_dashboard(app, actions=True))])
    async with client_for(outer) as http:
        page = await http.get("/ops/queues/")
        html = page.text
        assert 'href="/ops/queues/queue/emails"' in html
        assert 'href="/ops/queues/periodic"' in html
        css = re.search(
            r'<link rel="stylesheet" href="(/ops/queues/static/dashboard\.css[^"]*)"', html
        )
        assert css and (await http.get(css.group(1))).status_code == 200
        assert "Path=/ops/queues;" in page.headers["set-cookie"]

        dead = await http.get("/ops/queues/queue/emails?state=dead")
        assert 'action="/ops/queues/actions/requeue"' in dead.text
        assert f'href="/ops/queues/job?queue=emails&amp;id={job_id}"' in dead.text
        response = await post(
            http, "/ops/queues/queue/emails?state=dead", "requeue",
            {"queue": "emails", "id": job_id, "state": "dead"}, root="/ops/queues",
        )  # fmt: skip
        assert response.status_code == 303
        assert response.headers["location"].startswith("/ops/queues/queue/emails?state=dead")
        assert (await http.get(response.headers["location"])).status_code == 200
    assert await app.queue("emails").status(job_id) == aioqueue.JobStatus.QUEUED


async def test_a_dashboard_limited_to_some_queues_shows_only_those(
    app: aioqueue.App, tasks: Any
) -> None:
    async with client_for(create_dashboard(app, queues=["reports"])) as http:
        html = (await http.get("/")).text
        assert '<tr data-queue="reports">' in html and 'data-queue="emails"' not in html
        assert (await http.get("/queue/emails")).status_code == 404


# -- the chart's layout and the progress bar's reading ------------------------------------


def test_the_chart_scales_bars_to_round_gridlines() -> None:
    assert [nice_step(peak) for peak in (0, 3, 4, 9, 40, 41, 399, 401)] == [
        1, 1, 1, 5, 10, 20, 100, 200,
    ]  # fmt: skip
    minute = 60_000
    history = [MinuteCounts(i * minute, complete=c, retried=f) for i, (c, f) in enumerate(
        [(0, 0), (30, 10), (15, 5)]
    )]  # fmt: skip
    chart = throughput(history)
    assert (chart.complete, chart.failed, chart.retried) == (45, 0, 15)  # retries apart
    assert [tick.label for tick in chart.y_ticks] == ["0", "10", "20", "30", "40"]
    empty, full, half = chart.bars
    assert empty.segments == ()
    assert [s.kind for s in full.segments] == ["complete", "retried"]
    plot = chart.bottom - chart.top
    assert full.segments[0].height + full.segments[1].height == pytest.approx(plot)
    assert half.segments[0].height == pytest.approx(full.segments[0].height / 2, abs=0.01)
    assert full.segments[1].y + full.segments[1].height == pytest.approx(full.segments[0].y)
    assert throughput([]).empty


def test_progress_reads_as_a_fraction_when_it_says_how_far() -> None:
    assert fraction({"done": 25, "of": 100}) == 0.25
    assert fraction({"done": 5, "total": 4}) == 1.0
    assert fraction(0.5) == 0.5
    for unclear in ({"done": 1}, {"done": 1, "of": 0}, 42, True, "half", None, [1, 2]):
        assert fraction(unclear) is None


async def test_a_queue_with_tenants_lists_them_and_each_job_names_its_own(
    app: aioqueue.App, tasks: Any, client: httpx.AsyncClient
) -> None:
    queue = app.queue("emails")
    await queue.set_tenant_limits(max_running=2)
    await queue.set_weights({"acme <co>": 3})
    for n in range(3):
        await tasks["send_email"].enqueue(f"{n}@acme.example").options(tenant="acme <co>")
    job = await tasks["send_email"].enqueue("z@zeta.example").options(tenant="zeta")

    page = (await client.get("/queue/emails")).text
    assert "data-tenant-count>2 tenants with jobs ready</span>" in page
    assert "Each tenant without limits of its own: at most 2 running" in page
    cells = (
        r'data-tenant-row="([^"]*)">\s*<td><code>[^<]*</code></td>'
        + r'\s*<td class="num">(\d+)</td>' * 3
    )
    rows = re.findall(cells, page)
    # escaped, most ready first: ready, running, weight
    assert rows == [("acme &lt;co&gt;", "3", "0", "3"), ("zeta", "1", "0", "1")]
    assert page.count("data-tenant>tenant <code>") == 4
    assert "<code>zeta</code>" in (await client.get(f"/job?queue=emails&id={job.id}")).text
    await drain(app, queues=["emails"])
    assert 'id="tenants"' not in (await client.get("/queue/emails")).text
