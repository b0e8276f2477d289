"""Fault injection with real worker processes, real signals and a real Redis server.

DESIGN.md §2: once ``enqueue`` returns, a job is never lost, whatever happens to any
worker; §6: bad input and misbehaving handlers end recorded, and the worker carries on.

Each test starts CLI workers (``python -m aioqueue worker tests.apps.fault_app:app``), injects
one fault, and compares what ran with what was enqueued: every execution of a job is
recorded in Redis by its handler (tests/apps/fault_app.py), so the counts are exact.
``lost`` is the number of acknowledged enqueues that did not end complete with at least one
recorded run; ``duplicates`` the number of runs beyond the first. Each test prints

    faults: <scenario>: lost=0 duplicates=N (in flight at fault <= M)

(visible with ``pytest -s``) before asserting on those numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store import scripts
from aioqueue.store.scripts import leasing
from tests.apps import fault_app
from tests.apps.fault_app import Recorder, Run
from tests.helpers import now, wait_until

pytestmark = pytest.mark.real_redis("worker processes killed, stopped and cut off")

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.apps.fault_app:app"
COMPLETE = b"complete"


# -- worker processes ----------------------------------------------------------------------


class WorkerProcess:
    """A worker started with the CLI. Its log (stderr) is read as it comes, so a chatty
    worker never blocks on a full pipe and a test can wait for a line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.log = bytearray()
        self._reader = asyncio.ensure_future(self._read())

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def _read(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self.log += line

    def logged(self, text: str) -> bool:
        return text.encode() in self.log

    async def wait_logged(self, text: str, timeout: float = 10.0) -> None:
        await wait_until(lambda: now(self.logged(text)), timeout)

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    async def exited(self, timeout: float) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def reap(self) -> None:
        """SIGKILL it if it still runs; in every case wait for it and for its log."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()
        await self._reader


@contextlib.asynccontextmanager
async def worker_process(
    redis_url: str, prefix: str, *options: str
) -> AsyncIterator[WorkerProcess]:
    """A CLI worker process on ``redis_url`` serving ``prefix``, ready to take jobs;
    reaped on the way out, whatever happened in the block."""
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET, *options,
        cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    worker = WorkerProcess(process)
    try:
        await worker.wait_logged(" serving ", timeout=20)
        yield worker
    finally:
        await worker.reap()


@pytest.fixture
async def private_server() -> AsyncIterator[EmbeddedServer]:
    """A Redis server of this test's own: the faults hit every client of a server."""
    server = EmbeddedServer()
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@pytest.fixture
async def closing() -> AsyncIterator[contextlib.AsyncExitStack]:
    """Clean-ups a test registers: every one runs, the last first, however the test ends."""
    async with contextlib.AsyncExitStack() as stack:
        yield stack


def fault_app_on(
    redis_url: str, prefix: str, closing: contextlib.AsyncExitStack
) -> tuple[aioqueue.App, Recorder]:
    """``fault_app.build``, closed (the app, then the recorder) when the test ends."""
    app, recorder = fault_app.build(prefix, redis_url)
    closing.push_async_callback(recorder.close)
    closing.push_async_callback(app.close)
    return app, recorder


# -- counting ------------------------------------------------------------------------------


async def settle(predicate: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """``wait_until`` without failing: the exact assertions that follow say what is wrong."""
    with contextlib.suppress(AssertionError):
        await wait_until(predicate, timeout, interval=0.05)


async def job_states(redis: Redis, queue: aioqueue.Queue, ids: Sequence[str]) -> list[bytes | None]:
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(queue.keys.job(job_id), "s")
        return cast("list[bytes | None]", await pipe.execute())


async def all_complete(redis: Redis, queue: aioqueue.Queue, ids: Sequence[str]) -> bool:
    return all(state == COMPLETE for state in await job_states(redis, queue, ids))


async def run_count_at_least(recorder: Recorder, count: int) -> bool:
    return int(await recorder.client().hlen(recorder.runs_key)) >= count


@dataclass
class Tally:
    """What happened to a set of acknowledged enqueues, from their records and runs."""

    lost: list[str]  # not complete, or complete without a recorded run
    runs: dict[str, int]  # enqueue (the job's ``job`` argument) -> recorded runs

    @property
    def duplicated(self) -> dict[str, int]:
        return {job: count for job, count in self.runs.items() if count > 1}

    @property
    def duplicates(self) -> int:
        return sum(count - 1 for count in self.duplicated.values())


async def tally(
    redis: Redis, queue: aioqueue.Queue, acked: Mapping[str, str], runs: Mapping[str, list[Run]]
) -> Tally:
    """``acked`` maps each acknowledged enqueue (its ``job`` argument) to its job id."""
    names = list(acked)
    states = await job_states(redis, queue, [acked[name] for name in names])
    lost = [name for name, state in zip(names, states, strict=True)
            if state != COMPLETE or not runs.get(name)]  # fmt: skip
    return Tally(lost, {name: len(runs.get(name, ())) for name in names})


def report(scenario: str, result: Tally, in_flight: int, details: str = "") -> None:
    print(  # noqa: T201 - the per-scenario numbers, for the report (pytest -s)
        f"faults: {scenario}: lost={len(result.lost)} duplicates={result.duplicates} "
        f"(in flight at fault <= {in_flight}){details and '; ' + details}",
        flush=True,
    )


async def job_records(redis: Redis, queue: aioqueue.Queue) -> dict[str, list[str]]:
    """Every job record of the queue, by the ``job`` argument of its payload."""
    records: dict[str, list[str]] = {}
    prefix = queue.keys.job_prefix
    async for key in redis.scan_iter(match=f"{prefix}*", count=1000):
        payload = await redis.hget(key, "p")
        if payload:
            name = orjson.loads(payload)["a"][0]
            records.setdefault(name, []).append(key.decode()[len(prefix) :])
    return records


async def recreated_after_running(
    redis: Redis, queue: aioqueue.Queue, acked: Mapping[str, str], runs: Mapping[str, list[Run]]
) -> set[str]:
    """Enqueues whose job record was written (again) after the job had started: an enqueue
    that the client sent a second time (its reply was lost) after the job had finished."""
    found = set()
    for name, job_id in acked.items():
        job_runs = runs.get(name, [])
        if len(job_runs) > 1:
            enqueued_ms = int(await redis.hget(queue.keys.job(job_id), "et") or 0)
            if enqueued_ms > job_runs[0].at * 1000:
                found.add(name)
    return found


async def burned_attempts(
    redis: Redis, queue: aioqueue.Queue, acked: Mapping[str, str], runs: Mapping[str, list[Run]]
) -> int:
    """Attempts counted without a run: leases taken by a call whose reply was lost."""
    burned = 0
    for name, job_id in acked.items():
        attempts = int(await redis.hget(queue.keys.job(job_id), "n") or 0)
        burned += max(0, attempts - len(runs.get(name, ())))
    return burned


class Producer:
    """Enqueues ``work`` jobs one after another until stopped, each with a job id that
    aioqueue generates (as most producers do). An enqueue that raises EnqueueUnconfirmed
    is retried with the job id the error carries, as its message says to do."""

    RETRIES = 30

    def __init__(self, queue: aioqueue.Queue, tag: str, seconds: float) -> None:
        self.queue, self.tag, self.seconds = queue, tag, seconds
        self.acked: dict[str, str] = {}  # call (the job's ``job`` argument) -> job id
        self.failed: list[str] = []  # calls never confirmed: written or not, nobody knows
        self.retried = 0  # calls confirmed only by a retry
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        for number in range(1_000_000):
            if self._stop.is_set():
                return
            name = f"{self.tag}{number:06d}"
            job_id = await self._enqueue(name)
            if job_id is None:
                self.failed.append(name)
            else:
                self.acked[name] = job_id
            await asyncio.sleep(0.002)  # pacing: a steady load, not a wait for anything

    async def _enqueue(self, name: str) -> str | None:
        call = self.queue.enqueue("work", name, self.seconds)
        for attempt in range(self.RETRIES):
            try:
                job = await call
            except aioqueue.EnqueueUnconfirmed as exc:
                call = call.options(id=exc.job_id)  # the same job, whatever happened
                await asyncio.sleep(0.1)  # a producer's retry pause while Redis is away
            else:
                self.retried += attempt > 0
                return job.id
        return None

    def summary(self) -> str:
        return (
            f"{len(self.acked)} enqueues confirmed ({self.retried} by a retry), "
            f"{len(self.failed)} never confirmed"
        )

    async def acked_at_least(self, count: int) -> bool:
        return len(self.acked) >= count


# -- 1. SIGKILL mid-batch ------------------------------------------------------------------

JOBS = 2000
CONCURRENCY = 50


async def test_sigkill_mid_batch_loses_nothing(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A worker SIGKILLed in the middle of 2,000 jobs: its leases expire, a second worker
    reclaims them and finishes. Only jobs that were active at the kill may run twice."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    ids = [f"k{n:04d}" for n in range(JOBS)]
    for start in range(0, JOBS, 250):
        chunk = ids[start : start + 250]
        await asyncio.gather(
            *(queue.enqueue("work", job_id, 0.02).options(id=job_id) for job_id in chunk)
        )
    async with worker_process(redis_url, prefix, "-c", str(CONCURRENCY), "--lease", "1") as victim:
        await wait_until(lambda: run_count_at_least(recorder, JOBS // 3), timeout=30)
        victim.signal(signal.SIGKILL)
        assert await victim.exited(timeout=10) == -signal.SIGKILL
    # No worker runs now: the active set is exactly what the dead worker held.
    active: list[bytes] = await redis.zrange(queue.keys.active, 0, -1)  # type: ignore[assignment]
    in_flight = {raw.decode() for raw in active}
    ran_before = await recorder.runs()
    assert 0 < len(ran_before) < JOBS, "the kill was not mid-batch"

    async with app.worker(concurrency=CONCURRENCY, lease=1, reclaim_interval=0.1):
        await settle(lambda: all_complete(redis, queue, ids), timeout=30)
    result = await tally(redis, queue, {i: i for i in ids}, await recorder.runs())
    report("sigkill", result, len(in_flight))

    assert result.lost == []
    assert set(result.duplicated) <= in_flight
    assert set(result.duplicated) <= set(ran_before)  # it had started before the kill
    assert max(result.runs.values()) <= 2
    # Active at the kill: at most `concurrency` running, plus those finished whose
    # acknowledgement had not landed (one ack round trip's worth, a few at most).
    assert len(in_flight) <= 2 * CONCURRENCY
    assert await queue.counts() == aioqueue.QueueCounts(0, 0, 0, 0)


async def test_sigkill_mid_group_and_mid_workflow_loses_and_double_counts_nothing(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A worker SIGKILLed while it runs jobs of four groups and the 200 children of a
    chord: the second worker finishes every one; each group's jobs ran one at a time in
    enqueue order (each first started after the one before it ended), and the chord's
    parent counted every child exactly once, re-run ones included, and ran once."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    groups = {g: [f"g{g}-{n:02d}" for n in range(25)] for g in range(4)}
    for n in range(25):  # interleaved, as producers would
        for g, jobs in groups.items():
            call = queue.enqueue("in_order", jobs[n], 0.02)
            await call.options(id=jobs[n], group=f"customer-{g}")
    children = [f"c{n:03d}" for n in range(200)]
    workflow = await aioqueue.chord(
        [queue.enqueue("work", child, 0.05) for child in children],
        queue.enqueue("collect", "parent"),
    )
    async with worker_process(redis_url, prefix, "-c", "20", "--lease", "1") as victim:
        await wait_until(lambda: run_count_at_least(recorder, 100), timeout=30)
        victim.signal(signal.SIGKILL)
        assert await victim.exited(timeout=10) == -signal.SIGKILL
    active: list[bytes] = await redis.zrange(queue.keys.active, 0, -1)  # type: ignore[assignment]
    assert active, "the kill was not mid-run"

    async with app.worker(concurrency=20, lease=1, reclaim_interval=0.1):
        results = await workflow.result(timeout=60)
        every_group_job = [job for jobs in groups.values() for job in jobs]
        await settle(lambda: all_complete(redis, queue, every_group_job), timeout=30)
    runs = await recorder.runs()
    assert sorted(results) == children  # each child's result, once
    status = await workflow.status()
    assert (status.children, status.complete, status.failed) == (200, 200, 0)
    assert len(runs["parent"]) == 1
    ends = await recorder.ends()
    for jobs in groups.values():
        states = await job_states(redis, queue, jobs)
        assert all(job in ends for job in jobs), f"a group job never finished: {states}"
        for before, after in itertools.pairwise(jobs):
            assert runs[after][0].at >= ends[before], f"{after} started before {before} ended"
    reruns = sum(len(job_runs) - 1 for job_runs in runs.values())
    print(  # noqa: T201 - the scenario's numbers, for the report (pytest -s)
        f"faults: sigkill mid-group/workflow: lost=0 reruns={reruns} (in flight {len(active)})"
    )


async def test_sigkill_mid_rate_limit_loses_nothing_and_gives_back_its_slots(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A worker SIGKILLed while it runs jobs of a queue capped at 5 running and 200 starts
    a second: its leases hold the 5 slots until they expire, then a second worker gets them
    back and finishes every job. Only jobs in flight at the kill run twice."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue("limited")
    await queue.set_limits(concurrency=5, rate="200/s", burst=5)
    ids = [f"r{n:03d}" for n in range(300)]
    await queue.enqueue_many(
        queue.enqueue("work", job_id, 0.02).options(id=job_id) for job_id in ids
    )
    options = ("-q", "limited", "-c", "20", "--lease", "1")
    async with worker_process(redis_url, prefix, *options) as victim:
        await wait_until(lambda: run_count_at_least(recorder, 60), timeout=30)
        victim.signal(signal.SIGKILL)
        assert await victim.exited(timeout=10) == -signal.SIGKILL
    active: list[bytes] = await redis.zrange(queue.keys.active, 0, -1)  # type: ignore[assignment]
    in_flight = {raw.decode() for raw in active}
    assert 0 < len(in_flight) <= 5  # the cap held in the dead worker too
    async with app.worker(concurrency=20, lease=1, reclaim_interval=0.1, queues=["limited"]):
        await settle(lambda: all_complete(redis, queue, ids), timeout=30)
    result = await tally(redis, queue, {i: i for i in ids}, await recorder.runs())
    report("sigkill mid-rate-limit", result, len(in_flight))
    assert result.lost == []
    assert set(result.duplicated) <= in_flight
    assert (await queue.counts()).active == 0


async def test_sigkill_mid_stream_loses_no_topic_message(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A worker SIGKILLed in the middle of 2,000 messages of a topic: what it held stays in
    the subscriber group's pending list until its lease runs out, then a second worker
    claims it. Only messages pending at the kill may run twice; none is lost."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    topic = app.topic("faults")
    names = [f"m{n:04d}" for n in range(JOBS)]
    await topic.add_group("g")
    await topic.publish_many({"m": name} for name in names)
    async with worker_process(redis_url, prefix, "-c", str(CONCURRENCY), "--lease", "1") as victim:
        await wait_until(lambda: run_count_at_least(recorder, JOBS // 3), timeout=30)
        victim.signal(signal.SIGKILL)
        assert await victim.exited(timeout=10) == -signal.SIGKILL
    pending_at_kill = (await redis.xpending(topic.keys.log, "g"))["pending"]
    ran_before = await recorder.runs()
    assert 0 < len(ran_before) < JOBS, "the kill was not mid-stream"

    async def processed() -> bool:
        group = (await topic.info()).groups["g"]
        return group.pending == 0 and group.lag == 0

    async with app.worker(concurrency=CONCURRENCY, lease=1):
        await settle(processed, timeout=30)
    runs = await recorder.runs()
    lost = [name for name in names if not runs.get(name)]
    duplicated = {name for name, name_runs in runs.items() if len(name_runs) > 1}
    print(  # noqa: T201 - the scenario's numbers, for the report (pytest -s)
        f"\n[topic sigkill] lost {len(lost)}, ran twice {len(duplicated)}, "
        f"pending at the kill {pending_at_kill}"
    )
    assert lost == []
    assert await processed()
    assert duplicated <= set(ran_before)
    assert len(duplicated) <= pending_at_kill
    info = await topic.info()
    assert (info.dead, info.size) == (0, 0)  # all processed: trimmed


# -- 2. SIGTERM ----------------------------------------------------------------------------

GRACE = 1.5
LONG_LEASE = 30


async def test_sigterm_finishes_or_requeues_running_jobs(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """SIGTERM: jobs that finish within the grace period complete; the rest are put back
    at once (queued, attempt not counted) and run on the next worker long before their
    lease (30 s) could have expired."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    long_ids = [f"long{n}" for n in range(4)]  # first run: 60 s, far past the grace
    short_ids = [f"short{n}" for n in range(6)]  # 0.5 s: done within the grace
    waiting_ids = [f"wait{n}" for n in range(5)]  # beyond the worker's 10 slots
    for job_id in long_ids:
        await queue.enqueue("hang_first_run", job_id, 60.0).options(id=job_id)
    for job_id in short_ids:
        await queue.enqueue("work", job_id, 0.5).options(id=job_id)
    for job_id in waiting_ids:
        await queue.enqueue("ok", job_id).options(id=job_id)
    running = long_ids + short_ids
    options = ("-c", "10", "--lease", str(LONG_LEASE), "--grace", str(GRACE))
    async with worker_process(redis_url, prefix, *options) as first:
        await wait_until(lambda: run_count_at_least(recorder, len(running)), timeout=15)
        loop = asyncio.get_running_loop()
        signalled = loop.time()
        first.signal(signal.SIGTERM)
        assert await first.exited(timeout=GRACE + 10) == 0
        stop_took = loop.time() - signalled
    assert first.logged(f"cancelling {len(long_ids)} job(s) still running")

    # Right after the exit: no lease left to expire, the interrupted jobs are queued.
    assert await job_states(redis, queue, short_ids) == [COMPLETE] * len(short_ids)
    put_back = long_ids + waiting_ids
    assert await job_states(redis, queue, put_back) == [b"queued"] * len(put_back)
    for job_id in long_ids:
        assert (await queue.job(job_id).info()).attempts == 0  # not counted
    assert await redis.zcard(queue.keys.active) == 0
    assert not set(await recorder.runs()) & set(waiting_ids)  # none taken after SIGTERM

    all_ids = running + waiting_ids
    async with worker_process(redis_url, prefix, "-c", "10", "--lease", str(LONG_LEASE)) as second:
        restarted = loop.time()
        await settle(lambda: all_complete(redis, queue, all_ids), timeout=10)
        took = loop.time() - restarted
    runs = await recorder.runs()
    result = await tally(redis, queue, {i: i for i in all_ids}, runs)
    report("sigterm", result, len(running))

    assert result.lost == []
    assert stop_took < GRACE + 3
    assert took < LONG_LEASE / 3  # promptly, not after the lease
    assert result.duplicated == dict.fromkeys(long_ids, 2)
    for job_id in long_ids:
        again = runs[job_id][1]
        assert (again.pid, again.attempt) == (second.pid, 1)  # elsewhere; not counted
        assert await queue.job(job_id).result(timeout=1) == {"pid": second.pid, "attempt": 1}
    assert {runs[i][0].pid for i in short_ids} == {first.pid}


# -- 3. Redis restarted --------------------------------------------------------------------


async def test_redis_restart_under_load_loses_no_acknowledged_enqueue(
    prefix: str, closing: contextlib.AsyncExitStack
) -> None:
    """Redis (appendonly, fsync always) is SIGKILLed and restarted while a producer enqueues
    and a worker process runs jobs: every enqueue that returned runs; the same worker
    process carries on; the scripts, gone with the restart, are loaded again (NOSCRIPT)."""
    server = EmbeddedServer(appendonly=True)
    await asyncio.to_thread(server.start)
    closing.push_async_callback(asyncio.to_thread, server.stop)
    app, recorder = fault_app_on(server.url, prefix, closing)
    queue = app.queue()
    admin = Redis.from_url(server.url)
    closing.push_async_callback(admin.aclose)
    producer = Producer(queue, "r", 0.01)
    closing.push_async_callback(producer.stop)
    async with worker_process(server.url, prefix, "-c", "20", "--lease", "2") as worker:
        producer.start()
        await wait_until(lambda: run_count_at_least(recorder, 100), timeout=15)
        await asyncio.to_thread(server.kill)
        await asyncio.sleep(0.5)  # the outage: let producer and worker run into it
        await asyncio.to_thread(server.start)
        after_restart = len(producer.acked)
        await wait_until(lambda: producer.acked_at_least(after_restart + 200), timeout=20)
        await producer.stop()
        acked_ids = list(producer.acked.values())
        await settle(lambda: all_complete(admin, queue, acked_ids), timeout=30)
        assert worker.alive  # it was never restarted
        worker_pid = worker.pid
    runs = await recorder.runs()
    result = await tally(admin, queue, producer.acked, runs)
    report("redis-restart", result, 20, producer.summary())

    assert result.lost == []
    late = list(producer.acked)[after_restart:]
    assert {runs[name][-1].pid for name in late} == {worker_pid}
    errors = await admin.info("errorstats")
    assert errors.get("errorstat_NOSCRIPT", {}).get("count", 0) >= 1
    loaded = await admin.script_exists(*(script.sha for script in scripts.ALL_SCRIPTS))
    reloaded = {s.name for s, ok in zip(scripts.ALL_SCRIPTS, loaded, strict=True) if ok}
    assert {"enqueue", "ack"} <= reloaded  # and the worker's intake: takes, or offers
    assert reloaded & {"take", "idle"}, reloaded
    # Calls that raised may or may not have landed; none ran twice without cause.
    assert max(result.runs.values()) <= 2


# -- 4. connections killed -----------------------------------------------------------------


async def test_client_kill_repeatedly_under_load(
    prefix: str, private_server: EmbeddedServer, closing: contextlib.AsyncExitStack
) -> None:
    """``CLIENT KILL TYPE normal`` every 100 ms while a producer enqueues and a worker
    process runs jobs: nothing acknowledged is lost, and the client's retries of an
    enqueue whose reply was lost never make a second job of it."""
    url = private_server.url
    app, recorder = fault_app_on(url, prefix, closing)
    queue = app.queue()
    admin = Redis.from_url(url)
    closing.push_async_callback(admin.aclose)
    producer = Producer(queue, "c", 0.005)
    closing.push_async_callback(producer.stop)
    kills = killed = 0
    async with worker_process(url, prefix, "-c", "20", "--lease", "2") as worker:
        producer.start()
        await wait_until(lambda: run_count_at_least(recorder, 50), timeout=15)
        for _ in range(20):
            killed += int(
                await admin.execute_command(  # type: ignore[no-untyped-call]
                    "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
                )
            )
            kills += 1
            await asyncio.sleep(0.1)  # let the load run between two kills
        await producer.stop()
        acked_ids = list(producer.acked.values())
        # A take whose reply was lost leaves its jobs leased to nobody: they come back
        # when that lease expires (2 s) and a reclaim pass runs (every 5 s).
        await settle(lambda: all_complete(admin, queue, acked_ids), timeout=30)
        assert worker.alive
    runs = await recorder.runs()
    result = await tally(admin, queue, producer.acked, runs)
    records = await job_records(admin, queue)
    recreated = await recreated_after_running(admin, queue, producer.acked, runs)
    burned = await burned_attempts(admin, queue, producer.acked, runs)
    report(
        "client-kill", result, 20,
        f"{producer.summary()}, {killed} connections killed, {len(recreated)} re-created "
        f"after running by an enqueue retry, {burned} attempts counted without a run",
    )  # fmt: skip

    assert killed > kills  # each kill hit the worker's and the producer's connections
    assert result.lost == []
    assert set(producer.acked) <= set(records)  # one record per enqueue, no more
    assert set(records) <= set(producer.acked) | set(producer.failed)
    assert {name: ids for name, ids in records.items() if len(ids) > 1} == {}
    # A second run is allowed after a lease expired (attempt 2: the connection trouble
    # stalled the worker past its lease); any other must be the enqueue-retry bug.
    assert {name for name in result.duplicated if runs[name][-1].attempt == 1} <= recreated
    if recreated:  # a race: see the deterministic test_enqueue_reply_lost_... below
        pytest.xfail(f"BUG: enqueue retried after the job finished ran it again: {recreated}")


# -- 4b. one reply lost, on purpose --------------------------------------------------------


class LossyProxy:
    """A TCP proxy in front of Redis that loses one reply on demand, as a connection that
    drops at the wrong instant does: armed with a marker, it throws away the reply to the
    next request that contains it (or the next reply that contains it) and cuts that
    connection. With ``hold_reconnects``, new connections then wait until ``release()``:
    the client's retry is held back while the rest of the system moves on."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._marker: bytes | None = None
        self._reply_marker: bytes | None = None
        self._hold = False
        self._open = asyncio.Event()
        self._open.set()
        self.lost = asyncio.Event()  # a reply was thrown away
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._streams: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    def arm(
        self,
        request: bytes | None = None,
        *,
        reply: bytes | None = None,
        hold_reconnects: bool = False,
    ) -> None:
        self._marker, self._reply_marker, self._hold = request, reply, hold_reconnects

    def release(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        for stream in self._streams:  # a handler cancelled before it ran, or mid-cleanup
            stream.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._streams.add(writer)
        handler = asyncio.ensure_future(self._serve(reader, writer))
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # held: a client's reconnection waits here
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self._upstream_port)
            self._streams.add(upstream)
            lose = asyncio.Event()
            pumps = [
                asyncio.ensure_future(self._requests(reader, upstream, lose)),
                asyncio.ensure_future(self._replies(up_reader, writer, lose)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        except OSError:
            pass
        finally:
            streams = [stream for stream in (writer, upstream) if stream is not None]
            for stream in streams:
                stream.close()
            for stream in streams:
                with contextlib.suppress(OSError):
                    await stream.wait_closed()
                self._streams.discard(stream)

    async def _requests(
        self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, lose: asyncio.Event
    ) -> None:
        while chunk := await reader.read(65536):
            if self._marker is not None and self._marker in chunk:
                self._marker = None
                lose.set()
                if self._hold:
                    self._open.clear()
            upstream.write(chunk)
            await upstream.drain()

    async def _replies(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lose: asyncio.Event
    ) -> None:
        while chunk := await up_reader.read(65536):
            if self._reply_marker is not None and self._reply_marker in chunk:
                self._reply_marker = None
                lose.set()
            if lose.is_set():
                self.lost.set()
                return  # the reply goes down with the connection
            writer.write(chunk)
            await writer.drain()


async def lossy_proxy(redis_url: str, closing: contextlib.AsyncExitStack) -> tuple[LossyProxy, str]:
    """A LossyProxy in front of ``redis_url`` and its URL; closed when the test ends (after
    the clients registered later, which close first)."""
    proxy = LossyProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    url = await proxy.start()
    closing.push_async_callback(proxy.close)
    return proxy, url


def script_sha(name: str) -> bytes:
    (script,) = (s for s in scripts.ALL_SCRIPTS if s.name == name)
    return script.sha.encode()


async def test_enqueue_reply_lost_after_the_job_ran_does_not_run_it_twice(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """One ``enqueue`` call, whose reply is lost after Redis ran it. redis-py sends it
    again (the App's client retries on connection errors); by then a worker has run the
    job. The job must not run a second time: nobody enqueued it twice. (Were the call to
    raise EnqueueUnconfirmed instead, the producer retries as the error says, with the
    job's id: that must not run it twice either.)"""
    _, recorder = fault_app_on(redis_url, prefix, closing)
    proxy, url = await lossy_proxy(redis_url, closing)
    producer, _ = fault_app_on(url, prefix, closing)
    queue = producer.queue()
    async with worker_process(redis_url, prefix):
        await producer.client()  # connected, scripts loaded: only the enqueue is armed
        proxy.arm(script_sha("enqueue"), hold_reconnects=True)  # its one request
        call = asyncio.ensure_future(_enqueue_as_told(queue.enqueue("ok", "once")))
        try:
            await wait_until(lambda: now(proxy.lost.is_set()), timeout=5)
            await wait_until(lambda: _job_of_call_complete(redis, queue, "once"), timeout=10)
            proxy.release()  # now the client's retry reaches Redis
            job = await asyncio.wait_for(call, timeout=10)
            # Re-created by the retry, the job is queued again now: let it run if it does.
            await settle(lambda: all_complete(redis, queue, [job.id]), timeout=5)
        finally:
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
    runs = await recorder.runs()
    result = await tally(redis, queue, {"once": job.id}, runs)
    report("enqueue-reply-lost", result, 1)
    assert result.lost == []
    assert result.runs == {"once": 1}


async def _enqueue_as_told(call: aioqueue.EnqueueCall[Any]) -> aioqueue.Job[Any]:
    try:
        return await call
    except aioqueue.EnqueueUnconfirmed as exc:
        return await call.options(id=exc.job_id)


async def _job_of_call_complete(redis: Redis, queue: aioqueue.Queue, name: str) -> bool:
    records = await job_records(redis, queue)
    return len(records.get(name, [])) == 1 and await all_complete(redis, queue, records[name])


async def test_take_reply_lost_does_not_burn_the_only_attempt(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A worker's take whose reply is lost: the job it leased must still run (here it has
    one attempt only), without waiting for its lease to expire."""
    proxy, url = await lossy_proxy(redis_url, closing)
    app, recorder = fault_app_on(url, prefix, closing)  # the worker's side of the proxy
    producer, _ = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    async with app.worker(lease=1, reclaim_interval=0.1, idle_wait=0.5):
        proxy.arm(reply=b'"burned"')  # the reply of the take that leases the job
        job = await producer.queue().enqueue("echo", "burned", 1)
        await wait_until(lambda: now(proxy.lost.is_set()), timeout=5)
        await settle(lambda: _all_finished(queue, [job.id]), timeout=5)
    info = await queue.job(job.id).info()
    runs = await recorder.runs()
    result = await tally(redis, queue, {"burned": job.id}, runs)
    report("take-reply-lost", result, 1, f"ended {info.status}, error {info.error}")
    assert result.lost == []
    assert info.status is aioqueue.JobStatus.COMPLETE


# -- 5. CLIENT PAUSE longer than the lease -------------------------------------------------

PAUSE_MS = 3000


class PauseThenRun:
    """Stands in for a Redis client in ``leasing.reclaim``: sends ``CLIENT PAUSE`` and the
    script in one write, so the script is the first command Redis postpones and the first
    it runs when the pause ends (it serves postponed clients in order)."""

    def __init__(self, redis: Redis, pause_ms: int) -> None:
        self._redis, self._pause_ms = redis, pause_ms

    async def evalsha(self, *args: Any) -> Any:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("CLIENT", "PAUSE", self._pause_ms, "ALL")
            pipe.evalsha(*args)
            _, reply = await pipe.execute()
        return reply


async def test_client_pause_past_the_lease_rejects_the_stale_ack(
    prefix: str, private_server: EmbeddedServer, closing: contextlib.AsyncExitStack
) -> None:
    """The server pauses every client for 3 s while a job runs under a 1 s lease. When the
    pause ends, the lease is found expired and reclaimed (first in line: see PauseThenRun,
    which plays another worker's reclaim pass), the job runs on a second worker, and the
    first worker's late acknowledgement is refused: the record keeps the second result."""
    url = private_server.url
    app, recorder = fault_app_on(url, prefix, closing)
    queue = app.queue()
    admin = Redis.from_url(url)
    closing.push_async_callback(admin.aclose)
    # One slot each: the worker running the stalled job cannot take it back itself.
    async with (
        worker_process(url, prefix, "-c", "1", "--lease", "1") as one,
        worker_process(url, prefix, "-c", "1", "--lease", "1") as other,
    ):
        job = await queue.enqueue("hang_first_run", "stalled", 4.0).options(id="stalled")
        await wait_until(lambda: run_count_at_least(recorder, 1), timeout=10)
        (first_run,) = (await recorder.runs())["stalled"]
        stale, fresh = (one, other) if first_run.pid == one.pid else (other, one)
        await admin.ping()  # connected: the pause goes out at once
        paused = asyncio.ensure_future(
            leasing.reclaim(
                cast("Redis", PauseThenRun(admin, PAUSE_MS)), queue.keys,
                limit=100, default_max_attempts=3,
            )
        )  # fmt: skip
        # Enqueued as the pause starts: most calls wait for it to end; the few that got
        # in before it may be active on the other worker then, and be reclaimed too.
        names = [f"p{n}" for n in range(20)]
        jobs = await asyncio.gather(*(queue.enqueue("ok", name) for name in names))
        reclaimed = await paused
        assert reclaimed.requeued >= 1
        assert await job.result(timeout=10) == {"pid": fresh.pid, "attempt": 2}
        await stale.wait_logged("lease lost while running", timeout=10)
        await stale.wait_logged("lease lost before its complete was recorded", timeout=10)
        acked = {"stalled": job.id} | {n: j.id for n, j in zip(names, jobs, strict=True)}
        await settle(lambda: all_complete(admin, queue, list(acked.values())), timeout=10)
    runs = await recorder.runs()
    result = await tally(admin, queue, acked, runs)
    report("client-pause", result, reclaimed.requeued)

    assert result.lost == []
    assert result.duplicated["stalled"] == 2
    assert result.duplicates <= reclaimed.requeued
    for name in result.duplicated:  # each ran again only after its lease was reclaimed
        assert runs[name][-1].attempt == 2, name
    assert [run.pid for run in runs["stalled"]] == [stale.pid, fresh.pid]
    info = await job.info()  # the stale worker's result never replaced the later one
    assert info.result() == {"pid": fresh.pid, "attempt": 2}
    assert info.attempts == 2


# -- 6. misbehaving handlers ---------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    status: aioqueue.JobStatus
    error: str
    attempts: int = 1
    min_gap: float = 0.0  # seconds between the starts of two attempts (timeout + backoff)


DEAD, FAILED = aioqueue.JobStatus.DEAD, aioqueue.JobStatus.FAILED
HANDLER_CASES: dict[str, Expected] = {
    "raises": Expected(DEAD, "ValueError", attempts=3, min_gap=0.4),
    "raises_never_retry": Expected(DEAD, "KeyError"),
    "raises_no_dead_letter": Expected(FAILED, "RuntimeError"),
    "raises_base_exception": Expected(DEAD, "Sentinel"),
    "raises_system_exit": Expected(DEAD, "SystemExit"),
    "asks_retry": Expected(DEAD, "Retry", attempts=2, min_gap=0.3),
    "hangs": Expected(DEAD, "TimeoutError", attempts=2, min_gap=0.5 + 0.2),
    "swallows_cancellation": Expected(DEAD, "HandlerTimeout"),
    "ignores_cancellation": Expected(DEAD, "HandlerTimeout"),
    "blocks_loop": Expected(DEAD, "HandlerTimeout"),
    "sync_hangs": Expected(DEAD, "HandlerTimeout"),  # when its thread returns
}


async def test_misbehaving_handlers_in_a_worker_process(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """Handlers that raise (Exceptions and BaseExceptions, SystemExit included), hang past
    their timeout, swallow or ignore cancellation, or block the event loop: each job ends
    as its task's policy says, and the same worker process then runs a good job."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    async with worker_process(
        redis_url, prefix, "-c", "20", "--lease", "3", "--grace", "1"
    ) as worker:
        for task in HANDLER_CASES:
            await queue.enqueue(task, task).options(id=task)
        await settle(lambda: _all_finished(queue, list(HANDLER_CASES)), timeout=20)
        good = await queue.enqueue("ok", "good").options(id="good")
        assert await good.result(timeout=5) == "ok good"
        assert worker.alive
        worker.signal(signal.SIGTERM)  # it still stops cleanly, abandoned handler and all
        assert await worker.exited(timeout=10) == 0
    runs = await recorder.runs()
    infos = {task: await queue.job(task).info() for task in HANDLER_CASES}
    dead = {info.id for info in await queue.dead_jobs()}
    result = Tally(
        [task for task, info in infos.items() if info.status is not HANDLER_CASES[task].status],
        dict.fromkeys(HANDLER_CASES, 1),  # a failed attempt run again is the policy
    )
    report("handlers", result, len(HANDLER_CASES))

    for task, expected in HANDLER_CASES.items():
        info = infos[task]
        assert info.error is not None, task
        assert (task, info.status, info.error.type) == (task, expected.status, expected.error)
        assert info.attempts == expected.attempts, task
        assert len(runs[task]) == expected.attempts, task
        assert (task in dead) is (expected.status is DEAD)
        starts = [run.at for run in runs[task]]
        for before, after in itertools.pairwise(starts):
            assert expected.min_gap <= after - before < expected.min_gap + 2.0, task


async def _all_finished(queue: aioqueue.Queue, ids: Sequence[str]) -> bool:
    for job_id in ids:
        if not (await queue.job(job_id).status()).finished:
            return False
    return True


# -- 7. poison written into the queue's keys -----------------------------------------------


async def push_raw_job(redis: Redis, queue: aioqueue.Queue, job_id: str, payload: bytes) -> None:
    """A job record and ready entry written by a third party, not through enqueue."""
    keys = queue.keys
    await redis.hset(
        keys.job(job_id), mapping={"s": "queued", "p": payload, "n": 0, "m": 0, "pr": 5}
    )
    await redis.rpush(keys.ready(5), job_id)
    await redis.rpush(keys.notify, 1)


def raw_payload(task: str, body: bytes) -> bytes:
    """A payload in the wire format with ``body`` as its args list, spliced in as bytes."""
    return b'{"v":1,"t":"%s","a":%s,"k":{}}' % (task.encode(), body)


POISON_JOBS: dict[str, tuple[bytes, str]] = {  # job id -> (payload, error type)
    "bad-json": (b'{"v":1,"t":"ok","a":["bad-json"', "PayloadError"),
    "non-utf8-payload": (b"\xff\xfe{\x80}", "PayloadError"),
    "unknown-task": (raw_payload("no_such_task", b'["unknown-task"]'), "UnknownTask"),
    "wrong-args": (raw_payload("ok", b'["wrong-args", 1, 2]'), "TypeError"),
    "deep-json": (raw_payload("echo", b'["deep-json", ' + b"[" * 5000 + b"]" * 5000 + b"]"),
                  "PayloadError"),
}  # fmt: skip
FOREIGN_ENTRY = b"\xff\xfe\x80 not an id"


async def test_poison_in_the_queue_keys_goes_dead_with_raw_bytes(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """Bytes a third party wrote straight into the queue's keys: each ends in the dead set
    with its raw bytes, and the good jobs queued behind them complete (one slot, so they
    really are behind)."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    for job_id, (payload, _) in POISON_JOBS.items():
        await push_raw_job(redis, queue, job_id, payload)
    await redis.rpush(queue.keys.ready(5), FOREIGN_ENTRY)  # no job record at all
    await redis.set(queue.keys.job("stringy"), "not a hash")  # a job key of the wrong type
    await redis.rpush(queue.keys.ready(5), "stringy")
    await redis.rpush(queue.keys.notify, 1, 1)
    good = {f"good{n}": await queue.enqueue("ok", f"good{n}") for n in range(5)}
    poisoned = len(POISON_JOBS) + 2
    async with worker_process(redis_url, prefix, "-c", "1", "--lease", "3") as worker:
        ids = [job.id for job in good.values()]
        await settle(lambda: all_complete(redis, queue, ids), timeout=15)
        await settle(lambda: _dead_count_is(queue, poisoned), timeout=5)
        assert worker.alive
    result = await tally(redis, queue, {n: j.id for n, j in good.items()}, await recorder.runs())
    report("poison", result, poisoned)

    assert result.lost == []
    assert result.duplicated == {}
    dead = {info.id: info for info in await queue.dead_jobs()}
    assert len(dead) == poisoned
    for job_id, (payload, error) in POISON_JOBS.items():
        info = dead.pop(job_id)
        assert info.error is not None
        assert info.error.type == error, job_id
        assert await redis.hget(queue.keys.job(job_id), "p") == payload
        assert info.attempts == 1
    foreign = {info.raw: info for info in dead.values()}
    assert set(foreign) == {FOREIGN_ENTRY, b"stringy"}
    assert all(info.error and info.error.type == "PoisonEntry" for info in foreign.values())
    assert await redis.get(queue.keys.job("stringy")) == b"not a hash"  # left alone
    assert await queue.counts() == aioqueue.QueueCounts(0, 0, 0, poisoned)


async def _dead_count_is(queue: aioqueue.Queue, count: int) -> bool:
    return (await queue.counts()).dead == count


HUGE = 123456789012345678901234567890  # beyond 64 bits: enqueue refuses it


async def test_huge_integer_written_raw_goes_dead(
    redis_url: str, prefix: str, redis: Redis, closing: contextlib.AsyncExitStack
) -> None:
    """A payload with an integer JSON can hold but 64 bits cannot, written raw (enqueue
    refuses such arguments): it must not reach the handler as a different number."""
    app, recorder = fault_app_on(redis_url, prefix, closing)
    queue = app.queue()
    payload = raw_payload("echo", b'["huge-int", %d]' % HUGE)
    await push_raw_job(redis, queue, "huge-int", payload)
    good = await queue.enqueue("ok", "good")
    async with worker_process(redis_url, prefix, "-c", "1", "--lease", "3"):
        assert await good.result(timeout=10) == "ok good"
        await settle(lambda: _all_finished(queue, ["huge-int"]), timeout=5)
    info = await queue.job("huge-int").info()
    runs = await recorder.runs()
    result = Tally([] if info.status.finished else ["huge-int"], {"huge-int": 1})
    outcome = f"ended {info.status}, result {info.result()!r}, error {info.error}"
    report("poison-huge-int", result, 1, outcome)
    assert "huge-int" not in runs, f"the handler ran, with {info.result()!r}"
    assert info.status is aioqueue.JobStatus.DEAD
    assert await redis.hget(queue.keys.job("huge-int"), "p") == payload
