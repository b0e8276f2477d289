"""Loading the scripts at first contact (``scripts.load_all``): a server gets those it
lacks, and every one, whether it had some, none, or refuses to say which it has."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from aioqueue.store.scripts import ALL_SCRIPTS, load_all

pytestmark = pytest.mark.real_redis("SCRIPT FLUSH, and an ACL user")

SHAS = [script.sha for script in ALL_SCRIPTS]


async def present(redis: Redis) -> list[bool]:
    return list(await redis.script_exists(*SHAS))


async def test_a_server_gets_the_scripts_it_lacks(redis: Redis) -> None:
    await redis.script_flush()
    assert not any(await present(redis))
    await redis.script_load(ALL_SCRIPTS[0].source)  # one it has already
    await load_all(redis)
    assert all(await present(redis))
    await load_all(redis)  # (nothing lacking: nothing to send)
    assert all(await present(redis))


@pytest.fixture
async def no_script_exists(redis: Redis, redis_url: str) -> AsyncIterator[Redis]:
    """A client of a user that may load and run scripts, but not ask which exist."""
    user, password = f"aq{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    rules = ["on", f">{password}", "~*", "-@all", "+script|load", "+hello", "+client"]
    await redis.execute_command("ACL SETUSER", user, *rules)  # type: ignore[no-untyped-call]
    client = Redis.from_url(redis_url.replace("redis://", f"redis://{user}:{password}@"))
    try:
        yield client
    finally:
        await client.aclose()
        await redis.acl_deluser(user)


async def test_a_refused_question_sends_them_all(no_script_exists: Redis, redis: Redis) -> None:
    await redis.script_flush()
    await load_all(no_script_exists)
    assert all(await present(redis))
