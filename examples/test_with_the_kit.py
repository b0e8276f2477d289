"""Testing tasks, and a web app that enqueues them, with aioqueue's kit: no Redis server.

What a project's own tests look like (``pip install 'aioqueue[testing]'``: pytest picks
up aioqueue's plugin by itself; pytest-asyncio runs the async tests)::

    pytest examples/test_with_the_kit.py                        # on memory://
    pytest examples/test_with_the_kit.py --aioqueue-redis=real  # on a real server

The example apps (``quickstart``, ``webapp``) read their Redis URL from the environment;
here each test points them at a server of its own (``aioqueue_isolate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from aioqueue.testing import advance, drain
from examples import quickstart, webapp

if TYPE_CHECKING:
    from collections.abc import Callable

    import aioqueue

pytestmark = pytest.mark.asyncio


@pytest.fixture
def app(aioqueue_isolate: Callable[[aioqueue.App], aioqueue.App]) -> aioqueue.App:
    """The quickstart's own App, on this test's own server until the test ends."""
    return aioqueue_isolate(quickstart.app)


async def test_each_welcome_email_is_sent_once(app: aioqueue.App) -> None:
    jobs = [await quickstart.send_email.enqueue(to, "Welcome!") for to in ("ada@x", "bob@x")]
    again = await quickstart.send_email.enqueue("ada@x", "Welcome!").options(id=jobs[0].id)
    assert not again.created  # an id of your own deduplicates

    ran = await drain(app)  # runs them here, now: no worker process, no waiting

    assert ran.outcomes == {"complete": 2}
    assert [await job.result() for job in jobs] == [
        await quickstart.send_email("ada@x", "Welcome!"),  # the handler, called directly
        await quickstart.send_email("bob@x", "Welcome!"),
    ]


@pytest.mark.aioqueue_redis("memory")  # (advance moves memory://'s clock; a real one's, no)
async def test_a_reminder_waits_for_its_day(app: aioqueue.App) -> None:
    reminder = await quickstart.send_email.enqueue("ada@x", "Your trial ends").options(
        delay=24 * 3600
    )
    assert reminder not in await drain(app)  # not due yet

    assert reminder not in await advance(app, 23 * 3600)  # the clock moves; still not due
    ran = await advance(app, 3600)

    assert ran[reminder].ok


@pytest.mark.aioqueue_redis("memory")  # (eager mode needs none: it uses a server of its own)
async def test_signing_up_sends_the_welcome_email() -> None:
    """The web app's endpoint, with its enqueue run eagerly: the job has run (and its
    arguments made the JSON round trip) before the response comes back."""
    transport = httpx.ASGITransport(app=webapp.web)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with webapp.queue.eager():
            accepted = await client.post("/signup", json={"email": "ada@example.com"})
            assert accepted.status_code == 202
            status = await client.get(accepted.json()["status_url"])
    assert status.json()["status"] == "complete"
    assert status.json()["result"]["email"] == "ada@example.com"
