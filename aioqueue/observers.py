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
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

logger = logging.getLogger(__name__)


class JobEvent(NamedTuple):
    """One attempt of a job, as an observer sees it (a tuple: built once per job, cheaply)."""

    id: str
    queue: str
    task: str  # "?" when its payload could not be decoded
    attempt: int  # 1 on the first run
    waited: float | None  # seconds it was ready before a worker took it (Redis clock)


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

    def __bool__(self) -> bool:
        return bool(self.started or self.ended)


def _overrides(observer: Observer, method: str) -> bool:
    return getattr(type(observer), method) is not getattr(Observer, method)


def notify(callbacks: tuple[Callable[..., None], ...], *args: object) -> None:
    """Call each callback; log (never raise) what one raises."""
    for callback in callbacks:
        try:
            callback(*args)
        except Exception:
            logger.exception("observer callback %r failed", callback)
