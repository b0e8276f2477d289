"""A connection that drops after an enqueue reached Redis but before its reply came back:
every client sends the call again marked as a resend (enqueue.lua's ``resend``), so each
job is written once (one record, one ready entry, one wake-up token), never twice.

The proxy (``proxy.py``), once armed, swallows the reply to the next script call and
closes the client's connection: the call ran, the client cannot know it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from tests.conformance import runners
from tests.conformance.proxy import RedisProxy

QUEUE = "dropped"


@pytest.fixture
async def proxy(redis_server: EmbeddedServer) -> AsyncIterator[RedisProxy]:
    started = RedisProxy(redis_server.port)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


@pytest.mark.parametrize("runner", ["python", "go", "node"], indirect=True)
async def test_a_lost_reply_writes_each_job_once(
    runner: runners.Runner, proxy: RedisProxy, prefix: str, redis: Redis
) -> None:
    steps: list[dict[str, Any]] = [
        {"do": "enqueue", "task": "echo", "args": ["warm"]},  # connected, scripts loaded
        {"do": "enqueue", "task": "echo", "args": ["generated"]},
        {"do": "enqueue", "task": "echo", "args": ["given"], "options": {"id": "given-1"}},
    ]
    keys = QueueKeys.for_queue(prefix, QUEUE)
    spec = {"url": proxy.url, "prefix": prefix, "queue": QUEUE, "config": {}, "steps": steps[:1]}
    assert "id" in (await runner(spec))[0]
    for step in steps[1:]:
        proxy.armed = True
        [outcome] = await runner({**spec, "steps": [step]})
        assert proxy.dropped, "the proxy swallowed no reply"
        proxy.dropped = 0
        assert "id" in outcome, f"the enqueue failed instead of resending: {outcome}"
        ready = await redis.lrange(keys.ready(5), 0, -1)
        assert ready.count(outcome["id"].encode()) == 1, f"written {ready}"
        assert await redis.hget(keys.job(outcome["id"]), "s") == b"queued"
    assert await redis.llen(keys.notify) == 3, "one wake-up token per job"
