"""Every client calls the producer scripts exactly as their headers say: the script calls
each sends, recorded by a proxy, carry the KEYS that ``Layout.keys`` builds from
``QueueKeys`` and the ARGV that ``Layout.args`` lays out (the Python producer included).
A script whose KEYS or ARGV change fails this for each client until it follows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store.loader import SHARDED, Script, assemble
from tests.conformance import runners
from tests.conformance.proxy import RedisProxy

QUEUE = "wire"
DAY_MS = 24 * 3600 * 1000  # the default result TTL and idempotency window
SCRIPTS = {Script("enqueue").sha: "enqueue", Script("cancel").sha: "cancel"}
SOURCES = {assemble("enqueue"): "enqueue", assemble("cancel"): "cancel"}
assert assemble("cancel", swaps=SHARDED) not in SOURCES


@pytest.fixture
async def proxy(redis_server: EmbeddedServer) -> AsyncIterator[RedisProxy]:
    started = RedisProxy(redis_server.port)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def calls(proxy: RedisProxy) -> list[tuple[str, list[bytes], list[bytes]]]:
    """(script, KEYS, ARGV) of each script call the proxy saw."""
    out = []
    for head, count, *rest in proxy.scripts():
        name = SCRIPTS.get(head.decode()) or SOURCES.get(head.decode())
        assert name is not None, f"a script that is no producer script: {head[:60]!r}"
        keys, args = rest[: int(count)], rest[int(count) :]
        out.append((name, keys, args))
    return out


def encoded(values: list[Any]) -> list[bytes]:
    return [str(value).encode() if not isinstance(value, bytes) else value for value in values]


@pytest.mark.parametrize("runner", ["python", "go", "node"], indirect=True)
async def test_script_calls_follow_the_headers(
    runner: runners.Runner, proxy: RedisProxy, prefix: str
) -> None:
    steps = [
        {"do": "enqueue", "task": "t", "args": [1], "options": {"id": "w1", "priority": 9}},
        {"do": "enqueue_many", "calls": [
            {"task": "t", "options": {"id": "w2", "priority": 0, "max_attempts": 3}},
            {"task": "t", "options": {"id": "w3", "delay": 60}},
            {"task": "t", "options": {"id": "w4", "priority": 9}}]},
        {"do": "cancel", "job": "w3"},
    ]  # fmt: skip
    spec = {"url": proxy.url, "prefix": prefix, "queue": QUEUE, "config": {}, "steps": steps}
    outcomes = await runner(spec)
    assert all("error" not in outcome for outcome in outcomes), outcomes
    keys = QueueKeys.for_queue(prefix, QUEUE)
    enqueue, cancel = Script("enqueue").layout, Script("cancel").layout
    made = calls(proxy)
    assert [name for name, _, _ in made] == ["enqueue", "enqueue", "cancel"], made

    _, sent_keys, sent_args = made[0]
    assert sent_keys == encoded(enqueue.keys(keys, ready=[keys.ready(9)]))
    job = [b"w1", sent_args[5], b"9", b"0", b"0", b"0", b"0"]
    assert sent_args == encoded(
        enqueue.args(count=1, priorities="9", span_ms=DAY_MS, resend=0, jobs=job)
    )
    assert sent_args[5] == b'{"t":"t","a":[1]}', "the payload as Python writes it"

    _, sent_keys, sent_args = made[1]
    assert sent_keys == encoded(
        enqueue.keys(keys, ready=[keys.ready(0), keys.ready(5), keys.ready(9)])
    )
    jobs = [b"w2", b'{"t":"t"}', b"0", b"3", b"0", b"0", b"0",
            b"w3", b'{"t":"t"}', b"5", b"0", b"60000", b"0", b"0",
            b"w4", b'{"t":"t"}', b"9", b"0", b"0", b"0", b"0"]  # fmt: skip
    args = enqueue.args(count=3, priorities="0,5,9", span_ms=DAY_MS, resend=0, jobs=jobs)
    assert sent_args == encoded(args)

    _, sent_keys, sent_args = made[2]
    assert sent_keys == encoded(cancel.keys(keys))
    args = cancel.args(
        id="w3", result_ttl_ms=DAY_MS, abort_channel=keys.abort_channel,
        settled_channel=keys.settled_channel,
    )  # fmt: skip
    assert sent_args == encoded(args)
