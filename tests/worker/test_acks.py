"""The ack batcher at a stop while Redis is away (units): it tries for ``flush_wait``,
then gives up, and a loop left behind sends nothing more (an ack landing once the server
is back would contradict the line that said the jobs run again)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from aioqueue.core.lifecycle import Settlement, Taken
from aioqueue.worker.acks import Batcher
from tests.helpers import now, wait_until


class Unreachable(Batcher):
    """A batcher whose every ack call fails, as with Redis killed."""

    def __init__(self, flush_wait: float) -> None:
        super().__init__(Redis(), "q", flush_wait=flush_wait)
        self.calls = 0

    async def _ack(self, batch: list[Settlement]) -> list[bool]:
        self.calls += 1
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1")


def held_and_settled(batcher: Batcher, n: int) -> None:
    for index in range(n):
        job_id = f"j{index}".encode()
        batcher.hold(Taken(job_id, b"{}", 1, 1, "w:1"))
        batcher.settle(Settlement(job_id, "w:1", "complete", b"null"))


async def test_a_loop_left_behind_sends_no_ack_after_the_stop_gave_up() -> None:
    batcher = Unreachable(flush_wait=0.05)
    batcher.start()
    held_and_settled(batcher, 3)
    await wait_until(lambda: now(batcher.calls >= 1), timeout=5)
    batcher.stop()  # asked while the loop pauses after a failed call
    assert not await batcher.join(timeout=0)  # still pausing: the stop leaves it behind
    assert batcher.left_behind() is None
    calls = batcher.calls
    assert await batcher.join(timeout=5)  # it ends by itself...
    assert batcher.calls == calls  # ...without one more call
    assert len(batcher.held) == 3  # (they stay active in Redis: nothing forgotten here)


async def test_a_stop_tries_until_its_wait_is_over_then_gives_up() -> None:
    batcher = Unreachable(flush_wait=1.2)  # more than two pauses after a failed call
    batcher.start()
    held_and_settled(batcher, 2)
    await wait_until(lambda: now(batcher.calls >= 1), timeout=5)
    batcher.stop()
    assert await batcher.join(timeout=10)
    assert batcher.calls >= 2  # tried again within the wait
    assert len(batcher.held) == 2
