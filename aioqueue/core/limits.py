"""Flow control for a queue: how many of its jobs may run at once, and how fast they may
start, across every worker (``queue.set_limits``; enforced inside ``take.lua``).

Pure: parsing and checking. A rate is written ``"100/s"``, ``"20/m"``, ``"500/h"`` or with
a period, ``"5/10s"``; it becomes one start every ``interval_ms``, with bursts of up to
``burst`` starts at once after a quiet spell (GCRA, in take.lua: over any window, starts
never run ahead of the rate by more than the burst, or by 20 ms of starts if that is more:
a start that comes a little late keeps its place, so late workers get the rate in full).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|m|h)\s*$")
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's limits: ``concurrency`` jobs leased at once at most, and starts spaced by
    ``interval_ms`` with bursts of up to ``burst``. None: no such limit."""

    concurrency: int | None = None
    interval_ms: float | None = None
    burst: int = 1

    @property
    def rate_per_second(self) -> float | None:
        """The rate as starts per second (None without a rate limit)."""
        return None if self.interval_ms is None else 1000.0 / self.interval_ms

    def describe(self) -> str:
        """``at most 5 running, 100/s (burst 10)``, or ``no limits``."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"at most {self.concurrency} running")
        if self.rate_per_second is not None:
            parts.append(f"{self.rate_per_second:g}/s (burst {self.burst})")
        return ", ".join(parts) or "no limits"

    def to_fields(self) -> dict[str, str]:
        """The queue's limits hash, as take.lua reads it."""
        fields: dict[str, str] = {}
        if self.concurrency is not None:
            fields["c"] = str(self.concurrency)
        if self.interval_ms is not None:  # whole microseconds: take.lua's GCRA is exact so
            fields["u"] = str(max(1, round(self.interval_ms * 1000)))
            fields["b"] = str(self.burst)
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[Any, Any]) -> QueueLimits:
        """The limits a hash read from Redis holds (bytes keys and values)."""
        concurrency, interval_us = fields.get(b"c"), fields.get(b"u")
        return cls(
            concurrency=None if concurrency is None else int(concurrency),
            interval_ms=None if interval_us is None else int(interval_us) / 1000,
            burst=int(fields.get(b"b", b"1")),
        )


def make_limits(
    *, rate: str | None = None, burst: int = 1, concurrency: int | None = None
) -> QueueLimits:
    """Check and build limits; a bad value raises ConfigError naming it."""
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigError(f"concurrency must be an integer >= 1, not {concurrency!r}")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ConfigError(f"burst must be an integer >= 1, not {burst!r}")
    if burst != 1 and rate is None:
        raise ConfigError("burst is the bursts of a rate: give a rate with it")
    return QueueLimits(concurrency, None if rate is None else parse_rate(rate), burst)


def parse_rate(rate: str) -> float:
    """``"100/s"`` -> 10.0: milliseconds between starts."""
    match = _RATE.match(rate) if isinstance(rate, str) else None
    if match is None:
        raise ConfigError(f"rate must look like '100/s', '20/m', '500/h' or '5/10s', not {rate!r}")
    count, periods, unit = float(match[1]), float(match[2] or 1), match[3]
    interval = periods * _UNIT_MS[unit] / count if count > 0 else math.inf
    if not 0.001 <= interval < math.inf:
        raise ConfigError(f"rate {rate!r} is out of range (at most 1,000,000 per second)")
    return interval
