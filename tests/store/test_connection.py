"""The connection policy: options redis-py versions differ on are only passed where the
installed version takes them (pyproject allows redis-py 5.2 to 8); one client set per App."""

from __future__ import annotations

import asyncio

import pytest

import aioqueue
from aioqueue.store import connection


class OldConnection:
    """redis-py 7.x: has redis.maint_notifications, but its asyncio connections do not
    take the option."""

    def __init__(self, host: str = "localhost", port: int = 6379) -> None: ...


def test_maintenance_handshake_is_disabled_where_redis_py_has_it() -> None:
    options = connection._no_maintenance_handshake()
    if options:  # redis-py 8: the option exists and is turned off
        assert options["maint_notifications_config"].enabled is False


def test_no_maintenance_option_for_connections_that_lack_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "AbstractConnection", OldConnection)
    assert connection._no_maintenance_handshake() == {}


async def test_first_uses_that_race_share_one_client(redis_url: str, prefix: str) -> None:
    """Each of ten reads fanned out on a fresh App once built clients of its own, and all
    but one leaked."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    clients = await asyncio.gather(*(app.client() for _ in range(10)))
    assert len({id(client) for client in clients}) == 1
    await app.close()


@pytest.mark.real_redis("gives the App a client of a real server's URL")
async def test_an_app_uses_a_client_it_is_given_and_leaves_it_open(
    redis_url: str, prefix: str
) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    app = aioqueue.App(client=client, prefix=prefix)

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    job = await add.enqueue(2, 3)
    async with app.worker():
        assert await job.result(timeout=5) == 5
    assert app.redis_url is not None and app.redis_url.startswith("redis://127.0.0.1:")
    await app.close()
    assert await client.ping()  # still the user's, still open
    await client.aclose()
    with pytest.raises(aioqueue.ConfigError, match="not both"):
        aioqueue.App(client=client, redis_url=redis_url)
