"""Helpers shared by the Lua script tests (tests/store/test_scripts_*.py).

Each drives one ``aioqueue.scripts`` wrapper with the defaults those tests share: one queue's
keys, lease ``"w:1"`` (or a fresh token where a test needs several leases), 30-second leases.
The ``db`` and ``keys`` fixtures they take are in conftest.py.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.keys import QueueKeys
from aioqueue.store import loader
from aioqueue.store.scripts import enqueues, leasing

LEASE_MS = 30_000
_lease_tokens = itertools.count(1)


async def put(
    db: Redis,
    keys: QueueKeys,
    job_id: str,
    *,
    priority: int = 0,
    max_attempts: int = 0,
    delay_ms: int = 0,
    due_ms: int = 0,
    payload: bytes | None = None,
    check_created: bool = True,
    span_ms: int = 0,
) -> lifecycle.Enqueued:
    """Enqueue ``job_id`` through ``enqueues.enqueue`` and return what the script answered.

    The payload defaults to ``{"t":"<job_id>"}``. Unless ``check_created`` is False, assert
    that the call made a new record (set-up must not run into an unfinished job of that id).
    """
    result = await enqueues.enqueue(
        db,
        keys,
        job_id=job_id,
        payload=payload if payload is not None else b'{"t":"%s"}' % job_id.encode(),
        priority=priority,
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        due_ms=due_ms,
        span_ms=span_ms,
    )
    if check_created:
        assert result.created
    return result


async def take(
    db: Redis,
    keys: QueueKeys,
    limit: int = 1,
    *,
    woken: bool = False,
    result_ttl_ms: int = 30_000,
    lease: str = "w:1",
) -> list[bytes]:
    """Take up to ``limit`` jobs under ``lease``; return their ids in the order taken.
    A worker mints a new lease token per call: a second call with the same token is a
    resend and returns the same jobs again.

    ``woken`` and ``result_ttl_ms`` (how long a skipped cancelled record is kept) go to
    ``leasing.take`` as they are.
    """
    result = await leasing.take(
        db,
        keys,
        lease=lease,
        lease_ms=LEASE_MS,
        limit=limit,
        woken=woken,
        result_ttl_ms=result_ttl_ms,
    )
    return [job.id for job in result.jobs]


async def lease(
    db: Redis,
    keys: QueueKeys,
    job_id: str,
    *,
    priority: int = 0,
    max_attempts: int = 0,
    token: str | None = None,
) -> lifecycle.Taken:
    """Enqueue ``job_id`` (unless its record exists already) and take it; return the job.

    Asserts that ``job_id`` is the one job taken, so nothing else may be ready ahead of it.
    The lease token is ``token``, or by default a fresh ``"lease:<n>"`` on every call
    (never ``take``'s default ``"w:1"``: a take with a token already used is a resend).
    """
    if not await db.exists(keys.job(job_id)):
        await put(db, keys, job_id, priority=priority, max_attempts=max_attempts)
    taken = await leasing.take(
        db,
        keys,
        lease=token if token is not None else f"lease:{next(_lease_tokens)}",
        lease_ms=LEASE_MS,
        limit=1,
    )
    assert [job.id for job in taken.jobs] == [job_id.encode()]
    return taken.jobs[0]


def settle(
    job: lifecycle.Taken, outcome: lifecycle.Outcome, data: bytes = b"", delay_ms: int = 0
) -> lifecycle.Settlement:
    """The settlement of a job taken by ``lease``, under that job's own lease token."""
    return lifecycle.Settlement(job.id, job.lease, outcome, data, delay_ms)


async def redis_now_ms(db: Redis) -> int:
    """Redis's own clock (TIME) in epoch milliseconds, the clock the scripts use."""
    seconds, micros = await db.time()
    return int(seconds) * 1000 + int(micros) // 1000


def lua_constant(include: str, name: str) -> int:
    """A number an include states (``local NAME = 20000``), as the scripts read it."""
    text = (Path(loader.__file__).parent / "lua" / "include" / f"{include}.lua").read_text()
    found = re.search(rf"\b{name} = (\d+)", text)
    assert found is not None, f"{include}.lua states no {name}"
    return int(found[1])
