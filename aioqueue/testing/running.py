"""Running what was enqueued, and moving time: ``drain``, ``run_jobs``, ``advance``.

``run_jobs`` is burst workers until nothing is left (``worker/drain.py``): every job that
is ready, what those enqueue (a chain's next step, a chord's callback), and the retries of
the jobs it ran; on memory:// their backoff does not hold it up (the server's clock moves
to each retry's due time, as a worker would see it pass). Jobs delayed past that stay
scheduled: ``advance`` runs them.

``advance(app, seconds)`` runs what is ready, then moves the clock of the app's memory://
server, stopping at each moment something falls due on the way (a delayed job, a retry, a
periodic tick) to run what is due there, as a worker running all along would; jobs due
after the end stay scheduled. Periodic ticks count from the start: a job every 60 s runs
3 times over ``advance(app, 180)`` (a worker running since before has already enqueued
the tick at or before the start). A real server's clock (its TIME) cannot be moved:
advance refuses it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.keys import QueueKeys
from ..core.memory import MEMORY_SCHEME
from ..store import memory, specs
from ..store.routing import server_time
from ..worker.drain import Ran, next_due, run_burst, run_to_end
from ..worker.scheduler import PeriodicScheduler

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..app import App
    from ..core.periodic import Periodic

MAX_STEPS = 10_000
"""The most moments ``advance`` stops at in one call (a tick every millisecond over an
hour would be 3.6 million): past it, it raises rather than run on for minutes."""


async def drain(app: App, **worker_options: Any) -> Ran:
    """Run every job enqueued on the app's queues, what they enqueue and their retries,
    in this process; how each ended (``Ran``: by job id, or by ``Job``). ``worker_options``
    go to the burst workers (``concurrency``, ``lease``, ...)."""
    return await run_jobs(app, **worker_options)


async def run_jobs(app: App, *, queues: Sequence[str] | None = None, **worker_options: Any) -> Ran:
    """``drain``, on ``queues`` only (default: every queue of the app's tasks)."""
    url = _memory_url(app)
    skip_to = None if url is None else _skip_to(url)
    return await run_to_end(app, queues=queues, skip_to=skip_to, **worker_options)


async def advance(
    app: App, seconds: float, *, queues: Sequence[str] | None = None, **worker_options: Any
) -> Ran:
    """Move the clock of the app's memory:// server ``seconds`` forward, running at each
    moment on the way what falls due then (see the module's docstring); how each job run
    ended. ConfigError on a real server."""
    url = _memory_url(app)
    if url is None:
        raise ConfigError(
            f"advance() moves the clock of a memory:// server; {app.redis_url} is a real "
            "Redis, whose clock cannot be moved (run this test on memory://: "
            "@pytest.mark.aioqueue_redis('memory'))"
        )
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"advance() takes a finite number of seconds >= 0, not {seconds!r}")
    names = list(queues or app.queue_names())
    ticking = await _Ticks.start(app, names)
    start = await ticking.now_ms()
    end, at, ran = start + int(seconds * 1000), start, Ran()
    await run_burst(app, ran, queues=names, wait_retries=False, **worker_options)  # (ready now)
    for _ in range(MAX_STEPS):
        step = min(
            (due for due in (await next_due(app, names, None), await ticking.next_tick(at))
             if due is not None and due <= end),
            default=None,
        )  # fmt: skip
        if step is None:
            memory.advance_clock_to(url, end)
            return ran
        memory.advance_clock_to(url, step)
        await ticking.enqueue_due(since=at, now=step)
        await run_burst(app, ran, queues=names, wait_retries=False, **worker_options)
        at = step
    raise ConfigError(
        f"advance({seconds}) stopped at {MAX_STEPS} moments before reaching its end: "
        "advance by less at a time"
    )


class _Ticks:
    """The periodic specs of some queues, ticked as a worker's schedulers would."""

    def __init__(self, app: App, schedulers: dict[str, PeriodicScheduler]) -> None:
        self._app, self._schedulers = app, schedulers

    @classmethod
    async def start(cls, app: App, names: Sequence[str]) -> _Ticks:
        """Store the declared specs in Redis (as a worker does when it starts)."""
        redis = await app.internal_client()
        settings, schedulers = app.settings, {}
        for name in names:
            keys = QueueKeys.for_queue(settings.prefix, name)
            declared = app.declared_periodic(name)
            await specs.sync_declared(redis, keys, declared)
            schedulers[name] = PeriodicScheduler(
                redis, keys, declared=declared, max_payload_bytes=settings.max_payload_bytes,
                span_ms=settings.idempotency_ttl_ms,
            )  # fmt: skip
        return cls(app, schedulers)

    async def now_ms(self) -> int:
        redis = await self._app.internal_client()
        seconds, micros = await server_time(redis, "")
        return seconds * 1000 + micros // 1000

    async def _specs(self) -> list[tuple[PeriodicScheduler, Periodic]]:
        redis = await self._app.internal_client()
        found = []
        for name, scheduler in self._schedulers.items():
            keys = QueueKeys.for_queue(self._app.settings.prefix, name)
            found += [(scheduler, spec) for spec in await specs.load(redis, keys)]
        return found

    async def next_tick(self, after_ms: int) -> int | None:
        """The first tick of any spec after ``after_ms``."""
        return min((spec.next_tick(after_ms) for _, spec in await self._specs()), default=None)

    async def enqueue_due(self, *, since: int, now: int) -> None:
        """Enqueue each spec's tick that fell due in (``since``, ``now``]."""
        for scheduler, spec in await self._specs():
            tick = spec.tick_to_enqueue(now)
            if tick is not None and tick > since:
                await scheduler.enqueue_tick(spec, tick)


def _memory_url(app: App) -> str | None:
    url = app.redis_url or ""
    return url if url.partition("://")[0] == MEMORY_SCHEME else None


def _skip_to(url: str) -> Any:
    async def skip_to(due_ms: int) -> None:
        memory.advance_clock_to(url, due_ms)

    return skip_to
