"""Observers: what metrics and tracing see of an app, through a few cheap callbacks.

An ``Observer`` is told of each enqueue (and may add headers to the job, e.g. a W3C
trace context, which its handler's ``current_job().headers`` reads back), of each job a
worker starts, and of how each attempt ended. Subclass it, override what you need, and
register it with ``app.add_observer()``. Callbacks run on the hot path: keep them quick.
One that raises is logged and never changes what happens to a job. With no observer
registered, none of this costs anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from .lifecycle import Taken

logger = logging.getLogger(__name__)


class JobEvent:
    """One attempt of a job, as an observer sees it: ``id``, ``queue``, ``task`` ("?" when
    its payload could not be decoded), ``attempt`` (1 on the first run) and ``waited``
    (seconds it was ready before a worker took it, on the Redis clock, a delayed job's
    from its due time; None if unknown).

    Built for each callback, so it is cheap: ``id``, ``attempt`` and ``waited`` are read
    from the taken job only when asked for."""

    __slots__ = ("_taken", "queue", "task")

    def __init__(self, taken: Taken, queue: str, task: str) -> None:
        self._taken, self.queue, self.task = taken, queue, task

    @property
    def id(self) -> str:
        return self._taken.job_id

    @property
    def attempt(self) -> int:
        return self._taken.attempts

    @property
    def waited(self) -> float | None:
        waited_ms = self._taken.waited_ms
        return waited_ms / 1000 if waited_ms >= 0 else None

    def __repr__(self) -> str:
        fields = f"id={self.id!r}, queue={self.queue!r}, task={self.task!r}"
        return f"JobEvent({fields}, attempt={self.attempt})"


class Observer:
    """Base class of observers: every callback does nothing unless overridden."""

    def enqueuing(
        self, queue: str, task: str, headers: dict[str, str]
    ) -> AbstractContextManager[None] | None:
        """A job is about to be written: add to ``headers`` what its run should carry.
        A context manager returned here is exited once the write is done (or failed)."""
        return None

    def job_started(self, job: JobEvent) -> None:
        """A worker starts running ``job``'s handler."""

    def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
        """An attempt ended: ``outcome`` is complete, retry, bury (dead), fail, abort
        (cancelled) or release (handed back by a stopping worker); ``seconds`` it ran."""


@dataclass(frozen=True, slots=True)
class JobWatchers:
    """The job callbacks of an app's observers, looked up once per worker. Only those an
    observer overrides are kept: a worker whose observers watch no job pays nothing per
    job, and the others pay a call per callback that does something."""

    started: tuple[Callable[[JobEvent], None], ...] = ()
    ended: tuple[Callable[[JobEvent, str, float], None], ...] = ()

    @classmethod
    def of(cls, observers: tuple[Observer, ...]) -> JobWatchers:
        return cls(
            tuple(o.job_started for o in observers if _overrides(o, "job_started")),
            tuple(o.job_ended for o in observers if _overrides(o, "job_ended")),
        )


def _overrides(observer: Observer, method: str) -> bool:
    return getattr(type(observer), method) is not getattr(Observer, method)


def notify(callbacks: tuple[Callable[..., None], ...], *args: object) -> None:
    """Call each callback; log (never raise) what one raises."""
    for callback in callbacks:
        try:
            callback(*args)
        except Exception:
            logger.exception("observer callback %r failed", callback)
