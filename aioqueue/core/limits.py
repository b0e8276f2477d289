"""Flow control for a queue: how many of its jobs may run at once, and how fast they may
start, across every worker (``queue.set_limits``; enforced inside ``take.lua``); and the
same for each of its tenants (``queue.set_tenant_limits``, with the tenants' names and
weights: ``lua/include/fair.lua``).

Pure: parsing and checking. A rate is written ``"100/s"``, ``"20/m"``, ``"500/h"`` or with
a period, ``"5/10s"``; it becomes one start every ``interval_ms``, with bursts of up to
``burst`` starts at once after a quiet spell (GCRA, lua/include/gcra.lua: over any window,
starts never run ahead of the rate by more than the burst, or by 20 ms of starts if that
is more: a start that comes a little late keeps its place, so late workers get the rate in
full).
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


# -- tenants (``.options(tenant=...)``: lua/include/fair.lua) --------------------------

MAX_TENANT_BYTES = 200
MAX_WEIGHT = 1000  # jobs per turn at most: a turn is served within one take


def check_tenant(tenant: object) -> str:
    """A tenant is a str of 1-200 bytes (UTF-8) that is not only whitespace; else
    ConfigError naming it."""
    if not isinstance(tenant, str) or not tenant.strip():
        raise ConfigError(f"tenant must be a non-empty str (not only whitespace), not {tenant!r}")
    if len(tenant.encode("utf-8", "surrogatepass")) > MAX_TENANT_BYTES:
        raise ConfigError(
            f"tenant must be at most {MAX_TENANT_BYTES} bytes, not {len(tenant.encode())}: "
            f"{tenant[:40]!r}..."
        )
    return tenant


def check_weights(weights: Mapping[str, int]) -> dict[str, int]:
    """Each tenant's weight, the jobs it gets per turn: an int from 1 to MAX_WEIGHT."""
    if not hasattr(weights, "items"):
        raise ConfigError(f"weights must map tenants to ints, not {weights!r}")
    checked: dict[str, int] = {}
    for tenant, weight in weights.items():
        check_tenant(tenant)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise ConfigError(
                f"weight of tenant {tenant!r} must be an int from 1 to {MAX_WEIGHT}, not {weight!r}"
            )
        checked[tenant] = weight
    return checked


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's limits, held across every worker: at most ``max_running`` of its jobs
    leased at once, and its starts spaced by ``interval_ms`` with bursts of up to
    ``burst``. None: no such limit."""

    max_running: int | None = None
    interval_ms: float | None = None
    burst: int = 1

    @property
    def rate_per_second(self) -> float | None:
        return None if self.interval_ms is None else 1000.0 / self.interval_ms

    def describe(self) -> str:
        """``at most 3 running, 10/s (burst 1)``, or ``no limits``."""
        parts = []
        if self.max_running is not None:
            parts.append(f"at most {self.max_running} running")
        if self.rate_per_second is not None:
            parts.append(f"{self.rate_per_second:g}/s (burst {self.burst})")
        return ", ".join(parts) or "no limits"

    def to_field(self) -> str | None:
        """As the tenants' limits hash holds it: "<max_running> <interval_us> <burst>"
        (0: none); None when there is no limit."""
        if self.max_running is None and self.interval_ms is None:
            return None
        interval_us = 0 if self.interval_ms is None else max(1, round(self.interval_ms * 1000))
        return f"{self.max_running or 0} {interval_us} {self.burst}"

    @classmethod
    def from_field(cls, raw: bytes | None) -> TenantLimits:
        """The limits a field read from Redis holds (none if absent or malformed)."""
        parts = (raw or b"").split()
        if len(parts) != 3 or not all(part.isdigit() for part in parts):
            return cls()
        running, interval_us, burst = (int(part) for part in parts)
        return cls(running or None, interval_us / 1000 if interval_us else None, burst or 1)


def make_tenant_limits(
    *, max_running: int | None = None, rate: str | None = None, burst: int = 1
) -> TenantLimits:
    """Check and build a tenant's limits; a bad value raises ConfigError naming it."""
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise ConfigError(f"max_running must be an integer >= 1, not {max_running!r}")
    limits = make_limits(rate=rate, burst=burst)
    return TenantLimits(max_running, limits.interval_ms, limits.burst)
