"""Periodic jobs: cron expressions (parsed by cronsim, with time zones) and fixed intervals.

A spec names a task and when it runs. Every tick has a time in epoch ms, the same on every
host; the enqueue script records the last tick enqueued per spec, so however many workers
run the scheduler, each tick is enqueued once (and its job id, ``periodic:<name>:<tick>``,
is deterministic too). Ticks are judged by the Redis clock.

Missed ticks (every worker was down): with ``missed="skip"`` (the default) a tick is only
enqueued within ``misfire_grace`` seconds of its time, so a restart fires no stale ticks;
with ``missed="latest"`` the most recent missed tick is enqueued once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson

from .converters import json_default
from .errors import ConfigError
from .keys import validate_name
from .priorities import DEFAULT_PRIORITY, resolve_priority

if TYPE_CHECKING:
    from collections.abc import Iterator
    from zoneinfo import ZoneInfo

Missed = Literal["skip", "latest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Periodic:
    """When a task runs by itself: ``cron`` (with ``tz``) or ``every`` seconds."""

    name: str
    task: str
    queue: str
    cron: str | None = None
    every: float | None = None
    tz: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = DEFAULT_PRIORITY
    missed: Missed = "skip"
    misfire_grace: float = 60.0
    declared: bool = True  # in code (synced at worker start) rather than added at run time

    def __post_init__(self) -> None:
        validate_name("periodic", self.name)
        validate_name("queue", self.queue)
        if (self.cron is None) == (self.every is None):
            raise ConfigError(f"periodic {self.name}: give exactly one of cron= or every=")
        if self.every is not None and self.every < 0.001:
            raise ConfigError(f"periodic {self.name}: every= must be at least 1 ms")
        if self.missed not in ("skip", "latest"):
            raise ConfigError(f"periodic {self.name}: missed= must be 'skip' or 'latest'")
        if self.misfire_grace < 0:
            raise ConfigError(f"periodic {self.name}: misfire_grace must not be negative")
        resolve_priority(self.priority)
        zone = _zone(self.name, self.tz)
        if self.cron is not None:
            _check_cron(self.name, self.cron, zone)

    # -- ticks (epoch ms) ----------------------------------------------------------------

    def last_tick(self, now_ms: int) -> int:
        """The latest tick at or before ``now_ms``."""
        if self.every is not None:
            step = int(self.every * 1000)
            return now_ms - now_ms % step
        return _ms(next(_cron_ticks(self.cron or "", self._dt(now_ms + 1), reverse=True)))

    def next_tick(self, now_ms: int) -> int:
        """The first tick strictly after ``now_ms``."""
        if self.every is not None:
            step = int(self.every * 1000)
            return now_ms - now_ms % step + step
        return _ms(next(_cron_ticks(self.cron or "", self._dt(now_ms))))

    def tick_to_enqueue(self, now_ms: int) -> int | None:
        """The tick that is due now under the missed-tick policy, if any."""
        tick = self.last_tick(now_ms)
        if self.missed == "skip" and now_ms - tick > self.misfire_grace * 1000:
            return None
        return tick

    def job_id(self, tick_ms: int) -> str:
        return f"periodic:{self.name}:{tick_ms}"

    def _dt(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(_zone(self.name, self.tz))

    # -- storage (specs live in Redis so they can be added and removed at run time) -----

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "name": self.name, "task": self.task, "queue": self.queue, "cron": self.cron,
                "every": self.every, "tz": self.tz, "args": list(self.args),
                "kwargs": self.kwargs, "priority": self.priority, "missed": self.missed,
                "misfire_grace": self.misfire_grace, "declared": self.declared,
            },
            default=json_default,  # (as an enqueue's arguments: a Decimal, a set, a model)
        )  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> Periodic:
        """Raise ConfigError (or ValueError) if the stored spec is unusable."""
        body = orjson.loads(raw)
        if not isinstance(body, dict):
            raise ConfigError("periodic spec is not a JSON object")
        body["args"] = tuple(body.get("args", ()))
        return cls(**body)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


# cronsim and zoneinfo are imported where they are used: an app without periodic jobs
# never needs them, and a worker's start should not import them (~3 ms).


def _zone(name: str, tz: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"periodic {name}: unknown time zone {tz!r}") from exc


def _check_cron(name: str, cron: str, zone: ZoneInfo) -> None:
    from cronsim import CronSimError

    try:
        _cron_ticks(cron, datetime.now(zone))
    except CronSimError as exc:
        raise ConfigError(f"periodic {name}: bad cron {cron!r}: {exc}") from exc


def _cron_ticks(cron: str, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
    from cronsim import CronSim

    return CronSim(cron, start, reverse=reverse)
