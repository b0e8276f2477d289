"""What the CLI shows of any record in Redis: a finished job says what it kept (never
``task: None`` or a wrong priority), and a record with an absurd due time, written by an
older version or another program, is shown as it is instead of a traceback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

import aioqueue
from tests.apps import mail_app
from tests.helpers import run_until_idle
from tests.ops.test_cli import run_cli

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

TARGET = "tests.apps.mail_app:app"


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


@pytest.fixture
async def mail(redis_url: str, prefix: str) -> AsyncIterator[aioqueue.App]:
    """An app with the CLI app's tasks, on this test's prefix (its burst workers)."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    for task in mail_app.app.tasks.values():
        app.registry.add_task(task)
    yield app
    await app.close()


async def test_a_completed_job_keeps_its_task_and_priority(
    cli_env: dict[str, str], mail: aioqueue.App
) -> None:
    kept = await mail.queue("emails").enqueue("send_email", "ada@example.com")
    gone = await mail.queue("emails").enqueue("log_email", "ada@example.com")
    await run_until_idle(mail, queues=["emails"])
    code, out, err = await run_cli(["job", "show", TARGET, kept.id, "-q", "emails"], env=cli_env)
    assert code == 0, err
    assert "task:      send_email" in out and "priority:  7" in out
    assert "args:      (not kept)" in out and 'result:    "sent to ada@example.com"' in out
    assert "None" not in out and "[]" not in out
    code, out, err = await run_cli(["job", "show", TARGET, gone.id, "-q", "emails"], env=cli_env)
    assert code == 0, err
    for field in ("task", "args", "attempts", "priority", "enqueued"):
        assert f"{field}:".ljust(11) + "(not kept)" in out
    assert "kept:      only its id" in out and "priority:  0" not in out
    argv = ["jobs", "ls", TARGET, "-q", "emails", "--state", "complete"]
    code, out, err = await run_cli([*argv, "--task", "send_email"], env=cli_env)
    assert code == 0 and kept.id in out and "finished (UTC)" in out, err
    code, out, err = await run_cli([*argv, "--task", "log_email"], env=cli_env)
    assert code == 0 and kept.id not in out and gone.id not in out, err  # None: not listed


async def test_a_far_future_record_is_listed_as_it_is(
    cli_env: dict[str, str], mail: aioqueue.App, redis: Redis
) -> None:
    """An older version accepted ``delay=10**12`` (due in the year 33715); another program
    may write an infinite score. Both are listed and shown, with their numbers."""
    queue = mail.queue("emails")
    job = await queue.enqueue("send_email", "later@example.com").options(delay=60)
    await redis.zadd(queue.keys.schedule, {job.id: 10**15})
    await redis.hset(queue.keys.job("foreign"), mapping={"s": "scheduled", "et": "inf"})
    await redis.zadd(queue.keys.schedule, {"foreign": float("inf")})
    argv = ["jobs", "ls", TARGET, "-q", "emails", "--state", "scheduled"]
    code, out, err = await run_cli(argv, env=cli_env)
    assert code == 0 and err == "", err
    assert "1000000000000000 ms (out of range)" in out and "inf ms (out of range)" in out
    code, out, err = await run_cli(["job", "show", TARGET, job.id, "-q", "emails"], env=cli_env)
    assert code == 0 and err == "", err
    assert "due:       1000000000000000 ms (out of range)" in out
    code, out, err = await run_cli(["job", "show", TARGET, "foreign", "-q", "emails"], env=cli_env)
    assert code == 0 and "status:    scheduled" in out and "enqueued:  -" in out, err
