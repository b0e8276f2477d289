"""What the scripts' replies mean: ``CODES``, the one table of return codes, and the
readers of replies that several families share (redis-py's ints and bytes become the
typed values of ``core/lifecycle``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.lifecycle import Enqueued

if TYPE_CHECKING:
    from collections.abc import Sequence

CODES: dict[str, dict[int, str]] = {
    "ack": {1: "settled", 3: "handed_off", -2: "lease_lost"},
    "cancel": {1: "cancelled", 2: "aborting", 0: "too_late", -1: "not_found"},
    "reschedule": {1: "rescheduled", 0: "not_scheduled", -1: "not_found"},
}
"""What each script's return code means (its Lua header says the same)."""


def meaning(script: str, code: Any) -> str:
    return CODES[script][int(code)]


def code_of(script: str, wanted: str) -> int:
    """The code that means ``wanted`` (read once, at import, by the hot path)."""
    return next(code for code, said in CODES[script].items() if said == wanted)


def text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


_STATES = {
    state.encode(): state for state in ("queued", "scheduled", "complete", "tick-done", "waiting")
}


def enqueued(reply: Sequence[Any]) -> list[Enqueued]:
    """The {created_1, state_1, created_2, ...} of enqueue.lua and enqueue_linked.lua."""
    states = _STATES
    return [
        Enqueued(bool(reply[i]), states.get(reply[i + 1]) or text(reply[i + 1]))
        for i in range(0, len(reply), 2)
    ]
