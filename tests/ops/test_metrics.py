"""Prometheus metrics: the endpoint scraped after known work gives exact values; depths are
read at scrape time and a hung Redis costs a scrape at most ``depth_timeout``; the
collector works in an embedding app's registry; task labels stay bounded."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import aioqueue
from aioqueue import current_job
from aioqueue.ops.metrics import (
    Metrics,
    MetricsServer,
    instrument,
    start_metrics_server,
)
from tests.faults.test_network_cut import BlackHoleProxy
from tests.helpers import drain, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(page: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((f"aioqueue_{name}", frozenset(labels.items())))


def series(samples: Samples, name: str, *labels: str, **fixed: str) -> dict[tuple[str, ...], float]:
    """Every sample of ``name`` (that has the ``fixed`` labels), by the values of ``labels``."""
    return {
        tuple(dict(key)[label] for label in labels): sample_value
        for (sample, key), sample_value in samples.items()
        if sample == f"aioqueue_{name}" and set(fixed.items()) <= key
    }


def names(samples: Samples, name: str, label: str) -> set[str]:
    """The values ``label`` takes in the samples of ``name``."""
    return {dict(key)[label] for sample, key in samples if sample == f"aioqueue_{name}"}


async def scrape(server: MetricsServer) -> Samples:
    """GET /metrics from another thread, as Prometheus would; bounded by a deadline."""

    def get() -> str:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            return str(response.read().decode())

    return parse(await asyncio.wait_for(asyncio.to_thread(get), timeout=10))


@pytest.fixture
def served() -> Iterator[list[MetricsServer]]:
    """Servers a test starts, closed at its end."""
    servers: list[MetricsServer] = []
    yield servers
    for server in servers:
        server.close()


@pytest.fixture
def metrics(app: aioqueue.App, served: list[MetricsServer]) -> tuple[Metrics, MetricsServer]:
    instrumented = instrument(app)
    served.append(start_metrics_server(instrumented, 0))
    return instrumented, served[-1]


async def test_counts_after_known_work(
    app: aioqueue.App, metrics: tuple[Metrics, MetricsServer]
) -> None:
    _, server = metrics
    await known_work(app)
    samples = await scrape(server)
    assert series(samples, "jobs_total", "queue", "task", "outcome") == {
        ("default", "ok", "complete"): 3,
        ("default", "flaky", "retry"): 2, ("default", "flaky", "complete"): 2,
        ("default", "broken", "dead"): 2, ("default", "lost", "failed"): 1,
    }  # fmt: skip
    attempts = {("ok",): 3, ("flaky",): 4, ("broken",): 2, ("lost",): 1}
    assert series(samples, "job_run_seconds_count", "task") == attempts
    assert series(samples, "job_run_seconds_bucket", "task", le="+Inf") == attempts
    assert all(sum_ >= 0 for sum_ in series(samples, "job_run_seconds_sum", "task").values())
    assert series(samples, "job_wait_seconds_count", "queue") == {("default",): 10}
    assert series(samples, "jobs_in_flight", "queue") == {("default",): 0}
    assert series(samples, "enqueued_total", "queue", "task") == {
        ("default", "ok"): 4, ("default", "flaky"): 2, ("default", "broken"): 2,
        ("default", "lost"): 1, ("other", "elsewhere"): 1,
    }  # fmt: skip
    assert value(samples, "worker_up") == 0  # the burst worker has stopped
    assert value(samples, "scrape_errors_total") == 0
    # depths, read at scrape time: what counts() says now
    counts = {name: await app.queue(name).counts() for name in ("default", "other")}
    assert series(samples, "queue_jobs", "queue", "state") == {
        (name, state): getattr(counts[name], state)
        for name in counts
        for state in ("ready", "scheduled", "active", "dead")
    }
    assert value(samples, "queue_jobs", queue="default", state="scheduled") == 1
    assert value(samples, "queue_jobs", queue="default", state="dead") == 2
    assert value(samples, "queue_jobs", queue="other", state="ready") == 1


async def known_work(app: aioqueue.App) -> None:
    """Drained on "default": ok 3 complete, flaky 2 retried then complete, broken 2 dead,
    lost 1 failed; left: 1 ok scheduled, 1 elsewhere ready on "other"."""

    @app.task
    async def ok() -> None:
        return None

    @app.task(retries=1, backoff=aioqueue.Fixed(0))
    async def flaky() -> None:
        if current_job().attempt == 1:
            raise RuntimeError("once")

    @app.task(retries=0)
    async def broken() -> None:
        raise RuntimeError("always")

    @app.task(retries=0, dead_letter=False)
    async def lost() -> None:
        raise RuntimeError("always")

    @app.task(queue="other")
    async def elsewhere() -> None:
        return None

    for _ in range(3):
        await ok.enqueue()
    await app.queue().enqueue_many([flaky.enqueue(), flaky.enqueue(), broken.enqueue()])
    await broken.enqueue()
    await lost.enqueue()
    await ok.enqueue().options(delay=3600)  # stays scheduled
    await elsewhere.enqueue()  # stays ready: the worker serves "default" only
    assert await drain(app, queues=["default"]) == {
        "complete": 5, "retry": 2, "bury": 2, "fail": 1
    }  # fmt: skip


async def test_a_running_worker_its_job_in_flight_then_cancelled(
    app: aioqueue.App, metrics: tuple[Metrics, MetricsServer]
) -> None:
    _, server = metrics
    started = asyncio.Event()

    @app.task
    async def hang() -> None:
        started.set()
        await asyncio.Event().wait()

    assert value(await scrape(server), "worker_up") == 0
    job = await hang.enqueue()
    async with app.worker():
        await asyncio.wait_for(started.wait(), 5)
        samples = await scrape(server)
        assert value(samples, "worker_up") == 1
        assert value(samples, "jobs_in_flight", queue="default") == 1
        assert value(samples, "queue_jobs", queue="default", state="active") == 1
        assert await job.cancel() is True

        async def cancelled() -> bool:
            return await job.status() is aioqueue.JobStatus.CANCELLED

        await wait_until(cancelled)  # settled here (and counted) before its ack landed
        samples = await scrape(server)
        assert value(samples, "jobs_total", queue="default", task="hang", outcome="cancelled") == 1
        assert value(samples, "jobs_in_flight", queue="default") == 0
        assert value(samples, "worker_up") == 1
    assert value(await scrape(server), "worker_up") == 0


@pytest.mark.real_redis("SIGSTOPs the server")
async def test_a_hung_redis_costs_a_scrape_depth_timeout_and_an_error(
    prefix: str, redis_url: str, served: list[MetricsServer]
) -> None:
    proxy = BlackHoleProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    # a socket timeout far above the depth timeout: a scrape waiting for it would show
    app = aioqueue.App(redis_url=await proxy.start(), prefix=prefix, socket_timeout=60)
    metrics = instrument(app, depth_timeout=0.2)
    served.append(server := start_metrics_server(metrics, 0))
    try:
        await app.queue().counts()  # connected: depths can be read
        samples = await scrape(server)
        assert value(samples, "queue_jobs", queue="default", state="ready") == 0
        assert value(samples, "scrape_errors_total") == 0

        proxy.cut()  # the pooled connection now swallows every request
        for errors in (1, 2):  # the second scrape joins the hung read, repeats none
            samples = await scrape(server)  # within its 10 s deadline, well below 60 s
            assert names(samples, "queue_jobs", "queue") == set()
            assert value(samples, "scrape_errors_total") == errors
            assert value(samples, "worker_up") == 0  # the rest is exported as usual
    finally:
        await proxy.close()  # the hung read fails now, and ends
        reading = metrics._reading
        if reading is not None:
            await asyncio.wait([reading], timeout=10)
        await app.close()


async def test_the_collector_in_an_embedding_apps_registry(app: aioqueue.App) -> None:
    registry = CollectorRegistry()
    metrics = instrument(app, registry, prefix="aioqueue_")

    @app.task
    async def ok() -> None:
        return None

    await ok.enqueue()
    await ok.enqueue()
    await drain(app)
    # generate_latest() on the loop's own thread cannot wait for that loop: no depths...
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "jobs_total", queue="default", task="ok", outcome="complete") == 2
    assert names(samples, "queue_jobs", "queue") == set()
    # ...but those of the last refresh()
    await ok.enqueue()
    assert await metrics.refresh() is True
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "queue_jobs", queue="default", state="ready") == 1
    assert value(samples, "enqueued_total", queue="default", task="ok") == 3

    with pytest.raises(aioqueue.ConfigError, match="has metrics already"):
        instrument(app, CollectorRegistry())
    other = aioqueue.App(redis_url=app.redis_url, prefix=app.settings.prefix)
    with pytest.raises(ValueError, match="Duplicated"):  # the names are taken there
        instrument(other, registry)


async def test_task_labels_come_from_the_app_only(
    app: aioqueue.App, metrics: tuple[Metrics, MetricsServer]
) -> None:
    _, server = metrics
    queue = app.queue()
    for n in range(5):  # names anyone can write into a payload
        await queue.enqueue(f"made_up_{n}")

    @app.task  # registered after instrument(): named all the same
    async def late() -> None:
        return None

    await late.enqueue()
    await drain(app)
    samples = await scrape(server)
    assert names(samples, "jobs_total", "task") == {"(unregistered)", "late"}
    assert names(samples, "enqueued_total", "task") == {"(unregistered)", "late"}
    labels = {"queue": "default", "task": "(unregistered)"}
    assert value(samples, "jobs_total", **labels, outcome="dead") == 5
    assert value(samples, "job_run_seconds_count", **labels) == 5
    assert value(samples, "enqueued_total", **labels) == 5
    assert value(samples, "jobs_total", queue="default", task="late", outcome="complete") == 1


async def test_server_is_loopback_by_default_and_a_taken_port_is_a_config_error(
    app: aioqueue.App, served: list[MetricsServer]
) -> None:
    metrics = instrument(app)
    served.append(server := start_metrics_server(metrics, 0))
    assert server.host == "127.0.0.1"
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    with pytest.raises(aioqueue.ConfigError, match="cannot serve metrics"):
        start_metrics_server(metrics, server.port)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix": "9bad"}, "prefix"),
        ({"buckets": []}, "buckets"),
        ({"buckets": [1.0, 1.0]}, "buckets"),
        ({"buckets": [1.0, float("inf")]}, "buckets"),
        ({"depth_timeout": 0}, "depth_timeout"),
        ({"tenants": -1}, "tenants"),
        ({"tenants": True}, "tenants"),
    ],
)
async def test_bad_settings_are_config_errors(
    app: aioqueue.App, options: dict[str, object], message: str
) -> None:
    with pytest.raises(aioqueue.ConfigError, match=message):
        instrument(app, **options)  # type: ignore[arg-type]
    assert app.registry.observers == ()  # nothing was wired


def test_without_the_extra_the_import_error_says_what_to_install() -> None:
    code = "import sys; sys.modules['prometheus_client'] = None; import aioqueue.ops.metrics"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (
        "ModuleNotFoundError: aioqueue metrics need prometheus-client: "
        "pip install 'aioqueue[metrics]'"
    )


async def test_tenants_are_labels_only_when_asked(app: aioqueue.App) -> None:
    """Without ``tenants=N`` no metric has a tenant label (a label per tenant may be many):
    only how many tenants have jobs ready; with it, the N with the most."""
    queue = app.queue()
    for tenant, count in (("a", 3), ("b", 2), ("c", 1)):
        for _ in range(count):
            await queue.enqueue("job").options(tenant=tenant)
    plain = instrument(app, CollectorRegistry())
    assert await plain.refresh() is True
    samples = parse(generate_latest(plain.registry).decode())
    assert value(samples, "queue_tenants", queue="default") == 3
    assert not any("tenant" in dict(labels) for _, labels in samples)

    other = aioqueue.App(redis_url=app.redis_url, prefix=app.settings.prefix)
    try:
        labelled = instrument(other, CollectorRegistry(), tenants=2)
        assert await labelled.refresh() is True
        samples = parse(generate_latest(labelled.registry).decode())
        assert series(samples, "tenant_jobs", "tenant", "state") == {
            ("a", "ready"): 3,
            ("a", "running"): 0,
            ("b", "ready"): 2,
            ("b", "running"): 0,
        }
    finally:
        await other.close()
