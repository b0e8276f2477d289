"""Tasks: a registered handler, its options, and a typed handle to enqueue it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from .backoff import Backoff, Exponential
from .errors import ConfigError
from .limits import QueueLimits, make_limits
from .middleware import FailureHook, RetryHook, SuccessHook, TaskHooks
from .priorities import DEFAULT_PRIORITY, resolve_priority
from .settings import APP_DEFAULTS, DEFAULT_QUEUE, check_timeout
from .store.keys import validate_name

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .job import Job
    from .queue import EnqueueCall, Queue

P = ParamSpec("P")
Rest = ParamSpec("Rest")
R = TypeVar("R")


UNLIMITED = -1
"""``max_attempts`` of a task with ``retries="forever"``: only ``never_retry`` errors and
cancellation end its job (its record's ``m`` field says -1 too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOptions:
    """Per-task settings, given on the decorator and kept apart from the task's arguments."""

    name: str
    queue: str
    timeout: float | None = 300.0
    max_attempts: int = APP_DEFAULTS.default_max_attempts  # app.task() passes the app's
    backoff: Backoff = field(default_factory=Exponential)
    priority: int = DEFAULT_PRIORITY
    never_retry: tuple[type[BaseException], ...] = ()
    dead_letter: bool = True
    rate_limit: str | None = None  # its queue's rate ("100/s"): see ``limits``
    burst: int = 1
    max_concurrency: int | None = None  # its queue's jobs running at once, at most

    def __post_init__(self) -> None:
        validate_name("task", self.name)
        validate_name("queue", self.queue)
        check_timeout(self.timeout, f"task {self.name}")
        if self.max_attempts < 1 and self.max_attempts != UNLIMITED:
            raise ConfigError(f"task {self.name}: max_attempts must be at least 1")
        resolve_priority(self.priority)
        self.limits()  # (checks them)

    def limits(self) -> QueueLimits | None:
        """The limits this task declares for its queue, or None if it declares none."""
        if self.rate_limit is None and self.max_concurrency is None and self.burst == 1:
            return None
        try:
            return make_limits(
                rate=self.rate_limit, burst=self.burst, concurrency=self.max_concurrency
            )
        except ConfigError as exc:
            raise ConfigError(f"task {self.name}: {exc}") from exc


TASK_DEFAULTS = TaskOptions(name="task", queue=DEFAULT_QUEUE)
"""The defaults of ``@app.task(...)``, read from TaskOptions' fields."""


class Task(Generic[P, R]):
    """A registered handler. Call it to run it in-process; ``.enqueue(...)`` to queue it.

    ``enqueue`` takes exactly the handler's parameters (checked by the type checker through
    ParamSpec); per-call options go on the returned call: ``.options(delay=60)``.
    """

    __slots__ = (
        "_priority", "_queue_for", "_shapes", "fn", "hooks", "is_async", "options", "signature",
    )  # fmt: skip

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        options: TaskOptions,
        queue_for: Callable[[str], Queue],
    ) -> None:
        self.fn = fn
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self.hooks = TaskHooks()
        self._queue_for = queue_for
        self._priority = resolve_priority(options.priority)  # every enqueue reads it
        self._shapes: dict[tuple[int, frozenset[str]], str | None] = {}

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def priority(self) -> int:
        """The task's default priority level, 0..9 (its option may be a name)."""
        return self._priority

    def __repr__(self) -> str:
        return f"Task({self.name!r}, queue={self.options.queue!r})"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the handler in-process (an async handler returns its coroutine)."""
        return self.fn(*args, **kwargs)

    def job(self, job_id: str) -> Job[R]:
        """A handle on an existing job of this task's queue, by id."""
        return self._queue_for(self.options.queue).job(job_id)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueCall[R]:
        """Queue one run of this task on its queue; await the result for a Job handle."""
        return self._queue_for(self.options.queue).enqueue(self, *args, **kwargs)

    def callback(
        self: Task[Concatenate[Any, Rest], R], *args: Rest.args, **kwargs: Rest.kwargs
    ) -> EnqueueCall[R]:
        """A call for a workflow's parent: a chain's later step, a chord's or a batch's
        callback. It takes the handler's parameters but the first, which is filled in when
        it runs, with its children's outcomes (``aioqueue.workflows``)."""
        queue = self._queue_for(self.options.queue)
        return cast("EnqueueCall[R]", queue.enqueue(cast("Any", self), *args, **kwargs))

    def on_success(self, hook: SuccessHook) -> SuccessHook:
        """Decorator: ``hook(job, result)`` after each successful run."""
        self.hooks.success.append(hook)
        return hook

    def on_failure(self, hook: FailureHook) -> FailureHook:
        """Decorator: ``hook(job, error)`` after each failed attempt (retried or not)."""
        self.hooks.failure.append(hook)
        return hook

    def on_retry(self, hook: RetryHook) -> RetryHook:
        """Decorator: ``hook(job, error, delay_seconds)`` when a failed attempt will retry."""
        self.hooks.retry.append(hook)
        return hook

    def on_dead(self, hook: FailureHook) -> FailureHook:
        """Decorator: ``hook(job, error)`` when the job fails for good (dead or failed)."""
        self.hooks.dead.append(hook)
        return hook

    def check_arguments(self, args: Any, kwargs: Any) -> None:
        """Raise TypeError when the handler cannot take these arguments.

        Whether a call binds depends only on its shape (how many positional arguments,
        which keywords), so the verdict is cached per shape: a few hundred ns per job
        instead of a full ``Signature.bind``.
        """
        shape = (len(args), frozenset(kwargs))
        if shape not in self._shapes:
            if len(self._shapes) > 256:  # callers with endlessly varied keywords
                self._shapes.clear()
            try:
                self.signature.bind(*args, **kwargs)
                self._shapes[shape] = None
            except TypeError as exc:
                self._shapes[shape] = str(exc)
        error = self._shapes[shape]
        if error is not None:
            raise TypeError(error)
