"""A worker's start imports only what it uses: neither ``import aioqueue`` nor a worker
process up to its first job loads the dashboard, the one-shot commands' tables, tracing,
metrics, the memory:// backend, Sentinel, cron parsing, messaging or workflows
(``tests/apps/startup_app.py: UNNEEDED``). What redis-py loads by itself does not count:
redis-py 8 imports the OpenTelemetry SDK whenever it is installed. No timing here: the
start-up's time is ``python -m benchmarks.startup``'s."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

import aioqueue

LOADED = "from tests.apps.startup_app import unneeded_loaded; print(json.dumps(unneeded_loaded()))"


def loaded_by(code: str) -> list[str]:
    """What of ``UNNEEDED`` a fresh interpreter has loaded after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"import json; {code}; {LOADED}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    loaded: list[str] = json.loads(out)
    return loaded


@pytest.fixture(scope="module")
def redis_py_loads() -> set[str]:
    """What redis-py's own import loads of ``UNNEEDED`` (OpenTelemetry, when installed)."""
    return set(loaded_by("import redis.asyncio"))


def test_redis_py_alone_loads_none_of_ours(redis_py_loads: set[str]) -> None:
    """Only OpenTelemetry, and the ctypes its SDK's metrics load."""
    ours = {name for name in redis_py_loads if not name.startswith("opentelemetry")}
    assert ours <= ({"ctypes", "ctypes._endian"} if "opentelemetry" in redis_py_loads else set())


def test_importing_aioqueue_loads_nothing_a_worker_does_not_use(
    redis_py_loads: set[str],
) -> None:
    assert set(loaded_by("import aioqueue")) - redis_py_loads == set()


def test_the_worker_command_loads_nothing_a_worker_does_not_use(
    redis_py_loads: set[str],
) -> None:
    loaded = loaded_by("import aioqueue.ops.cli; import tests.apps.startup_app")
    assert set(loaded) - redis_py_loads == set()


def test_the_lazy_names_are_the_modules_own() -> None:
    """``aioqueue.Topic`` and the other names loaded on first use are the real objects."""
    from aioqueue.client import messaging, topics, workflows

    for module in (messaging, topics, workflows):
        lazy = [name for name in aioqueue.__all__ if getattr(module, name, None) is not None]
        assert lazy, module.__name__
        for name in lazy:
            assert getattr(aioqueue, name) is getattr(module, name)
            assert name in dir(aioqueue)
    misspelt = "Topics"
    with pytest.raises(AttributeError, match="no attribute 'Topics'"):
        getattr(aioqueue, misspelt)


@pytest.mark.real_redis("the worker runs as a process of its own")
async def test_a_worker_process_runs_its_first_job_without_them(
    redis_url: str, prefix: str, redis_py_loads: set[str]
) -> None:
    producer = aioqueue.App(redis_url=redis_url, prefix=prefix)
    job = await producer.queue().enqueue("loaded")
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.startup_app:app", "--burst",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    loaded = await job.result(timeout=5)
    await producer.close()
    assert set(loaded) - redis_py_loads == set()
