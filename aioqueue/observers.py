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
    from contextlib import AbstractContextManager

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One attempt of a job, as an observer sees it."""

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


def notify(observers: tuple[Observer, ...], method: str, *args: object) -> None:
    """Call ``method`` of each observer; log (never raise) what one raises."""
    for observer in observers:
        try:
            getattr(observer, method)(*args)
        except Exception:
            logger.exception("observer %r failed in %s", observer, method)
