"""Pull messaging (mailboxes, groups) against bare redis-py Streams on the same server.

    .venv/bin/python -m benchmarks.messaging [--messages 100000] [--quick]

One private redis-server (loopback, no persistence); both sides use the app's own client
and pool. Bodies are small JSON objects ``{"text": "hello", "n": i}``, encoded inside the
timed part on both sides (a bare Stream entry is one field ``body`` holding the JSON), and
the bare readers decode each body too, as the framework's fetch does. Each figure is the
median of 3 repeats, the two sides alternating (which goes first alternates as well),
on a flushed server each time. Tables:

  1. throughput, aioqueue vs bare: publish (``send_many`` in batches vs pipelined XADD;
     single ``send`` from concurrent senders vs concurrent XADD), one group member
     draining (fetch 1000 + ack) vs XREADGROUP COUNT 1000 + XACK, and fan-out (10 members
     vs 10 consumer groups on one stream, deliveries = messages x members); topics:
     ``publish_many``, single ``publish`` from concurrent callers, and subscriber groups
     run by a burst worker in this process (a run per message, or ``batch=100``) vs bare
     consumer groups; and the floor of a task per message (bare consumer groups whose
     messages each run a no-op handler in an asyncio task of their own)
  2. fetch cost: 100 messages at a cursor halfway along a group's log of a small and a
     large size (vs XRANGE after an id), and their ratio (O(log n + k): near 1)
  3. memory per stored message: used_memory delta and MEMORY USAGE of the key

``--quick`` is a smoke run of a few seconds (2,000 messages; fetch at 1k and 20k).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis.asyncio import Redis

REPEATS = 3
SENDERS = 50  # concurrent single senders (below the app's pool of 64 connections)
MEMBERS = 10  # fan-out
FETCHES = 300  # fetches timed per repeat in the fetch-cost table (--quick: 50)
SINGLES = 20_000  # at most this many messages for the one-at-a-time sends
STREAM = "bare:stream"


def bodies(n: int) -> list[dict[str, Any]]:
    return [{"text": "hello", "n": i} for i in range(n)]


def since(started: float) -> float:
    return time.perf_counter() - started


class Bench:
    def __init__(self, app: aioqueue.App, redis: Redis, messages: int, fetches: int) -> None:
        self.app, self.redis, self.n, self.fetches = app, redis, messages, fetches
        self.bodies = bodies(messages)
        self.singles = min(messages, SINGLES)

    async def pair(
        self, ours: Callable[[], Awaitable[float]], bare: Callable[[], Awaitable[float]]
    ) -> tuple[float, float]:
        """Median of REPEATS alternating runs of each side, each on a flushed server."""
        results: dict[int, list[float]] = {0: [], 1: []}
        for repeat in range(REPEATS):
            for side in (0, 1) if repeat % 2 == 0 else (1, 0):
                await self.redis.flushall()
                results[side].append(await (ours, bare)[side]())
        return statistics.median(results[0]), statistics.median(results[1])

    # -- filling -----------------------------------------------------------------------

    async def fill_group(self, group: aioqueue.Group, sender: str, items: list[Any]) -> None:
        for start in range(0, len(items), 1000):
            await group.send_many(sender, items[start : start + 1000])

    async def xadd_batches(self, items: list[Any], batch: int, explicit_ids: bool = False) -> None:
        for start in range(0, len(items), batch):
            async with self.redis.pipeline(transaction=False) as pipe:
                for i in range(start, min(len(items), start + batch)):
                    entry_id = f"{i + 1}-0" if explicit_ids else "*"
                    pipe.xadd(STREAM, {"body": orjson.dumps(items[i])}, id=entry_id)
                await pipe.execute()

    # -- publish -----------------------------------------------------------------------

    async def mailbox_batches(self, batch: int) -> float:
        box, started = self.app.mailbox("pub"), time.perf_counter()
        for start in range(0, self.n, batch):
            await box.send_many(self.bodies[start : start + batch])
        return self.n / since(started)

    async def group_batches(self, batch: int) -> float:
        group = self.app.group("pub")
        await group.join("reader")  # reads nothing during the run: everything is kept
        await group.join("sender")
        started = time.perf_counter()
        for start in range(0, self.n, batch):
            await group.send_many("sender", self.bodies[start : start + batch])
        seconds = since(started)
        assert (await group.info()).size == self.n
        return self.n / seconds

    async def xadd_pipelined(self, batch: int) -> float:
        started = time.perf_counter()
        await self.xadd_batches(self.bodies, batch)
        return self.n / since(started)

    async def concurrent(self, send: Callable[[Any], Awaitable[object]]) -> float:
        async def sender(first: int) -> None:
            for i in range(first, self.singles, SENDERS):
                await send(self.bodies[i])

        started = time.perf_counter()
        await asyncio.gather(*(sender(first) for first in range(SENDERS)))
        return self.singles / since(started)

    async def mailbox_singles(self) -> float:
        return await self.concurrent(self.app.mailbox("pub").send)

    async def topic_singles(self) -> float:
        return await self.concurrent(self.app.topic("pub").publish)

    async def xadd_singles(self) -> float:
        return await self.concurrent(
            lambda body: self.redis.xadd(STREAM, {"body": orjson.dumps(body)})
        )

    # -- draining and fan-out ----------------------------------------------------------

    async def group_drain(self, members: int) -> float:
        group, names = self.app.group("drain"), [f"m{m}" for m in range(members)]
        for name in [*names, "sender"]:  # a caught-up sender has read its own messages
            await group.join(name)
        await self.fill_group(group, "sender", self.bodies)

        async def drain(member: str) -> int:
            count = 0
            while batch := await group.fetch(member, limit=1000):
                count += len(batch)
                await group.ack(member, batch)
            return count

        started = time.perf_counter()
        counts = await asyncio.gather(*(drain(name) for name in names))
        seconds = since(started)
        assert counts == [self.n] * members, counts
        return self.n * members / seconds

    async def streams_drain(self, members: int, *, tasks: bool = False) -> float:
        """Bare consumer groups: XREADGROUP 1000, decode each body, XACK the 1000. With
        ``tasks``, each body goes to a no-op handler in an asyncio task of its own, all
        awaited before the XACK: the floor of any runner that gives each message a task."""
        await self.xadd_batches(self.bodies, 1000)
        names = [f"g{m}" for m in range(members)]
        for name in names:
            await self.redis.xgroup_create(STREAM, name, id="0")
        loop = asyncio.get_running_loop()

        async def handle(body: Any) -> None:
            pass

        async def drain(group: str) -> int:
            count = 0
            while True:
                reply: Any = await self.redis.xreadgroup(group, "c", {STREAM: ">"}, count=1000)
                if not reply:
                    return count
                entries = reply[0][1]
                if tasks:
                    runs = [loop.create_task(handle(orjson.loads(f[b"body"]))) for _, f in entries]
                    await asyncio.wait(runs)
                else:
                    for _, fields in entries:
                        orjson.loads(fields[b"body"])
                count += len(entries)
                await self.redis.xack(STREAM, group, *(entry_id for entry_id, _ in entries))

        started = time.perf_counter()
        counts = await asyncio.gather(*(drain(name) for name in names))
        seconds = since(started)
        assert counts == [self.n] * members, counts
        return self.n * members / seconds

    # -- topics ------------------------------------------------------------------------

    async def topic_publish(self) -> float:
        topic, started = self.app.topic("pub"), time.perf_counter()
        await topic.publish_many(self.bodies)  # (1,000 per call)
        return self.n / since(started)

    async def subscriber_drain(self, groups: int, batch: int | None = None) -> float:
        """``groups`` subscriber groups run by one in-process burst worker (concurrency
        100, no-op handlers; with ``batch``, handlers of lists): deliveries per second,
        from worker start to drained."""
        app = aioqueue.App(redis_url=self.app.redis_url, prefix="bench-sub")
        handled = 0

        def subscribe(group: str) -> None:
            @app.subscriber("drain", group=group, batch=batch)
            async def handle(body: Any) -> None:
                nonlocal handled
                handled += len(body) if batch else 1

        names = [f"g{m}" for m in range(groups)]
        for name in names:
            subscribe(name)
            await app.topic("drain").add_group(name)
        await app.topic("drain").publish_many(self.bodies)
        worker = app.worker(burst=True, concurrency=100, queues=["idle"])
        started = time.perf_counter()
        await worker.run_until_idle()
        seconds = since(started)
        await app.close()
        assert handled == self.n * groups, handled
        return self.n * groups / seconds

    # -- fetch cost --------------------------------------------------------------------

    async def fetch_cost(self, kept: int) -> tuple[float, float]:
        """µs per fetch of 100 at a cursor halfway along ``kept`` messages, each side."""
        await self.redis.flushall()
        group, items = self.app.group("scale", max_messages=0), bodies(kept)
        await group.join("holder")  # keeps everything: its cursor stays at 0
        await group.join("reader")
        await group.join("sender")
        await self.fill_group(group, "sender", items)
        await group.ack("reader", kept // 2)
        assert (await group.info()).size == kept
        await self.xadd_batches(items, 1000, explicit_ids=True)
        after = f"({kept // 2}-0"

        async def ours() -> float:
            started = time.perf_counter()
            for _ in range(self.fetches):
                assert len(await group.fetch("reader", limit=100)) == 100
            return since(started) / self.fetches * 1e6

        async def bare() -> float:
            started = time.perf_counter()
            for _ in range(self.fetches):
                entries: Any = await self.redis.xrange(STREAM, min=after, count=100)
                assert len([orjson.loads(fields[b"body"]) for _, fields in entries]) == 100
            return since(started) / self.fetches * 1e6

        results: dict[int, list[float]] = {0: [], 1: []}
        for repeat in range(REPEATS):
            for side in (0, 1) if repeat % 2 == 0 else (1, 0):
                results[side].append(await (ours, bare)[side]())
        await self.redis.flushall()
        return statistics.median(results[0]), statistics.median(results[1])

    # -- memory ------------------------------------------------------------------------

    async def used_memory(self) -> int:
        info: dict[str, Any] = await self.redis.info("memory")
        return int(info["used_memory"])

    async def memory(self, framework: bool) -> tuple[float, float]:
        """Bytes per message: used_memory delta and MEMORY USAGE of the log / stream."""
        await self.redis.flushall()
        before = await self.used_memory()
        if framework:
            box = self.app.mailbox("memory", max_messages=0)
            for start in range(0, self.n, 1000):
                await box.send_many(self.bodies[start : start + 1000])
            key = box.keys.log
        else:
            await self.xadd_batches(self.bodies, 1000)
            key = STREAM
        delta = await self.used_memory() - before
        usage = int(await self.redis.memory_usage(key, samples=0) or 0)
        return delta / self.n, usage / self.n


def ratio(ours: float, bare: float) -> str:
    return f"{ours / bare:.2f}"


async def run(url: str, messages: int, sizes: tuple[int, int], fetches: int) -> list[str]:
    out: list[str] = []
    async with aioqueue.App(redis_url=url, prefix="bench") as app:
        redis = await app.client()
        bench = Bench(app, redis, messages, fetches)
        rows: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]]
        rows = [
            ("publish: mailbox.send_many, batches of 100 vs XADD pipelined 100",
             lambda: bench.mailbox_batches(100), lambda: bench.xadd_pipelined(100)),
            ("publish: mailbox.send_many, batches of 1000 vs XADD pipelined 1000",
             lambda: bench.mailbox_batches(1000), lambda: bench.xadd_pipelined(1000)),
            ("publish: group.send_many, batches of 100 vs XADD pipelined 100",
             lambda: bench.group_batches(100), lambda: bench.xadd_pipelined(100)),
            ("publish: group.send_many, batches of 1000 vs XADD pipelined 1000",
             lambda: bench.group_batches(1000), lambda: bench.xadd_pipelined(1000)),
            (f"publish: mailbox.send, {SENDERS} concurrent senders vs XADD "
             f"({bench.singles:,} messages)",
             bench.mailbox_singles, bench.xadd_singles),
            ("drain: 1 member, fetch 1000 + ack vs XREADGROUP 1000 + XACK",
             lambda: bench.group_drain(1), lambda: bench.streams_drain(1)),
            (f"fan-out: {MEMBERS} members vs {MEMBERS} consumer groups (deliveries/s)",
             lambda: bench.group_drain(MEMBERS), lambda: bench.streams_drain(MEMBERS)),
            ("publish: topic.publish_many (1000 per call) vs XADD pipelined 1000",
             bench.topic_publish, lambda: bench.xadd_pipelined(1000)),
            (f"publish: topic.publish, {SENDERS} concurrent callers vs XADD "
             f"({bench.singles:,} messages)",
             bench.topic_singles, bench.xadd_singles),
            ("topic drain: 1 subscriber group, a burst worker (concurrency 100, no-op "
             "handler) vs XREADGROUP 1000 + XACK",
             lambda: bench.subscriber_drain(1), lambda: bench.streams_drain(1)),
            ("topic fan-out: 3 subscriber groups, one worker vs 3 consumer groups "
             "(deliveries/s)",
             lambda: bench.subscriber_drain(3), lambda: bench.streams_drain(3)),
            ("floor of a task per message: bare XREADGROUP 1000 + a task per message "
             "+ XACK vs XREADGROUP 1000 + XACK",
             lambda: bench.streams_drain(1, tasks=True), lambda: bench.streams_drain(1)),
            ("topic drain, batch=100: 1 subscriber group taking lists, a burst worker vs "
             "XREADGROUP 1000 + XACK",
             lambda: bench.subscriber_drain(1, 100), lambda: bench.streams_drain(1)),
            ("topic fan-out, batch=100: 3 subscriber groups vs 3 consumer groups",
             lambda: bench.subscriber_drain(3, 100), lambda: bench.streams_drain(3)),
        ]  # fmt: skip
        out += ["| figure (messages/s) | aioqueue | bare Streams | aioqueue / bare |",
                "|---|---:|---:|---:|"]  # fmt: skip
        for label, ours, bare in rows:
            print(f"{label} ...", file=sys.stderr)
            mine, theirs = await bench.pair(ours, bare)
            out.append(f"| {label} | {mine:,.0f} | {theirs:,.0f} | {ratio(mine, theirs)} |")

        costs = {}
        for kept in sizes:
            print(f"fetch cost at {kept:,} kept ...", file=sys.stderr)
            costs[kept] = await bench.fetch_cost(kept)
        small, large = sizes
        out += ["", f"| fetch 100 at a cursor halfway (µs) | {small:,} kept | {large:,} kept "
                "| large / small |", "|---|---:|---:|---:|"]  # fmt: skip
        for side, label in enumerate(("aioqueue group.fetch", "bare XRANGE after an id")):
            a, b = costs[small][side], costs[large][side]
            out.append(f"| {label} | {a:,.0f} | {b:,.0f} | {ratio(b, a)} |")

        print("memory ...", file=sys.stderr)
        memory: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for repeat in range(REPEATS):
            for framework in (True, False) if repeat % 2 == 0 else (False, True):
                memory[framework].append(await bench.memory(framework))
        await redis.flushall()
        figures = {
            side: [statistics.median(m[i] for m in memory[side]) for i in (0, 1)]
            for side in (True, False)
        }
        ours_m, bare_m = figures[True], figures[False]
        out += ["", f"| bytes per stored message ({messages:,}) | aioqueue mailbox "
                "| bare Stream | aioqueue / bare |", "|---|---:|---:|---:|"]  # fmt: skip
        for i, label in enumerate(("INFO used_memory delta", "MEMORY USAGE of the key")):
            out.append(f"| {label} | {ours_m[i]:,.1f} | {bare_m[i]:,.1f} "
                       f"| {ratio(ours_m[i], bare_m[i])} |")  # fmt: skip
    return out


async def server_version(url: str) -> str:
    async with aioqueue.App(redis_url=url) as app:
        info: dict[str, Any] = await (await app.client()).info("server")
        return str(info["redis_version"])


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.messaging",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args()
    messages, sizes = (
        (2_000, (1_000, 20_000)) if args.quick else (args.messages, (10_000, 1_000_000))
    )
    started = time.perf_counter()
    with EmbeddedServer() as server:
        version = asyncio.run(server_version(server.url))
        lines = asyncio.run(run(server.url, messages, sizes, 50 if args.quick else FETCHES))
    print(
        f"aioqueue {aioqueue.__version__}, redis-server {version}, Python "
        f'{platform.python_version()}; {messages:,} messages {{"text": "hello", "n": i}}, '
        f"median of {REPEATS} alternating repeats; {since(started):.0f} s\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
