"""The registry: what an App declares, and all a worker needs to know of it.

Tasks, topic subscribers, periodic specs, middleware, observers, and the startup and
shutdown hooks. The App fills it (``@app.task``, ``@app.subscriber``, ``@app.periodic``,
...) and hands it to each Worker it makes, so the worker depends on this, not on the App.
Registering checks everything it can at once: names taken twice, a task with limits
sharing its queue, a periodic job's arguments against its handler.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from .arguments import decoder_for
from .backoff import Exponential
from .errors import ConfigError
from .handlers import (
    SUBSCRIBER_PREFIX,
    TASK_DEFAULTS,
    UNLIMITED,
    Handler,
    RunRules,
    Subscriber,
    TaskKeywords,
    TaskOptions,
    check_call,
    check_carried,
    check_keywords,
)
from .payload import encode_payload
from .periodic import Missed, Periodic
from .priorities import DEFAULT_PRIORITY, resolve_priority

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from .limits import QueueLimits
    from .middleware import LifecycleHook, Middleware
    from .observers import Observer


class Schedule(TypedDict, total=False):
    """When a periodic job runs and what it is given: the keyword arguments of
    ``@app.periodic`` and ``app.add_periodic`` (see ``aioqueue.core.periodic``)."""

    cron: str | None  # a cron expression, in ``tz``...
    every: float | timedelta | None  # ...or an interval (exactly one of the two)
    tz: str  # default "UTC"
    args: Sequence[Any]
    kwargs: Mapping[str, Any] | None
    name: str | None  # default: the task's name
    missed: Missed  # "skip" (default) or "latest"
    misfire_grace: float  # seconds (default 60)


class Registry:
    """Everything an App registers, by name. ``default_queue`` is where a task without a
    queue goes, ``default_max_attempts`` what ``retries=None`` means."""

    def __init__(self, *, default_queue: str, default_max_attempts: int) -> None:
        self.default_queue = default_queue
        self.default_max_attempts = default_max_attempts
        self.tasks: dict[str, Handler[..., Any]] = {}
        self.subscribers: dict[str, Subscriber] = {}  # by run name
        self.periodic: dict[str, Periodic] = {}  # declared in code, by spec name
        self.middleware: list[Middleware] = []  # the first registered is outermost
        self.observers: tuple[Observer, ...] = ()
        self.startup_hooks: list[LifecycleHook] = []
        self.shutdown_hooks: list[LifecycleHook] = []

    # -- registering -----------------------------------------------------------------

    def add_task(self, task: Handler[Any, Any]) -> None:
        """Register a task; its name must be new, and a task with limits has its queue alone."""
        options = task.options
        if options.name in self.tasks:
            raise ConfigError(f"a task named {options.name!r} is registered already")
        for other in self.tasks.values():
            if other.options.queue != options.queue:
                continue
            limited = [each for each in (options, other.options) if each.limits()]
            if limited:
                raise ConfigError(
                    f"task {limited[0].name!r} declares limits, which are its queue's: give it "
                    f"a queue of its own (queue {options.queue!r} has {other.name!r} and "
                    f"{options.name!r})"
                )
        task.decoder = decoder_for(task.fn)  # once: a worker only tests it per job
        self.tasks[options.name] = task

    def add_subscriber(self, subscriber: Subscriber) -> None:
        if subscriber.run_name in self.subscribers:
            raise ConfigError(
                f"topic {subscriber.topic!r} has a subscriber for group {subscriber.group!r} "
                "already"
            )
        self.subscribers[subscriber.run_name] = subscriber

    def declare_periodic(self, task: object, schedule: Schedule) -> Periodic:
        """Declare a periodic run of ``task`` in code (``@app.periodic`` above ``@app.task``)."""
        if not isinstance(task, Handler):
            given = getattr(task, "__name__", None)
            what = f"the plain function {given!r}" if given else repr(task)
            raise ConfigError(
                f"@app.periodic(...) must be written above @app.task (it takes the task "
                f"@app.task makes), but it was given {what}"
            )
        spec = self.periodic_spec(task, schedule, declared=True)
        if spec.name in self.periodic:
            raise ConfigError(f"a periodic job named {spec.name!r} is declared already")
        self.periodic[spec.name] = spec
        return spec

    def periodic_spec(
        self,
        task: Handler[..., Any] | str,
        schedule: Schedule,
        *,
        queue: str | None = None,
        declared: bool,
    ) -> Periodic:
        """A periodic spec, its arguments checked against the task when it is known here."""
        task_name = task if isinstance(task, str) else task.name
        known = self.tasks.get(task_name)
        args, kwargs = tuple(schedule.get("args", ())), dict(schedule.get("kwargs") or {})
        _check_carried(task_name, args, kwargs, known)
        every = schedule.get("every")
        name = schedule.get("name")
        return Periodic(
            name=task_name if name is None else name,
            task=task_name,
            queue=queue or (known.options.queue if known else self.default_queue),
            cron=schedule.get("cron"),
            every=every.total_seconds() if isinstance(every, timedelta) else every,
            tz=schedule.get("tz", "UTC"),
            args=args,
            kwargs=kwargs,
            priority=known.options.priority if known else DEFAULT_PRIORITY,
            missed=schedule.get("missed", "skip"),
            misfire_grace=schedule.get("misfire_grace", 60.0),
            declared=declared,
        )

    def task_options(self, keywords: TaskKeywords) -> Callable[[str], TaskOptions]:
        """The options of a task declared with ``keywords``, checked now; the result takes
        the handler's name (the default task name)."""
        check_keywords(keywords, TaskKeywords)
        rules = self._rules(keywords)
        queue, name = keywords.get("queue"), keywords.get("name")
        priority = resolve_priority(keywords.get("priority", TASK_DEFAULTS.priority))
        return lambda handler_name: TaskOptions(
            name=handler_name if name is None else name,
            queue=self.default_queue if queue is None else queue,
            priority=priority,
            rate_limit=keywords.get("rate_limit"),
            burst=keywords.get("burst", 1),
            max_concurrency=keywords.get("max_concurrency"),
            **rules,
        )

    def subscriber_options(self, rules: RunRules) -> Callable[[str], TaskOptions]:
        """The options a subscriber's messages run under, checked now."""
        check_keywords(rules, RunRules)
        checked = self._rules(rules)
        return lambda handler_name: TaskOptions(
            name=handler_name, queue=self.default_queue, **checked
        )

    def _rules(self, rules: RunRules) -> dict[str, Any]:
        return {
            "timeout": rules.get("timeout", TASK_DEFAULTS.timeout),
            "max_attempts": self.max_attempts(rules.get("retries")),
            "backoff": rules.get("backoff") or Exponential(),
            "never_retry": rules.get("never_retry", TASK_DEFAULTS.never_retry),
            "dead_letter": rules.get("dead_letter", TASK_DEFAULTS.dead_letter),
        }

    def max_attempts(self, retries: int | Literal["forever"] | None) -> int:
        """What ``retries=`` of a task or subscriber means in attempts."""
        if retries is None:
            return self.default_max_attempts
        if retries == "forever":
            return UNLIMITED
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, 'forever' or None, got {retries!r}")
        return retries + 1

    # -- what a worker reads ---------------------------------------------------------

    def find_task(self, name: str) -> Handler[..., Any] | None:
        """The task a job names (or the subscriber a topic message runs as)."""
        task = self.tasks.get(name)
        if task is None and name.startswith(SUBSCRIBER_PREFIX):
            subscriber = self.subscribers.get(name)
            return None if subscriber is None else subscriber.task
        return task

    def unknown_task(self, name: str, queue: str) -> str | None:
        """Why enqueueing a task by ``name`` on ``queue`` is a mistake, or None: this app
        registers tasks on that queue, none of them so named (a typo, most likely; an app
        with none there may be a producer that lacks the code)."""
        if self.find_task(name) is not None:
            return None
        names = sorted(t.name for t in self.tasks.values() if t.options.queue == queue)
        if not names:
            return None
        close = _close_matches(name, names)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else ""
        listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        return (
            f"no task {name!r} on queue {queue!r} in this app, whose tasks there are "
            f"{listed}: {hint or 'enqueue one of those'}"
        )

    def unused_queue(self, queue: str) -> str | None:
        """Why serving ``queue`` looks like a mistake, or None: no task of this app uses it
        (a worker would bury each of its jobs as an unknown task), naming close ones."""
        if queue in self.queue_names():
            return None
        close = _close_matches(queue, self.queue_names())
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        return f"no task of this app uses queue {queue!r} (its jobs would be buried){hint}"

    def queue_names(self) -> list[str]:
        """Every queue a registered task uses, plus the default queue."""
        return sorted({self.default_queue, *(t.options.queue for t in self.tasks.values())})

    def declared_limits(self, queue: str) -> QueueLimits | None:
        """The limits a task of ``queue`` declares (``rate_limit``, ``max_concurrency``)."""
        for task in self.tasks.values():
            if task.options.queue == queue and (limits := task.options.limits()):
                return limits
        return None

    def declared_periodic(self, queue: str) -> list[Periodic]:
        """The periodic specs declared in code for one queue."""
        return [spec for spec in self.periodic.values() if spec.queue == queue]


def _close_matches(name: str, names: Iterable[str]) -> list[str]:
    """The names that look like ``name``, for "did you mean" hints."""
    import difflib  # (here: only a mistake needs it, never a worker's start)

    return difflib.get_close_matches(name, names, n=3, cutoff=0.6)


def _check_carried(
    task: str, args: tuple[Any, ...], kwargs: dict[str, Any], known: Handler[..., Any] | None
) -> None:
    """A periodic spec's arguments are checked as an enqueue's are, once, when it is made
    (not at every tick, in a worker's log)."""
    check_call(task, known, args, kwargs)
    raw = encode_payload(task, args, kwargs, None, sys.maxsize)  # (its size: checked per tick)
    check_carried(raw, task, known, args, kwargs)
