"""Mistakes that were accepted quietly raise (or warn) at once, naming their cause and,
where one is near, the name meant."""

from __future__ import annotations

import math

import pytest
from redis.asyncio import Redis

import aioqueue
from tests.client.test_bad_input import assert_nothing_written
from tests.helpers import run_until_idle


async def test_an_unknown_task_name_is_refused_where_the_app_has_that_queues_tasks(
    app: aioqueue.App, redis: Redis, prefix: str
) -> None:
    @app.task(queue="emails")
    async def send_email(to: str) -> None: ...

    emails = app.queue("emails")
    with pytest.raises(aioqueue.UnknownTask, match="did you mean 'send_email'") as caught:
        await emails.enqueue("send_emial", "a@b.c")
    assert "no task 'send_emial' on queue 'emails'" in str(caught.value)
    with pytest.raises(aioqueue.UnknownTask, match="enqueue one of those"):
        await emails.enqueue_many([emails.enqueue("zzz")])
    await assert_nothing_written(redis, prefix, emails)
    # a queue this app has no task on: a producer without the code enqueues by name
    assert (await app.queue("elsewhere").enqueue("their_task", 1)).created


def test_urls_that_mean_something_else_are_refused() -> None:
    with pytest.raises(aioqueue.ConfigError, match="the Redis URL is empty"):
        aioqueue.App(redis_url="")
    with pytest.raises(aioqueue.ConfigError, match="db 'abc' is not a number"):
        aioqueue.App(redis_url="redis://127.0.0.1:6379/abc")
    with pytest.raises(aioqueue.ConfigError, match="db 'x' is not a number"):
        aioqueue.App(redis_url="unix:///tmp/redis.sock?db=x")
    for fine in ("redis://h:1", "redis://h:1/", "redis://h:1/15", "unix:///tmp/r.sock?db=2"):
        aioqueue.App(redis_url=fine)


def test_periodic_below_task_says_how_to_write_it(app: aioqueue.App) -> None:
    with pytest.raises(aioqueue.ConfigError) as caught:

        @app.task
        @app.periodic(every=60)  # type: ignore[arg-type]
        async def digest() -> None: ...

    assert str(caught.value) == (
        "@app.periodic(...) must be written above @app.task (it takes the task @app.task "
        "makes), but it was given the plain function 'digest'"
    )


async def test_a_negative_fetch_timeout_is_refused(app: aioqueue.App) -> None:
    for bad in (-1, math.nan, "5"):
        with pytest.raises(aioqueue.ConfigError, match="timeout must be 0"):
            await app.mailbox("inbox").fetch(timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(aioqueue.ConfigError, match="timeout must be 0"):
            await app.group("room").fetch("alice", timeout=bad)  # type: ignore[arg-type]


async def test_channels_say_what_they_are(app: aioqueue.App) -> None:
    await app.mailbox("user-42").send({"text": "hi"})
    await app.group("room-7").join("alice")
    assert sorted(map(repr, await app.channels())) == ["Group('room-7')", "Mailbox('user-42')"]


async def test_a_worker_for_a_queue_no_task_uses_warns(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="emails")
    async def send_email(to: str) -> None: ...

    async with app.worker(queues=["emailz", "emails"]):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(
        "no task of this app uses queue 'emailz'" in w and "did you mean 'emails'" in w
        for w in warnings
    ), warnings
    assert not any("'emails' (" in w for w in warnings)


async def test_the_retry_log_line_reads_well(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    """The error's own message comes last: its full stop no longer meets "; retry"."""

    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0))
    async def flaky() -> None:
        raise RuntimeError("cannot send to boom.")

    await flaky.enqueue()
    caplog.set_level("INFO", logger="aioqueue.worker.runner")
    await run_until_idle(app, queues=["q"])
    [line] = [r.getMessage() for r in caplog.records if "retry in" in r.getMessage()]
    assert ".;" not in line
    assert line.endswith("attempt 1/2 failed, retry in 0.000s: RuntimeError: cannot send to boom.")
