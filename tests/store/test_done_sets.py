"""The done sets (store/lua/include/done.lua): a job that completed with no result keeps
only its id's fingerprint, a 63-bit integer, in a small set per slot and generation.

Python (core/ids.py) and Lua compute the same fingerprint; Redis keeps the sets as intsets
(8 B a member); ids completed under the earlier layout (hashes of whole ids, ``done:``) are
still found for the window they were kept for.
"""

from __future__ import annotations

import random
from pathlib import Path

from redis.asyncio import Redis

from aioqueue.core import lifecycle
from aioqueue.core.ids import done_slot, fingerprint
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store import loader
from aioqueue.store.scripts import leasing
from tests.helpers import plain_client
from tests.store.script_helpers import lease, put, redis_now_ms, settle

SPAN_MS = 60_000


def _ids() -> list[bytes]:
    """Ids of every kind: empty, short, long, generated-looking, not UTF-8."""
    rng = random.Random(29)
    made = [rng.randbytes(rng.randrange(0, 48)) for _ in range(400)]
    return [b"", b"a", b"0" * 20, b"\xff" * 20, b"x" * 300, *made]


async def test_python_and_lua_compute_the_same_fingerprints(db: Redis) -> None:
    """Every id's fingerprint, computed by the include's own function, is Python's, written
    as Redis reads an integer (no leading zero, below 2^63): so SADD keeps an intset."""
    include = Path(loader.__file__).parent / "lua" / "include" / "done.lua"
    source = include.read_text("utf-8") + (
        "\nlocal out = {}\nfor i = 1, #ARGV do out[i] = fingerprint(ARGV[i]) end\nreturn out"
    )
    ids = _ids()
    computed = await db.eval(source, 0, *ids)
    assert [int(text) for text in computed] == [fingerprint(job_id) for job_id in ids]
    assert all(text == str(int(text)).encode() for text in computed)
    assert all(0 <= int(text) < 2**63 for text in computed)


async def test_done_sets_are_intsets(redis_server: EmbeddedServer, prefix: str) -> None:
    """On Redis itself, the sets are intsets: 8 B a member (a set of strings is ~60 B)."""
    db, keys = plain_client(redis_server.url), QueueKeys.for_queue(prefix, "q")
    try:
        jobs = [await lease(db, keys, f"job-{n}") for n in range(300)]
        settlements = [settle(job, "complete", b"null") for job in jobs]
        await leasing.ack(db, keys, settlements, result_ttl_ms=SPAN_MS, kept_ms=SPAN_MS)
        sets = [key async for key in db.scan_iter(match=f"{keys.done_prefix}*")]
        assert sum([await db.scard(key) for key in sets]) == 300
        assert {await db.object("encoding", key) for key in sets} == {b"intset"}
    finally:
        await db.aclose()


async def test_an_id_completed_under_the_earlier_layout_is_still_done(
    db: Redis, keys: QueueKeys
) -> None:
    """An upgrade keeps the window's promise: an id in an earlier version's done hash
    (``done:<w>:<g>:<s>``, the id itself a field) is refused by enqueue as complete."""
    now = await redis_now_ms(db)
    legacy = keys.done_prefix.replace(":donefp:", ":done:")
    slot = done_slot(b"welcome-42")
    await db.hset(f"{legacy}{SPAN_MS}:{now // SPAN_MS}:{slot}", "welcome-42", "")
    again = await put(db, keys, "welcome-42", check_created=False, span_ms=SPAN_MS)
    assert again == lifecycle.Enqueued(created=False, state="complete")
    fresh = await put(db, keys, "welcome-43", check_created=False, span_ms=SPAN_MS)
    assert fresh.created
