"""Tasks for the fault-injection tests (tests/faults/test_faults.py), run by real worker processes
(``python -m aioqueue worker tests.apps.fault_app:app``, with AIOQUEUE_REDIS_URL and TEST_PREFIX)
or, built again with ``build()``, by a worker inside the test process.

Every run of a job records itself before doing anything else, in one hash per test:
``HSET <prefix>:runs "<job>|<run token>" "<pid> <attempt> <unix time>"``. One field per
execution, written idempotently: when a connection dies under the write, redis-py sends
the same HSET again, which rewrites the same field. (``HINCRBY`` would count that retry as
a second execution.) The tests compare these records with the jobs they enqueued.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.retry import Retry as RedisRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import aioqueue

DEFAULT_PREFIX = "aioqueue-faults-test"
QUICK_RETRY = aioqueue.Fixed(0.1)  # a run whose record could not be written runs again soon


@dataclass(frozen=True, slots=True)
class Run:
    """One recorded execution of a job."""

    job: str
    pid: int
    attempt: int
    at: float  # unix time the run started


@dataclass(slots=True)
class Recorder:
    """Writes and reads the execution records of one test (one key prefix)."""

    prefix: str
    redis_url: str | None
    _client: Redis | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    @property
    def runs_key(self) -> str:
        return f"{self.prefix}:runs"

    def client(self) -> Redis:
        """A client for the running loop; it retries through killed connections."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            url = self.redis_url or os.environ["AIOQUEUE_REDIS_URL"]
            self._client = Redis.from_url(
                url,
                retry=RedisRetry(ExponentialBackoff(cap=0.2, base=0.01), 20),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
            )
            self._loop = loop
        return self._client

    async def record(self, job: str, at: float | None = None) -> None:
        """Record one execution of ``job`` (called first thing by every handler), started
        ``at`` (default: now)."""
        attempt = aioqueue.current_job().attempt
        value = f"{os.getpid()} {attempt} {time.time() if at is None else at:.6f}"
        await self.client().hset(self.runs_key, f"{job}|{secrets.token_hex(8)}", value)

    def record_sync(self, job: str) -> None:
        """``record`` for a plain ``def`` handler, in its worker thread."""
        attempt = aioqueue.current_job().attempt
        value = f"{os.getpid()} {attempt} {time.time():.6f}"
        with SyncRedis.from_url(self.redis_url or os.environ["AIOQUEUE_REDIS_URL"]) as client:
            client.hset(self.runs_key, f"{job}|{secrets.token_hex(8)}", value)

    async def record_end(self, job: str) -> None:
        """Record when a run of ``job`` ended well (the last such run's time is kept)."""
        await self.client().hset(f"{self.prefix}:ends", job, f"{time.time():.6f}")

    async def ends(self) -> dict[str, float]:
        raw: dict[bytes, bytes] = await self.client().hgetall(f"{self.prefix}:ends")  # type: ignore[assignment]
        return {job.decode(): float(at) for job, at in raw.items()}

    async def first_run(self, job: str) -> bool:
        """True for exactly one run of ``job`` (SET NX), whatever its attempt number."""
        return bool(await self.client().set(f"{self.prefix}:first:{job}", 1, nx=True))

    async def runs(self) -> dict[str, list[Run]]:
        """Every recorded execution, by job, in start order."""
        raw: dict[bytes, bytes] = await self.client().hgetall(self.runs_key)  # type: ignore[assignment]
        runs: dict[str, list[Run]] = {}
        for key, value in raw.items():
            job = key.decode().rpartition("|")[0]
            pid, attempt, at = value.decode().split()
            runs.setdefault(job, []).append(Run(job, int(pid), int(attempt), float(at)))
        for job_runs in runs.values():
            job_runs.sort(key=lambda run: run.at)
        return runs

    async def close(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.aclose()


def recorder() -> Recorder:
    """The recorder of the worker running the current job (its startup hook put it there)."""
    found: Recorder = aioqueue.current_job().state["recorder"]
    return found


# -- delivery under faults ----------------------------------------------------------------


async def work(job: str, seconds: float) -> str:
    """Record the run, then take ``seconds`` (a job in flight for that long)."""
    await recorder().record(job)
    await asyncio.sleep(seconds)
    return job


async def hang_first_run(job: str, seconds: float) -> dict[str, int]:
    """The job's first run takes ``seconds``; any later run returns at once. Returns who
    ran it: the result shows which worker's acknowledgement was recorded."""
    await recorder().record(job)
    if await recorder().first_run(job):
        await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "attempt": aioqueue.current_job().attempt}


async def consume(message: dict[str, str]) -> None:
    """A topic's subscriber: record the run, then take a moment (in flight when killed)."""
    await recorder().record(message["m"])
    await asyncio.sleep(0.02)


# -- misbehaving handlers -----------------------------------------------------------------


class Sentinel(BaseException):
    """Not an Exception, not cancellation: what a careless library might raise."""


async def raises(job: str) -> None:
    await recorder().record(job)
    raise ValueError(f"boom {job}")


async def raises_never_retry(job: str) -> None:
    await recorder().record(job)
    raise KeyError(job)


async def raises_no_dead_letter(job: str) -> None:
    await recorder().record(job)
    raise RuntimeError(f"boom {job}")


async def raises_base_exception(job: str) -> None:
    await recorder().record(job)
    raise Sentinel(job)


async def raises_system_exit(job: str) -> None:
    await recorder().record(job)
    raise SystemExit(3)  # in a worker process: must not end the process


async def asks_retry(job: str) -> None:
    await recorder().record(job)
    raise aioqueue.Retry(delay=0.3)


_RECORDING: set[asyncio.Task[None]] = set()


def record_in_background(job: str) -> None:
    """Record the run in a task of its own, for the handlers below with short timeouts:
    their timeout must land in the misbehaviour they test, never in the recording write
    (which it could, when ``blocks_loop`` blocks the loop while the write is in flight)."""
    task = asyncio.ensure_future(recorder().record(job, at=time.time()))
    _RECORDING.add(task)
    task.add_done_callback(_RECORDING.discard)


async def hangs(job: str) -> None:
    record_in_background(job)
    await asyncio.sleep(3600)


async def swallows_cancellation(job: str) -> str:
    record_in_background(job)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        return "swallowed"  # returns normally after its timeout's cancellation
    return "slept"


async def ignores_cancellation(job: str) -> None:
    record_in_background(job)
    while True:  # swallows every cancellation: only the watchdog can settle the job
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


async def blocks_loop(job: str) -> str:
    record_in_background(job)
    time.sleep(1.2)  # noqa: ASYNC251 - the point: it blocks the worker's event loop
    return "blocked"


def sync_hangs(job: str) -> str:
    recorder().record_sync(job)
    time.sleep(2.0)
    return "slept"


# -- good jobs ------------------------------------------------------------------------------


async def ok(job: str) -> str:
    await recorder().record(job)
    return f"ok {job}"


async def in_order(job: str, seconds: float) -> str:
    """A job of a group: record its start and, once it has taken ``seconds``, its end."""
    await recorder().record(job)
    await asyncio.sleep(seconds)
    await recorder().record_end(job)
    return job


async def collect(results: list[str], job: str) -> list[str]:
    """A workflow's parent: record the run, return what its children returned."""
    await recorder().record(job)
    return results


async def echo(job: str, value: object) -> object:
    await recorder().record(job)
    return value


def build(prefix: str, redis_url: str | None = None) -> tuple[aioqueue.App, Recorder]:
    """An App with the fault tasks, and the recorder its handlers write to."""
    # Completed records keep their payload: the tests find each job's record by its args.
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, keep_payload=True)
    runs = Recorder(prefix, redis_url)

    @app.on_startup
    async def share_recorder(state: dict[str, Any]) -> None:
        state["recorder"] = runs

    @app.on_shutdown
    async def close_recorder(state: dict[str, Any]) -> None:
        await runs.close()

    app.task(retries=20, backoff=QUICK_RETRY, timeout=30)(work)
    app.task(retries=20, backoff=QUICK_RETRY, timeout=60)(hang_first_run)
    app.task(retries=2, backoff=aioqueue.Fixed(0.4))(raises)
    app.task(retries=5, never_retry=(KeyError,))(raises_never_retry)
    app.task(retries=0, dead_letter=False)(raises_no_dead_letter)
    app.task(retries=0)(raises_base_exception)
    app.task(retries=0)(raises_system_exit)
    app.task(retries=1)(asks_retry)
    app.task(timeout=0.5, retries=1, backoff=aioqueue.Fixed(0.2))(hangs)
    app.task(timeout=0.5, retries=0)(swallows_cancellation)
    app.task(timeout=0.5, retries=0)(ignores_cancellation)
    app.task(timeout=0.3, retries=0)(blocks_loop)
    app.task(timeout=0.3, retries=0)(sync_hangs)
    app.task(retries=20, backoff=QUICK_RETRY)(ok)
    app.task(retries=0)(echo)
    app.task(retries=20, backoff=QUICK_RETRY, timeout=30)(in_order)
    app.task(retries=20, backoff=QUICK_RETRY, timeout=30)(collect)
    app.subscriber("faults", group="g", retries=20, backoff=QUICK_RETRY, timeout=30)(consume)
    return app, runs


app, runs = build(
    os.environ.get("TEST_PREFIX", DEFAULT_PREFIX), os.environ.get("AIOQUEUE_REDIS_URL")
)
