"""Every client runs the same cases (``cases/*.json``, described in ``runners.py``) against
the suite's Redis, with a Python worker running the jobs: arguments arrive exactly, options
take effect, results and failures read back, bad input is refused with nothing written.

Besides each step's expected outcome, a case may say what the worker saw: ``runs`` (the
task and its arguments, compared type for type: 1 is not 1.0), ``run_count``, ``attempts``,
``order`` (which jobs started first), ``not_before`` (a job started no earlier than this
many ms after its enqueue began); and what Redis holds: ``records`` (fields of the job's
record, its decoded payload, which ready list or when on the schedule, or ``absent``), or
``nothing_written`` (no key of the queue exists). ``idle``: the queue has no worker.
``not_for``: clients the case does not apply to, with the reason; ``known_gap``: clients
known to fail it, with the reason (a strict xfail: once the gap closes, remove the entry).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis, RedisCluster

import aioqueue
from aioqueue.core.ids import GENERATED_ID_ALPHABET
from aioqueue.core.keys import QueueKeys
from aioqueue.core.payload import Payload
from aioqueue.ops.embedded_cluster import EmbeddedCluster
from tests.conformance import runners

CASES = Path(__file__).parent / "cases"
CLIENTS = ("python", "go", "node")
QUEUE, IDLE_QUEUE = "conformance", "unserved"


def load_cases() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text("utf-8")) for path in sorted(CASES.glob("*.json"))}


def parameters(only: tuple[str, ...] = ()) -> list[Any]:
    out = []
    for name, case in load_cases().items():
        if only and name not in only:
            continue
        for client in CLIENTS:
            marks = []
            if reason := case.get("not_for", {}).get(client):
                marks.append(pytest.mark.skip(reason=f"{client}: {reason}"))
            if reason := case.get("known_gap", {}).get(client):  # strict: fails once closed
                marks.append(pytest.mark.xfail(reason=f"{client}: {reason}", strict=True))
            out.append(pytest.param(client, name, id=f"{client}-{name}", marks=marks))
    return out


@dataclass
class Run:
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    started_ms: float


@dataclass
class Worker:
    """What the Python worker ran, by job id, in start order."""

    runs: dict[str, list[Run]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def record(self, task: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        job_id = aioqueue.current_job().id
        self.runs.setdefault(job_id, []).append(Run(task, list(args), kwargs, time.time() * 1000))
        self.order.append(job_id)


def worker_app(url: str, prefix: str, seen: Worker) -> aioqueue.App:
    app = aioqueue.App(redis_url=url, prefix=prefix)

    @app.task(name="echo", queue=QUEUE)
    async def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.record("echo", args, kwargs)
        return {"args": list(args), "kwargs": kwargs}

    @app.task(name="nothing", queue=QUEUE)
    async def nothing(*args: Any, **kwargs: Any) -> None:
        seen.record("nothing", args, kwargs)

    @app.task(name="fail", queue=QUEUE, retries=5, backoff=aioqueue.Fixed(0.01))
    async def fail(message: str) -> None:
        seen.record("fail", (message,), {})
        raise ValueError(message)

    @app.task(name="sleep", queue=QUEUE, retries=0)
    async def sleep(seconds: float) -> float:
        seen.record("sleep", (seconds,), {})
        await asyncio.sleep(seconds)
        return seconds

    @app.task(name="headers", queue=QUEUE)
    async def headers() -> dict[str, str]:
        seen.record("headers", (), {})
        return dict(aioqueue.current_job().headers)

    return app


@asynccontextmanager
async def serving(url: str, prefix: str) -> AsyncIterator[Worker]:
    """A Python worker with one slot on the case's queue."""
    seen = Worker()
    app = worker_app(url, prefix, seen)
    try:
        async with app.worker(queues=[QUEUE], concurrency=1, grace=0.1):
            yield seen
    finally:
        await app.close()


@pytest.mark.parametrize(("runner", "name"), parameters(), indirect=["runner"])
async def test_case(
    runner: runners.Runner, name: str, redis_url: str, prefix: str, redis: Redis
) -> None:
    async with serving(redis_url, prefix) as seen:
        await run_case(runner, load_cases()[name], redis_url, prefix, redis, seen)


CLUSTER_CASES = ("args_unicode", "args_none", "duplicate_id", "delay", "failure", "cancel_running")
"""The cases run again on a Redis Cluster: a queue's calls go to its slot's node, results
are heard by sharded pub/sub, cancel publishes with its sharded build."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3) as started:
        yield started


@pytest.mark.parametrize(("runner", "name"), parameters(CLUSTER_CASES), indirect=["runner"])
async def test_case_on_a_cluster(
    runner: runners.Runner, name: str, cluster: EmbeddedCluster, prefix: str
) -> None:
    client = RedisCluster.from_url(cluster.url.replace("redis+cluster", "redis").split(",")[0])
    try:
        async with serving(cluster.url, prefix) as seen:
            await run_case(runner, load_cases()[name], cluster.url, prefix, client, seen)
    finally:
        await client.aclose()


async def run_case(
    runner: runners.Runner,
    case: dict[str, Any],
    url: str,
    prefix: str,
    redis: Redis | RedisCluster,
    served: Worker,
) -> None:
    queue = IDLE_QUEUE if case.get("idle") else QUEUE
    steps = [{k: v for k, v in step.items() if k != "expect"} for step in case["steps"]]
    config = case.get("config", {})
    spec = {"url": url, "prefix": prefix, "queue": queue, "config": config, "steps": steps}
    outcomes = await runner(spec)
    assert len(outcomes) == len(case["steps"]), outcomes
    for index, (step, outcome) in enumerate(zip(case["steps"], outcomes, strict=True)):
        for key, want in step.get("expect", {}).items():
            got = outcome.get(key)
            if key == "jobs":
                assert len(got or []) == len(want), f"step {index}: {outcome}"
                for one, wanted in zip(got or [], want, strict=True):
                    assert {k: one.get(k) for k in wanted} == wanted, f"step {index}: {outcome}"
            else:
                where = f"step {index} ({step['do']}): {key}"
                assert same(got, want), f"{where} {got!r}, want {want!r} in {outcome}"
    ids = Ids(outcomes)
    keys = QueueKeys.for_queue(prefix, queue)
    check_worker(case, ids, served)
    await check_redis(case, ids, keys, redis)


def same(got: Any, want: Any) -> bool:
    """Equal, type for type (True is not 1, 1 is not 1.0), through lists and dicts."""
    if type(got) is not type(want):
        return False
    if isinstance(want, list):
        return len(got) == len(want) and all(same(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return bool(got == want)


class Ids:
    """Job ids (and enqueue times) of a case's outcomes, by the case's references."""

    def __init__(self, outcomes: list[dict[str, Any]]) -> None:
        self.outcomes = outcomes

    def __call__(self, ref: Any) -> str:
        if isinstance(ref, list):
            return str(self.outcomes[ref[0]]["jobs"][ref[1]]["id"])
        return str(self.outcomes[ref]["id"])

    def before_ms(self, ref: Any) -> float:
        step = ref[0] if isinstance(ref, list) else ref
        return float(self.outcomes[step]["before_ms"])


def check_worker(case: dict[str, Any], ids: Ids, seen: Worker) -> None:
    for expected in case.get("runs", []):
        runs = seen.runs.get(ids(expected["job"]), [])
        assert runs, f"job {expected['job']} did not run"
        run = runs[0]
        assert run.task == expected["task"]
        assert same(run.args, expected["args"]), f"args {run.args!r}, want {expected['args']!r}"
        assert same(run.kwargs, expected["kwargs"]), f"kwargs {run.kwargs!r}"
    if "run_count" in case:
        assert sum(len(runs) for runs in seen.runs.values()) == case["run_count"], seen.runs
    for expected in case.get("attempts", []):
        assert len(seen.runs.get(ids(expected["job"]), [])) == expected["count"], seen.runs
    if "order" in case:
        assert seen.order == [ids(ref) for ref in case["order"]], seen.order
    for expected in case.get("not_before", []):
        started = seen.runs[ids(expected["job"])][0].started_ms
        # Due times are whole milliseconds of the Redis clock (the enqueue's "now" rounded
        # down), and ``before_ms`` is a fraction of one: a start within 1 ms is on time.
        due = ids.before_ms(expected["job"]) + expected["ms"] - 1
        assert started >= due, f"a delayed job started {due - started:.1f} ms early"


async def check_redis(
    case: dict[str, Any], ids: Ids, keys: QueueKeys, redis: Redis | RedisCluster
) -> None:
    if case.get("nothing_written"):
        found = [key async for key in redis.scan_iter(match=f"{keys.base}:*")]
        assert found == [], f"refused input wrote {found}"
    for expected in case.get("records", []):
        job_id = ids(expected["job"])
        record = cast("dict[bytes, bytes]", await redis.hgetall(keys.job(job_id)))
        if expected.get("absent"):
            assert record == {}, record
            continue
        fields = {k.decode(): v.decode() for k, v in record.items() if k != b"p"}
        assert {k: fields.get(k) for k in expected["fields"]} == expected["fields"], fields
        payload = Payload.decode(record[b"p"])
        body = json.loads(record[b"p"])
        assert {k: body.get(k) for k in expected["payload"]} == expected["payload"], body
        assert set(body) <= {"t", "a", "k", "to", "h", "xp"}, f"unknown payload fields: {body}"
        assert payload.task == expected["payload"]["t"]
        await check_placement(expected, job_id, keys, redis, fields)


async def check_placement(
    expected: dict[str, Any],
    job_id: str,
    keys: QueueKeys,
    redis: Redis | RedisCluster,
    fields: dict[str, str],
) -> None:
    if "ready" in expected:
        assert job_id.encode() in await redis.lrange(keys.ready(expected["ready"]), 0, -1)
    if "scheduled_ms" in expected:
        due = await redis.zscore(keys.schedule, job_id)
        assert due is not None and 0 <= due - int(fields["et"]) - expected["scheduled_ms"] < 1000
    if expected.get("generated_id"):
        assert len(job_id) == 20, job_id
        assert set(job_id.encode()) <= set(GENERATED_ID_ALPHABET), job_id
        stamp = 0
        for char in job_id[:8].encode():
            stamp = stamp * 64 + GENERATED_ID_ALPHABET.index(char)
        assert abs(stamp - int(fields["et"])) < 60_000, "a generated id starts with its millisecond"
