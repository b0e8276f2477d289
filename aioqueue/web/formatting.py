"""How the dashboard shows values: times (ISO 8601, UTC), ages, durations, JSON.

Pure functions, registered as Jinja filters by ``aioqueue.web.dashboard``. Everything
they return is plain text: the templates escape it (autoescape is on).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import orjson

from ..core.records import utc_moment

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..core.records import JobInfo

PREVIEW_CHARS = 120


def iso(ms: float | None) -> str:
    """Epoch milliseconds as ISO 8601 in UTC (``2025-01-31T09:30:00.250Z``); "" for None;
    the number itself when no date can hold it (a record another program wrote)."""
    if ms is None:
        return ""
    moment = utc_moment(ms)
    if moment is None:
        return f"{ms:.0f} ms" if math.isfinite(ms) else f"{ms} ms"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_seconds(seconds: float | None) -> str:
    """Epoch seconds (a worker's heartbeat times) as ISO 8601 in UTC."""
    return "" if seconds is None else iso(seconds * 1000)


def span(ms: float) -> str:
    """A length of time, short: ``850 ms``, ``12 s``, ``4 min``, ``3.0 h``, ``2.0 d`` (a
    unit turns over where the rounded figure would, never ``60 min``)."""
    ms = abs(ms)
    if ms < 999.5:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 59.5:
        return f"{seconds:.1f} s" if seconds < 9.95 else f"{seconds:.0f} s"
    if seconds < 3570:
        return f"{seconds / 60:.0f} min"
    if seconds < 86220:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def relative(ms: float | None, now_ms: float) -> str:
    """``12 s ago`` or ``in 4 min`` (by this host's clock); "" for None."""
    if ms is None or utc_moment(ms) is None:  # no date: iso() shows the number
        return ""
    delta = ms - now_ms
    if abs(delta) < 1000:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def pretty(value: Any) -> str:
    """A JSON value indented for reading (anything else by its repr)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


def compact(value: Any) -> str:
    """A JSON value on one line."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def call(task: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A job as a call, ``send_email("a@b.c", subject="hi")``, cut to a preview's length."""
    parts = [compact(arg) for arg in args]
    parts += [f"{name}={compact(value)}" for name, value in kwargs.items()]
    text = f"{task or '?'}({', '.join(parts)})"
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def job_call(info: JobInfo) -> str:
    """The preview of a job's call; a job without a readable payload says so, and one
    that kept its task but not its arguments (a complete job) shows ``task(…)``."""
    if info.task is None:
        if info.raw is not None:
            return "(undecodable payload)"
        return "(not kept)" if not info.arguments_kept else "(no payload)"
    if not info.arguments_kept:
        return f"{info.task}(…)"
    return call(info.task, info.args, info.kwargs)


def raw_bytes(raw: bytes | None) -> str:
    """Bytes that are not a job (poison entries): as text where they decode, else escaped."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "backslashreplace")


def fraction(progress: Any) -> float | None:
    """How far along a progress value says its job is, from 0 to 1, when it says so:
    ``{"done": 300, "of": 1000}`` (or ``"total"``), or a number from 0 to 1. Else None."""
    if isinstance(progress, dict):
        done, total = (
            _number(progress.get("done")),
            _number(progress.get("of", progress.get("total"))),
        )
        if done is None or total is None or total <= 0:
            return None
        return min(max(done / total, 0.0), 1.0)
    value = _number(progress)
    return value if value is not None and 0 <= value <= 1 else None


def _number(value: Any) -> float | None:
    """A JSON number as a float (not a bool); None for anything else."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def count(n: int) -> str:
    """An integer with thin thousands separators: ``12 345``."""
    return f"{n:,}".replace(",", "\u202f")


FILTERS = {
    "iso": iso,
    "iso_seconds": iso_seconds,
    "span": span,
    "pretty": pretty,
    "compact": compact,
    "job_call": job_call,
    "raw_bytes": raw_bytes,
    "count": count,
    "fraction": fraction,
}
"""The Jinja filters of the dashboard's templates (``relative`` needs the page's clock)."""
