"""Priority levels: names, validation, and the plan a take call follows across levels.

Priorities are 0..9 and a higher number runs first. ``strict`` always drains higher levels
first; ``weighted`` visits levels in a weighted-random order with quotas by weight, so
a flood of high-priority jobs cannot starve the low ones.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Literal

from .errors import ConfigError
from .keys import PRIORITY_LEVELS

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

PRIORITY_NAMES = {"low": 0, "normal": 5, "high": 9}
DEFAULT_PRIORITY = PRIORITY_NAMES["normal"]

PriorityMode = Literal["strict", "weighted"]
Plan = list[tuple[int, int]]
"""(priority, quota) pairs, in the order a take call visits them."""

_STRICT_ORDER = tuple(reversed(range(PRIORITY_LEVELS)))


def resolve_priority(priority: int | str) -> int:
    """Map a named or numeric priority to 0..9."""
    if isinstance(priority, str):
        if priority not in PRIORITY_NAMES:
            raise ConfigError(f"unknown priority {priority!r}: use 0-9 or {sorted(PRIORITY_NAMES)}")
        return PRIORITY_NAMES[priority]
    if isinstance(priority, bool) or not 0 <= priority < PRIORITY_LEVELS:
        raise ConfigError(f"priority must be 0..{PRIORITY_LEVELS - 1}, got {priority!r}")
    return priority


def strict_plan(limit: int) -> Plan:
    return [(level, limit) for level in _STRICT_ORDER]


def weighted_planner(weights: Mapping[int, float] | None = None) -> Callable[[int], Plan]:
    """A planner giving level ``p`` a share ``weights[p]`` (default ``p + 1``) of the takes."""
    table = {level: float(level + 1) for level in range(PRIORITY_LEVELS)}
    for level, weight in (weights or {}).items():
        resolve_priority(level)
        if weight <= 0:
            raise ConfigError("priority weights must be positive")
        table[level] = float(weight)
    total = sum(table.values())

    def plan(limit: int) -> Plan:
        # Efraimidis-Spirakis: a weighted random order in one sort.
        order = sorted(table, key=lambda level: random.random() ** (1 / table[level]), reverse=True)
        return [(level, max(1, int(limit * table[level] / total))) for level in order]

    return plan


def planner(
    mode: PriorityMode, weights: Mapping[int, float] | None = None
) -> Callable[[int], Plan]:
    """The take plan for a worker's ``priority_mode`` (and optional weights per level)."""
    if mode == "strict":
        if weights:
            raise ConfigError("priority weights need priority_mode='weighted'")
        return strict_plan
    if mode == "weighted":
        return weighted_planner(weights)
    raise ConfigError(f"unknown priority_mode {mode!r}: use 'strict' or 'weighted'")
