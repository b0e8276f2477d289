"""The long-running commands besides the worker, as a user runs them: ``aioqueue
dashboard`` and ``aioqueue worker --metrics-port``. Each is started as a process, asked
over HTTP, and stopped with the signal a terminal or an orchestrator sends."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest

import aioqueue
from aioqueue.ops.embedded import free_loopback_port
from tests.helpers import wait_until
from tests.ops.test_cli import TARGET, run_cli
from tests.ops.test_cli_defects import one_line

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

pytest.importorskip("starlette")
pytest.importorskip("prometheus_client")


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def get(url: str) -> tuple[int, str]:
    return await asyncio.to_thread(_get, url)


async def answers(url: str) -> bool:
    try:
        await get(url)
    except OSError:
        return False
    return True


@pytest.fixture
async def started() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Processes a test starts; any still running at the end are killed."""
    processes: list[asyncio.subprocess.Process] = []
    yield processes
    for process in processes:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def start(
    processes: list[asyncio.subprocess.Process], argv: list[str], env: dict[str, str]
) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", *argv,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    processes.append(process)
    return process


async def test_the_dashboard_command_serves_the_apps_queues_until_ctrl_c(
    cli_env: dict[str, str], redis_url: str, prefix: str, started: list[asyncio.subprocess.Process]
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    job = await app.queue().enqueue("shout", "hello")
    port = free_loopback_port()
    process = await start(started, ["dashboard", TARGET, "--port", str(port)], cli_env)
    base = f"http://127.0.0.1:{port}/"
    await wait_until(lambda: answers(base), timeout=15)
    status, page = await get(base)
    assert status == 200 and "default" in page
    status, page = await get(f"{base}job?queue=default&id={job.id}")
    assert status == 200 and job.id in page and "shout" in page
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), 10) == 0
    await app.close()


async def test_dashboard_errors_are_one_line(cli_env: dict[str, str]) -> None:
    no_url = {k: v for k, v in cli_env.items() if k != "AIOQUEUE_REDIS_URL"}
    code, _, err = await run_cli(["dashboard", TARGET], env=no_url)
    assert code == 2 and "dashboard needs a Redis URL" in one_line(err)
    code, _, err = await run_cli(["dashboard", TARGET, "--port", "0"], env=cli_env)
    assert code == 2 and "must be a port from 1 to 65535" in one_line(err)


async def test_worker_metrics_port_serves_what_the_worker_did(
    cli_env: dict[str, str], redis_url: str, prefix: str, started: list[asyncio.subprocess.Process]
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    jobs = [await app.queue().enqueue("shout", word) for word in ("a", "b", "boom")]
    port = free_loopback_port()
    argv = ["worker", TARGET, "--metrics-port", str(port)]
    process = await start(started, argv, cli_env)
    url = f"http://127.0.0.1:{port}/metrics"

    async def settled() -> bool:
        return all([(await job.status()).finished for job in jobs])

    await wait_until(settled, timeout=15)
    await wait_until(lambda: answers(url), timeout=15)
    status, text = await get(url)
    assert status == 200
    lines = set(text.splitlines())
    assert 'aioqueue_jobs_total{outcome="complete",queue="default",task="shout"} 2.0' in lines
    assert 'aioqueue_jobs_total{outcome="dead",queue="default",task="shout"} 1.0' in lines
    assert "aioqueue_worker_up 1.0" in lines
    assert 'aioqueue_queue_jobs{queue="default",state="dead"} 1.0' in lines
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 15) == 0
    await app.close()


async def test_a_taken_metrics_port_is_refused_before_anything_starts(
    cli_env: dict[str, str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await run_cli(["worker", TARGET, "--metrics-port", str(port)], env=cli_env)
    assert code == 2
    assert f"cannot serve metrics on 127.0.0.1:{port}" in one_line(err)
