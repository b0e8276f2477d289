"""Everything aioqueue does works for an ACL user that may run only the commands the
README lists (``aioqueue.store.server.REQUIRED_COMMANDS``): nothing is denied, neither to
the producer nor to the worker (whose loops would only log a denial, so the server's ACL
LOG is checked too)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.store.server import REQUIRED_COMMANDS
from tests.helpers import run_until_idle

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
async def restricted_url(redis: Redis, redis_url: str) -> AsyncIterator[tuple[str, str]]:
    user, password = f"aq{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rules = ["on", f">{password}", "~*", "&*", "-@all", *(f"+{c}" for c in REQUIRED_COMMANDS)]
    await redis.acl_setuser(user, reset=True)
    await redis.execute_command("ACL SETUSER", user, *rules)  # type: ignore[no-untyped-call]
    yield redis_url.replace("redis://", f"redis://{user}:{password}@"), user
    await redis.acl_deluser(user)


async def test_a_user_with_the_listed_commands_can_do_everything(
    restricted_url: tuple[str, str], redis: Redis, prefix: str
) -> None:
    url, user = restricted_url
    app = aioqueue.App(redis_url=url, prefix=prefix)
    release = asyncio.Event()

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task(retries=0)
    async def fails() -> None:
        raise ValueError("dead on purpose")

    @app.task
    async def waits() -> None:
        await release.wait()

    @app.task(queue="side")
    async def leaf(x: int) -> int:
        return x

    @app.task
    async def total(results: list[int]) -> int:
        return sum(results)

    @app.subscriber("events", group="g")
    async def on_event(body: Any) -> None:
        return None

    try:
        one = await add.enqueue(1, 2)
        many = await app.queue().enqueue_many(add.enqueue(n, n) for n in range(10))
        later = await add.enqueue(5, 5).options(delay=0.2)
        dead = await fails.enqueue()
        flow = await aioqueue.chord([leaf.enqueue(x) for x in range(3)], total.callback())
        grouped = [await add.enqueue(n, 0).options(group="g1") for n in range(3)]
        await app.queue().set_tenant_limits(max_running=1, rate="100/s")
        await app.queue().set_weights({"t1": 2})
        tenants = [await add.enqueue(n, 1).options(tenant=f"t{n % 2}") for n in range(4)]
        async with app.batch() as batch:
            batch.add(add.enqueue(1, 1))
        await app.add_periodic(add, every=3600, args=[0, 0], name="hourly")
        await app.topic("events").publish_many(range(5))
        room = app.group("room")
        await room.join("alice")
        await room.send("alice", {"text": "hi"})
        await room.ack("alice", await room.fetch("alice"))
        await app.mailbox("box").send("x")
        async with app.worker(concurrency=5, lease=2, queues=["default", "side"]):
            assert await one.result(timeout=5) == 3
            assert await flow.result(timeout=5) == 3  # (a hand-off from "side")
            assert [await job.result(timeout=5) for job in grouped] == [0, 1, 2]
            assert [await job.result(timeout=5) for job in tenants] == [1, 2, 3, 4]
            assert (await batch.wait(timeout=5)).succeeded == 1
            assert [await job.result(timeout=5) for job in many] == [2 * n for n in range(10)]
            assert await later.result(timeout=5) == 10
            with pytest.raises(aioqueue.JobFailed):
                await dead.result(timeout=5)
            running = await waits.enqueue()
            await asyncio.sleep(0.2)
            await app.queue().cancel(running.id)
            with pytest.raises(aioqueue.JobCancelled):
                await running.result(timeout=5)
            await app.topic("events").wait_processed(timeout=5)
        queue = app.queue()
        assert (await queue.counts()).dead == 1
        assert await queue.jobs("dead")
        await queue.history(minutes=5)
        await queue.workers()
        await queue.tenants()
        await queue.all_tenant_limits()
        await queue.pause()
        await queue.resume()
        assert await queue.reconcile() == 0  # (SCAN over the job records)
        await app.unread("alice")
        await app.channels()
        await app.topics()
        assert await app.topic("events").dead_letters() == []
        await run_until_idle(app)
    finally:
        await app.close()
    denied = [entry for entry in await redis.acl_log() if entry.get("username") == user]
    assert denied == [], denied


def test_the_readme_lists_exactly_the_required_commands() -> None:
    text = README.read_text("utf-8")
    block = text[text.index("**ACL.**") :].split("```")[1]
    assert block.split() == list(REQUIRED_COMMANDS)
