"""How a worker's loops report failing calls (``worker/outages.py``): an outage is a
warning, quiet repeats and a line when it ends; a failover's expected break is one INFO
line per loop (each loop logged a warning per break: a burst at every failover); a
stopping loop says nothing above DEBUG; Redis not answering at all is one warning for all
of a worker's loops (a restart of Redis was thirty lines)."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, cast

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store.following import MasterChanged
from aioqueue.store.pubsub import ChannelMoved, ChannelSilent
from aioqueue.worker import outages
from aioqueue.worker.loops import stop_all
from aioqueue.worker.outages import Outage, ServerOutage, shared_context
from aioqueue.worker.promoter import Promoter
from tests.helpers import now, wait_until

log = logging.getLogger("tests.outages")
DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING
LOST = RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
MOVED = MasterChanged("the master of mymaster changed meanwhile")


def lines(caplog: pytest.LogCaptureFixture, name: str = log.name) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == name]


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=log.name)


async def test_an_outage_is_a_warning_quiet_repeats_and_a_line_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(log, "taking jobs from emails")
    for _ in range(5):
        outage.failed(LOST)
    outage.ended()
    outage.ended()  # (no outage: nothing to say)
    said = lines(caplog)
    assert [level for level, _ in said] == [WARNING, DEBUG, DEBUG, DEBUG, DEBUG, INFO]
    assert said[0][1] == f"taking jobs from emails failed: ConnectionError: {LOST}"
    assert re.fullmatch(
        r"taking jobs from emails works again, \d+\.\ds after it first failed", said[-1][1]
    )


async def test_a_long_outage_is_recalled_now_and_then(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outages, "REMIND_AFTER", 0.0)
    outage = Outage(log, "acking jobs of emails")
    outage.failed(LOST)
    outage.failed(LOST)
    said = lines(caplog)
    assert [level for level, _ in said] == [WARNING, WARNING]
    assert said[1][1].startswith("acking jobs of emails still fails, for ")


async def test_a_failover_break_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage(log, "waiting for jobs on emails")
    outage.failed(MOVED)
    outage.failed(MOVED)  # (the hold of the same failover)
    outage.ended()
    said = lines(caplog)
    assert [level for level, _ in said] == [INFO, DEBUG, DEBUG]
    assert "cut short by a failover" in said[0][1]
    assert "going on with the new master" in said[0][1]


async def test_a_failover_break_that_goes_on_failing_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(log, "waiting for jobs on emails")
    outage.failed(MOVED)
    outage.failed(LOST)  # the new master does not answer either
    outage.failed(LOST)
    outage.ended()
    assert [level for level, _ in lines(caplog)] == [INFO, WARNING, DEBUG, INFO]


async def test_a_stopping_loop_says_nothing_above_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopping = asyncio.Event()
    outage = Outage(log, "renewing leases on emails", stopping.is_set)
    outage.failed(LOST)  # (before the stop: a warning)
    stopping.set()
    outage.failed(LOST)
    outage.failed(MOVED)
    outage.ended()
    assert [level for level, _ in lines(caplog)] == [WARNING, DEBUG, DEBUG, DEBUG]


SHARED = "aioqueue.worker.outages"


async def test_redis_not_answering_is_one_warning_for_all_the_loops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=SHARED)
    context = shared_context(ServerOutage())
    takes, acks = Outage(log, "taking jobs from emails"), Outage(log, "acking jobs of emails")
    context.run(takes.failed, LOST)
    context.run(acks.failed, ChannelSilent("Redis answered nothing, not even PING, for 3.0s"))
    context.run(takes.failed, TimeoutError("no answer within 5s (call_timeout)"))
    assert [level for level, _ in lines(caplog)] == [DEBUG, DEBUG, DEBUG]  # the loops' own
    [(level, said)] = lines(caplog, SHARED)
    assert level == WARNING
    assert said == (
        "cannot reach Redis (the worker's calls wait, and go on when it answers): taking jobs "
        f"from emails failed: {_cause(LOST)}"
    )

    context.run(acks.ended)  # a call works again: the outage is over, for all
    context.run(takes.ended)
    assert [level for level, _ in lines(caplog)] == [DEBUG] * 5
    said_then = lines(caplog, SHARED)[1:]
    assert [level for level, _ in said_then] == [INFO]
    assert re.fullmatch(
        r"Redis answers again, \d+\.\ds after the first call that failed", said_then[0][1]
    )

    context.run(acks.failed, LOST)  # a new outage: said again
    assert [level for level, _ in lines(caplog, SHARED)] == [WARNING, INFO, WARNING]


async def test_a_failover_is_one_info_line_for_all_the_loops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A planned failover cut five calls of each worker short: five INFO lines a worker."""
    caplog.set_level(logging.DEBUG, logger=SHARED)
    context = shared_context(ServerOutage())
    waits, aborts = Outage(log, "waiting for jobs on emails"), Outage(log, "listening for aborts")
    context.run(waits.failed, MOVED)
    context.run(aborts.failed, MOVED)
    context.run(waits.ended)
    context.run(aborts.ended)
    assert [level for level, _ in lines(caplog)] == [DEBUG] * 4  # the loops' own
    [(level, said)] = told(caplog)
    assert level == INFO
    assert said == (
        "a failover cut the worker's calls short (waiting for jobs on emails: MasterChanged: "
        f"{MOVED}); they go on with the new master"
    )
    context.run(aborts.failed, MOVED)  # the next failover, once calls worked again
    assert [level for level, _ in told(caplog)] == [INFO, INFO]
    context.run(aborts.failed, LOST)  # and the new master does not answer: a warning
    assert [level for level, _ in told(caplog)] == [INFO, INFO, WARNING]


def told(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """What the worker's shared outage said above DEBUG."""
    return [(level, said) for level, said in lines(caplog, SHARED) if level > DEBUG]


async def test_a_stopping_worker_says_nothing_of_redis_above_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After "stopping", nothing says the worker's calls go on (a loop its stop had not
    reached yet said "cannot reach Redis (... go on when it answers)")."""
    caplog.set_level(logging.DEBUG, logger=SHARED)
    server = ServerOutage()
    context, outage = shared_context(server), Outage(log, "listening for aborts")
    context.run(outage.failed, LOST)  # (before the stop: the warning)
    server.stopping = True
    context.run(outage.failed, LOST)
    context.run(outage.ended)
    assert [level for level, _ in lines(caplog, SHARED)] == [WARNING, DEBUG, DEBUG]


async def test_a_loops_own_failure_is_its_own_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Redis answered (an error): not Redis being away."""
    caplog.set_level(logging.DEBUG, logger=SHARED)
    outage = Outage(log, "taking jobs from emails")
    shared_context(ServerOutage()).run(outage.failed, ResponseError("NOSCRIPT No matching script"))
    assert [level for level, _ in lines(caplog)] == [WARNING]
    assert lines(caplog, SHARED) == []


async def test_a_slot_moved_under_the_calls_is_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A manual Cluster failover: each worker warned of its promoter's wait ("UNBLOCKED ...
    master -> replica?") and of its abort listener ("... moved to another node")."""
    caplog.set_level(logging.DEBUG, logger=SHARED)
    context = shared_context(ServerOutage())
    waits, aborts = Outage(log, "waiting on the schedule of emails"), Outage(log, "listening")
    unblocked = ResponseError(
        "UNBLOCKED force unblock from blocking operation, instance state changed (master -> "
        "replica?)"
    )
    context.run(waits.failed, unblocked)
    context.run(aborts.failed, ChannelMoved("b'{emails}:aborts' moved to another node"))
    context.run(aborts.ended)
    assert [level for level, _ in lines(caplog)] == [DEBUG] * 3
    [(level, said)] = told(caplog)
    assert level == INFO
    assert said.startswith(
        "a failover or a slot's move cut the worker's calls short (waiting on the schedule of "
        "emails: ResponseError: UNBLOCKED"
    )


def _cause(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


async def test_a_worker_says_once_that_redis_restarted(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose Redis is killed and started again: one line when its calls fail, one
    when they work again; none of its loops warns on its own."""
    caplog.set_level(logging.INFO, logger="aioqueue")
    server = EmbeddedServer(appendonly=True)
    await asyncio.to_thread(server.start)
    app = aioqueue.App(redis_url=server.url, prefix=prefix)

    @app.task
    async def noop() -> None:
        return None

    def said(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if text in r.getMessage()]

    try:
        async with app.worker(idle_wait=0.2):
            await noop.enqueue()
            await asyncio.to_thread(server.kill)
            await wait_until(lambda: now(said("cannot reach Redis")), timeout=20)
            await asyncio.to_thread(server.start)
            await wait_until(lambda: now(said("Redis answers again")), timeout=30)
            job = await noop.enqueue()
            await job.result(timeout=20)  # (raises unless it completed)
            assert await job.status() is aioqueue.JobStatus.COMPLETE
    finally:
        await app.close()
        await asyncio.to_thread(server.stop)
    loud = [r for r in caplog.records if r.levelno >= WARNING and r.name.startswith("aioqueue")]
    assert [r.getMessage().split(" (")[0] for r in loud] == ["cannot reach Redis"], [
        r.getMessage() for r in loud
    ]


class FailoverCuts:
    """A client whose next ``cuts`` BLPOPs are cut short by a failover (MasterChanged,
    as a Sentinel client's are when the master changes under them); then it works."""

    def __init__(self, redis: Redis, cuts: int) -> None:
        self._redis, self.cuts, self.blpops = redis, cuts, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    async def blpop(self, keys: list[str], timeout: float) -> Any:
        self.blpops += 1
        if self.cuts:
            self.cuts -= 1
            raise MasterChanged("the master of mymaster changed meanwhile")
        return await self._redis.blpop(keys, timeout=timeout)


async def test_a_promoter_cut_short_by_a_failover_says_so_once(
    redis: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A failover cut the promoter's wait twice (before the switch, and during its
    hold): it said so in two warnings; now in one INFO line."""
    caplog.set_level(logging.DEBUG, logger="aioqueue.worker.promoter")
    client = FailoverCuts(redis, cuts=2)
    keys = QueueKeys.for_queue(prefix, "emails")
    promoter = Promoter(cast("Redis", client), keys, worker_id="w1", idle_wait=0.1)
    promoter.start()
    try:
        await wait_until(lambda: now(client.blpops >= 4), timeout=10)  # (it works again)
    finally:
        await stop_all([promoter])
    said = [line for line in lines(caplog, "aioqueue.worker.promoter") if line[0] > DEBUG]
    assert len(said) == 1, said
    level, message = said[0]
    assert level == INFO
    assert message.startswith("waiting on the schedule of emails: cut short by a failover")
