"""Retry delay policies: how long to wait before attempt ``n + 1`` after attempt ``n`` failed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigError

Backoff = Callable[[int], float]
"""A policy: given the number of the attempt that just failed (1-based), seconds to wait."""


@dataclass(frozen=True, slots=True)
class Exponential:
    """``base * factor**(attempt-1)`` seconds, capped, with full jitter by default.

    Full jitter (a uniform draw below the exponential) spreads retries of jobs that failed
    together, so a failing dependency is not hit by synchronized waves.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.cap < 0:
            raise ConfigError("Exponential backoff needs base >= 0, factor >= 1, cap >= 0")

    def __call__(self, attempt: int) -> float:
        delay = min(self.cap, self.base * self.factor ** max(0, attempt - 1))
        return random.uniform(0, delay) if self.jitter else delay


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same delay before every retry."""

    delay: float

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ConfigError("Fixed backoff needs delay >= 0")

    def __call__(self, attempt: int) -> float:
        return self.delay
