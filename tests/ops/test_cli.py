"""The command line, run as real processes against the suite's server."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.garbage import GEN0_THRESHOLD
from aioqueue.store import server as server_module
from aioqueue.worker import heartbeat
from tests.helpers import run_until_idle, wait_until

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

TARGET = "tests.apps.cli_app:app"


async def run_cli(
    args: Sequence[str], *, env: dict[str, str], timeout: float = 30
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


@pytest.fixture
async def producer(redis_url: str, prefix: str) -> aioqueue.App:
    """A producer with no tasks of its own, like a web service without the worker code."""
    return aioqueue.App(redis_url=redis_url, prefix=prefix)


async def test_burst_worker_runs_queued_jobs(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    queue = producer.queue()
    jobs = [await queue.enqueue("shout", word) for word in ("a", "b", "c")]
    code, _, err = await run_cli(["worker", TARGET, "--burst", "-c", "5"], env=cli_env)
    assert code == 0, err
    assert [await job.result(timeout=1) for job in jobs] == ["A", "B", "C"]
    await producer.close()


async def test_a_worker_process_tunes_its_garbage_collector(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    """``aioqueue worker`` freezes its start-up heap and raises the young generation's
    threshold (ops/garbage.py); this test process keeps CPython's defaults."""
    job = await producer.queue().enqueue("collector")
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0, err
    threshold, frozen = await job.result(timeout=1)
    assert threshold == GEN0_THRESHOLD and frozen > 1000, (threshold, frozen)
    assert gc.get_threshold()[0] != GEN0_THRESHOLD
    await producer.close()


async def test_two_processes_share_the_work(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    queue = producer.queue()
    jobs = [await queue.enqueue("shout", f"w{i}") for i in range(40)]
    code, _, err = await run_cli(["worker", TARGET, "--burst", "-p", "2"], env=cli_env)
    assert code == 0, err
    assert [await job.result(timeout=1) for job in jobs] == [f"W{i}" for i in range(40)]
    await producer.close()


async def test_without_a_url_it_starts_an_embedded_server(prefix: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIOQUEUE_REDIS_URL"}
    env["TEST_PREFIX"] = prefix
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=env)
    assert code == 0, err
    assert "started an embedded server" in err


async def test_sigterm_stops_the_worker_gracefully(cli_env: dict[str, str], redis_url: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET,
        env=cli_env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    started = await asyncio.wait_for(process.stderr.readline(), 10)
    assert b"serving" in started
    process.send_signal(signal.SIGTERM)
    rest = await asyncio.wait_for(process.stderr.read(), 10)
    assert await process.wait() == 0
    assert b"stopped" in rest


async def test_dead_commands(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    job = await producer.queue().enqueue("shout", "boom")
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0, err
    assert await job.status() is aioqueue.JobStatus.DEAD

    code, out, _ = await run_cli(["dead", "ls", TARGET], env=cli_env)
    assert code == 0 and job.id in out and "ValueError: cannot shout boom" in out
    code, out, _ = await run_cli(["dead", "show", TARGET, job.id], env=cli_env)
    assert code == 0 and "status:    dead" in out and "Traceback" in out
    code, out, _ = await run_cli(["dead", "requeue", TARGET, job.id], env=cli_env)
    assert code == 0 and "requeued 1 job(s)" in out
    assert await job.status() is aioqueue.JobStatus.QUEUED

    code, _, _ = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0
    await wait_until(lambda: _is_dead(job))
    code, _, err = await run_cli(["dead", "purge", TARGET], env=cli_env)  # no terminal
    assert code == 2 and "confirm with --yes" in err
    code, out, _ = await run_cli(["dead", "purge", TARGET, "--yes"], env=cli_env)
    assert code == 0 and "purged 1 job(s)" in out
    assert await producer.queue().info(job.id) is None
    await producer.close()


async def _is_dead(job: aioqueue.Job[object]) -> bool:
    return await job.status() is aioqueue.JobStatus.DEAD


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tests.apps.cli_app:not_an_app", "is not an aioqueue.App"),
        ("tests.apps.cli_app", "expected module:app"),
    ],
)
async def test_bad_target_is_a_clear_error(
    cli_env: dict[str, str], target: str, message: str
) -> None:
    code, _, err = await run_cli(["worker", target, "--burst"], env=cli_env)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


async def test_check_reports_live_workers_per_queue(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    code, out, _ = await run_cli(["check", TARGET], env=cli_env)
    assert code == 1 and "default: 0 live worker(s)" in out

    async with producer.worker(queues=["default"]):
        await wait_until(lambda: _has_live_worker(producer), timeout=5)
        code, out, _ = await run_cli(["check", TARGET], env=cli_env)
        assert code == 0 and "default: 1 live worker(s)" in out
        [info] = await producer.queue().workers()
        assert info["queues"] == ["default"] and info["pid"] == os.getpid()

    assert await producer.queue().workers() == []  # a clean stop removes the heartbeat
    await producer.close()


async def _has_live_worker(app: aioqueue.App) -> bool:
    return bool(await app.queue().workers())


async def test_worker_runs_on_uvloop(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    job = await producer.queue().enqueue("shout", "fast")
    code, _, err = await run_cli(["worker", TARGET, "--burst", "--uvloop"], env=cli_env)
    assert code == 0, err
    assert await job.result(timeout=1) == "FAST"
    await producer.close()


def test_burst_waits_for_retries_unless_told_not_to() -> None:
    from aioqueue.ops.cli import parse

    assert parse(["worker", "m:app", "--burst"]).wait_retries is True
    assert parse(["worker", "m:app", "--burst", "--no-wait-retries"]).wait_retries is False


async def test_workers_of_two_apps_on_one_queue_are_a_loud_warning(
    cli_env: dict[str, str], redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two unrelated apps on one server and prefix share queue "default": each buries the
    other's jobs as UnknownTask. Workers say so at start, and check prints it."""
    billing = aioqueue.App(redis_url=redis_url, prefix=prefix)
    mailer = aioqueue.App(redis_url=redis_url, prefix=prefix)
    billing.task(name="charge")(_noop)
    mailer.task(name="send_mail")(_noop)
    try:
        async with billing.worker(queues=["default"]):
            await wait_until(lambda: _has_live_worker(billing))
            async with mailer.worker(queues=["default"]):
                await wait_until(lambda: _logged(caplog, "serve different task sets"))
                code, out, _ = await run_cli(["check", TARGET], env=cli_env)
    finally:
        await billing.close()
        await mailer.close()
    warning = next(r.getMessage() for r in caplog.records if "different task" in r.getMessage())
    assert "[charge]" in warning and "[send_mail]" in warning and "prefix" in warning
    assert "WARNING default: live workers serve different task sets" in out
    assert code == 0  # a warning: a rolling deploy looks the same


async def _noop() -> None: ...


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


async def test_an_evicting_server_is_a_loud_warning_and_fails_check(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Under allkeys-lru a full server silently deletes queue keys: jobs vanish. Said when
    the App connects; a worker started just then does not say it twice (``aioqueue
    worker`` did, a line apart), but says it again while it lasts (hourly)."""
    with EmbeddedServer(extra_args=["--maxmemory-policy", "allkeys-lru"]) as server:
        app = aioqueue.App(redis_url=server.url, prefix=prefix)
        await app.queue().status("any")  # the first use connects
        assert any("maxmemory-policy is 'allkeys-lru'" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(heartbeat, "BEAT_INTERVAL", 0.05)  # a look after each beat
            async with app.worker():
                first = await _beat_at(app)
                await wait_until(lambda: _beaten_since(app, first))  # (a look between)
            assert not await _logged(caplog, "maxmemory-policy")
            patch.setattr(server_module, "SAY_AGAIN_AFTER", 0.0)
            async with app.worker():
                await wait_until(lambda: _logged(caplog, "maxmemory-policy"))
        await app.close()
        env = {**os.environ, "AIOQUEUE_REDIS_URL": server.url, "TEST_PREFIX": prefix}
        code, out, _ = await run_cli(["check", TARGET], env=env)
    assert code == 1
    assert "PROBLEM: Redis maxmemory-policy is 'allkeys-lru'" in out


async def _beat_at(app: aioqueue.App) -> float:
    workers: list[dict[str, Any]] = []
    while not workers:
        workers = await app.queue().workers()
    return float(workers[0]["beat_at"])


async def _beaten_since(app: aioqueue.App, first: float) -> bool:
    return await _beat_at(app) > first


async def test_a_server_that_refuses_config_is_no_error(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Managed services and ACLs often deny CONFIG: aioqueue carries on without knowing."""
    admin = Redis.from_url(redis_url)
    user = f"noconfig{prefix}"
    await admin.acl_setuser(
        user,
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-config"],
    )
    host_port = redis_url.removeprefix("redis://")
    app = aioqueue.App(redis_url=f"redis://{user}:pw@{host_port}", prefix=prefix)
    try:

        @app.task
        async def ping() -> str:
            return "pong"

        job = await ping.enqueue()
        await run_until_idle(app)
        assert await job.result(timeout=1) == "pong"
        assert not any("maxmemory" in r.getMessage() for r in caplog.records)
    finally:
        await app.close()
        await admin.acl_deluser(user)
        await admin.aclose()


async def test_reconcile_command(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    job = await producer.queue().enqueue("shout", "lost")
    redis = await producer.client()
    await redis.delete(*producer.queue().keys.ready_lists())  # an eviction
    code, out, err = await run_cli(["reconcile", TARGET], env=cli_env)
    assert code == 0, err
    assert "default: 1 job(s) put back" in out
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0, err
    assert await job.result(timeout=1) == "LOST"
    await producer.close()


async def test_workers_with_different_idempotency_windows_are_a_warning(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Completed jobs' ids are kept where the window says: processes that disagree do not
    find each other's, and a reused id runs again."""
    short = aioqueue.App(redis_url=redis_url, prefix=prefix, idempotency_ttl=60)
    long = aioqueue.App(redis_url=redis_url, prefix=prefix, idempotency_ttl=3600)
    for app in (short, long):
        app.task(name="same")(_noop)
    try:
        async with short.worker(queues=["default"]):
            await wait_until(lambda: _has_live_worker(short))
            async with long.worker(queues=["default"]):
                await wait_until(lambda: _logged(caplog, "different idempotency windows"))
    finally:
        await short.close()
        await long.close()
