"""A half-open network cut: packets black-holed, no FIN or RST. The worker must notice by
itself (a subscribed connection only listens, so a dead one looks like a quiet one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.store import pubsub
from tests.helpers import wait_until

pytestmark = pytest.mark.real_redis("a network cut through a proxy")


class _Link:
    """One proxied connection: forwarding while set; ``sent`` a marker meanwhile."""

    def __init__(self) -> None:
        self.forwarding = asyncio.Event()
        self.forwarding.set()
        self.marked = False


class BlackHoleProxy:
    """A TCP proxy in front of Redis. ``cut()`` black-holes every connection open at that
    moment, both ways, and keeps its sockets open, as a NAT or firewall that forgot them
    would: nothing arrives, nothing fails. New connections work as before. ``cut(only=
    marker)`` cuts only the connections whose client sent ``marker`` (e.g. ``b"redis-py"``,
    which redis-py's handshake names: the application's, not a Sentinel's or a replica's)."""

    def __init__(self, upstream_port: int, marker: bytes = b"redis-py") -> None:
        self._upstream_port = upstream_port
        self._marker = marker
        self._open: list[_Link] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        """Listen on a free loopback port; the URL to reach Redis through the proxy."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def cut(self, *, only_marked: bool = False) -> int:
        """Black-hole the open connections (only the marked ones); how many."""
        cut = [link for link in self._open if link.marked or not only_marked]
        for link in cut:
            link.forwarding.clear()
        self._open = [link for link in self._open if link not in cut]
        return len(cut)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:  # the server is gone: so is this connection
            writer.close()
            return
        self._writers |= {writer, up_writer}
        link = _Link()
        self._open.append(link)
        await asyncio.gather(
            self._pump(reader, up_writer, link, self._marker), self._pump(up_reader, writer, link)
        )

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        link: _Link,
        marker: bytes | None = None,
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := await source.read(65536):
                if marker is not None and not link.marked and marker in chunk:
                    link.marked = True
                if not link.forwarding.is_set():
                    continue  # black-holed: read and dropped, the socket stays open
                sink.write(chunk)
                await sink.drain()
        if link.forwarding.is_set():
            sink.close()  # (a closed side closes the other, as TCP would)


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[tuple[BlackHoleProxy, str]]:
    """A BlackHoleProxy in front of the suite's server, and the URL through it."""
    black_hole = BlackHoleProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    url = await black_hole.start()
    try:
        yield black_hole, url
    finally:
        await black_hole.close()


async def test_aborts_come_back_after_a_half_open_cut(
    proxy: tuple[BlackHoleProxy, str], redis_url: str, prefix: str, redis: Redis
) -> None:
    """Once took ~10 s (the lease-renewal fallback) for every cancel, for the rest of the
    worker's life: the listener's dead connection went unnoticed. With a lease of 60 s
    (renewals every 20 s), a cancel that lands within seconds came by pub/sub."""
    black_hole, through_proxy = proxy
    app = aioqueue.App(redis_url=through_proxy, prefix=prefix, socket_timeout=1)
    admin = aioqueue.App(redis_url=redis_url, prefix=prefix)  # not through the proxy
    started = asyncio.Event()

    @app.task
    async def long_job() -> None:
        started.set()
        await asyncio.Event().wait()

    channel = app.queue().keys.abort_channel

    async def subscribers() -> int:
        [(_, count)] = await redis.pubsub_numsub(channel)
        return int(count)

    try:
        job = await long_job.enqueue()
        async with app.worker(lease=60):
            await asyncio.wait_for(started.wait(), 5)
            await wait_until(lambda: _at_least(subscribers, 1))
            black_hole.cut()  # the old subscription stays on the server, silent for the worker
            await wait_until(lambda: _at_least(subscribers, 2), timeout=10)  # a new one
            assert await admin.queue().cancel(job.id) is True
            await wait_until(lambda: _cancelled(admin, job.id), timeout=5)
    finally:
        with contextlib.suppress(Exception):
            await app.close()
        await admin.close()


async def test_a_listener_says_redis_answers_nothing(proxy: tuple[BlackHoleProxy, str]) -> None:
    """What the worker's log says first when Redis stalls (SIGSTOP) or the link dies: the
    listener's PING went unanswered, in words a reader can act on."""
    black_hole, through_proxy = proxy
    client: Redis = Redis.from_url(through_proxy)
    channel = client.pubsub()
    try:
        await channel.subscribe("quiet")
        black_hole.cut()
        silent = "Redis answered nothing, not even PING, for 3.\\ds \\(a stalled server"
        with pytest.raises(pubsub.ChannelSilent, match=silent):
            await asyncio.wait_for(pubsub.listen(channel, lambda _: None, lambda: False), 10)
    finally:
        await client.aclose()


async def _at_least(count: object, minimum: int) -> bool:
    assert callable(count)
    return int(await count()) >= minimum


async def _cancelled(app: aioqueue.App, job_id: str) -> bool:
    return await app.queue().job(job_id).status() is aioqueue.JobStatus.CANCELLED
