"""A connection that drops after an enqueue reached Redis but before its reply came back:
every client sends the call again marked as a resend (enqueue.lua's ``resend``), so each
job is written once (one record, one ready entry, one wake-up token), never twice.

A proxy between client and Redis forwards everything, but once armed it swallows the
reply to the next script call and closes the client's connection: the call ran, the
client cannot know it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from tests.conformance import runners

QUEUE = "dropped"


class DroppingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.armed = False
        self.dropped = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        swallow = asyncio.Event()

        async def upstream() -> None:
            while data := await reader.read(65536):
                if self.armed and b"EVAL" in data.upper():
                    self.armed = False
                    swallow.set()
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if swallow.is_set():  # the script ran; its reply never arrives
                    self.dropped += 1
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        with contextlib.suppress(ConnectionError):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def proxy(redis_server: EmbeddedServer) -> AsyncIterator[DroppingProxy]:
    dropping = DroppingProxy(redis_server.port)
    dropping.server = await asyncio.start_server(dropping.handle, "127.0.0.1", 0)
    try:
        yield dropping
    finally:
        dropping.server.close()
        await dropping.server.wait_closed()


@pytest.mark.parametrize("runner", ["python", "go", "node"], indirect=True)
async def test_a_lost_reply_writes_each_job_once(
    runner: runners.Runner, proxy: DroppingProxy, prefix: str, redis: Redis
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
