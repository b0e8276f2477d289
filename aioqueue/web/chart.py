"""The throughput chart: a queue's outcomes per minute as stacked bars, laid out here
and drawn as inline SVG by the ``_chart.html`` template (no JavaScript, no library)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..core.records import MinuteCounts

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

WIDTH, HEIGHT = 1140, 220  # about the pixels it gets on a laptop: text keeps its size
LEFT, RIGHT, TOP, BOTTOM = 44, 6, 8, 22
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
GRID_LINES = 4


@dataclass(frozen=True, slots=True)
class Segment:
    """One outcome's part of a bar: ``kind`` is its CSS class (complete, failed, cancelled)."""

    kind: str
    y: float
    height: float


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    segments: tuple[Segment, ...]
    title: str


@dataclass(frozen=True, slots=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """Everything the template needs, in SVG user units (``viewBox="0 0 width height"``)."""

    width: int
    height: int
    left: int
    right: float
    top: int
    bottom: float
    bars: tuple[Bar, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    complete: int
    failed: int  # failed for good: dead or failed
    retried: int  # failed attempts that ran again
    cancelled: int

    @property
    def empty(self) -> bool:
        return not (self.complete or self.failed or self.retried or self.cancelled)


def merge(histories: Iterable[Sequence[MinuteCounts]]) -> list[MinuteCounts]:
    """Several queues' histories summed minute by minute (oldest first)."""
    totals: dict[int, list[int]] = {}
    for history in histories:
        for minute in history:
            row = totals.setdefault(minute.minute_ms, [0, 0, 0, 0, 0])
            for i, n in enumerate(_outcomes(minute)):
                row[i] += n
    return [MinuteCounts(ms, *row) for ms, row in sorted(totals.items())]


def _outcomes(minute: MinuteCounts) -> tuple[int, int, int, int, int]:
    return minute.complete, minute.retried, minute.failed, minute.dead, minute.cancelled


def nice_step(peak: int) -> int:
    """The gridline step (1, 2 or 5 times a power of ten) whose top line reaches ``peak``."""
    magnitude = 1
    while True:
        for factor in (1, 2, 5):
            if factor * magnitude * GRID_LINES >= peak:
                return factor * magnitude
        magnitude *= 10


def throughput(history: Sequence[MinuteCounts]) -> Chart:
    """Lay out one bar per minute: completed at the bottom, then failed for good (dead or
    failed), retried attempts, and cancelled."""
    peak = max((m.complete + m.failures + m.cancelled for m in history), default=0)
    step = nice_step(peak)
    top_value = step * GRID_LINES
    slot = PLOT_W / max(len(history), 1)
    bars = [_bar(minute, LEFT + i * slot, slot, top_value) for i, minute in enumerate(history)]
    y_ticks = tuple(
        Tick(round(TOP + PLOT_H - PLOT_H * k / GRID_LINES, 2), str(step * k))
        for k in range(GRID_LINES + 1)
    )
    x_ticks = tuple(
        Tick(round(LEFT + i * slot + slot / 2, 2), _clock(history[i].minute_ms))
        for i in range(0, len(history), 15)
    )
    return Chart(
        width=WIDTH, height=HEIGHT, left=LEFT, right=WIDTH - RIGHT, top=TOP,
        bottom=TOP + PLOT_H, bars=tuple(bars), y_ticks=y_ticks, x_ticks=x_ticks,
        complete=sum(m.complete for m in history),
        failed=sum(m.failed_for_good for m in history),
        retried=sum(m.retried for m in history),
        cancelled=sum(m.cancelled for m in history),
    )  # fmt: skip


def _bar(minute: MinuteCounts, left: float, slot: float, top_value: float) -> Bar:
    """One minute's bar in the slot that starts at ``left``, its segments stacked from the
    bottom: completed, failed for good, retried, then cancelled."""
    base: float = TOP + PLOT_H
    segments = []
    for kind, value in (
        ("complete", minute.complete),
        ("failed", minute.failed_for_good),
        ("retried", minute.retried),
        ("cancelled", minute.cancelled),
    ):
        if value:
            height = PLOT_H * value / top_value
            base -= height
            segments.append(Segment(kind, round(base, 2), round(height, 2)))
    title = (
        f"{_clock(minute.minute_ms)} UTC: {minute.complete} completed, "
        f"{minute.failed_for_good} failed for good, {minute.retried} retried, "
        f"{minute.cancelled} cancelled"
    )
    x = left + slot * 0.125
    return Bar(round(x, 2), round(slot * 0.75, 2), tuple(segments), title)


def _clock(minute_ms: int) -> str:
    return datetime.fromtimestamp(minute_ms / 1000, tz=UTC).strftime("%H:%M")
