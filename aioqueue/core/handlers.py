"""What runs: a registered handler (``Handler``), its options (``TaskOptions``), and a
topic's subscriber (``Subscriber``). The registry holds them; the worker runs them; the
producer side's ``Task`` is a Handler that can also be enqueued."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypedDict, TypeVar

from .arguments import check_sent, plain
from .backoff import Backoff, Exponential
from .dependencies import injection_for
from .errors import ConfigError, InvalidArguments
from .keys import validate_name
from .limits import QueueLimits, make_limits
from .middleware import FailureHook, RetryHook, SuccessHook, TaskHooks
from .priorities import DEFAULT_PRIORITY, resolve_priority
from .settings import APP_DEFAULTS, DEFAULT_QUEUE, check_timeout

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from .arguments import ArgumentDecoder
    from .dependencies import Injection

P = ParamSpec("P")
R = TypeVar("R")

SUBSCRIBER_PREFIX = "topic:"  # a subscriber's run name: "topic:<topic>/<group>"

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


class RunRules(TypedDict, total=False):
    """How each run of a task or a subscriber is treated: the keyword arguments that
    ``@app.task`` and ``@app.subscriber`` share."""

    timeout: float | None  # seconds per run (default 300; None: no timeout)
    retries: int | Literal["forever"] | None  # runs after a failure (None: the app's default)
    backoff: Backoff | None  # the delay before each retry (default: exponential with jitter)
    never_retry: tuple[type[BaseException], ...]  # errors that end the job at once
    dead_letter: bool  # keep failed jobs in the dead set (default True)


class TaskKeywords(RunRules, total=False):
    """The keyword arguments of ``@app.task(...)``."""

    name: str | None  # default: the handler's name
    queue: str | None  # default: the app's default queue
    priority: int | str  # 0..9 or a level's name (default 5)
    rate_limit: str | None  # its queue's rate, "100/s"
    burst: int  # starts allowed at once under the rate (default 1)
    max_concurrency: int | None  # its queue's jobs running at once, at most


def check_keywords(given: Mapping[str, object], allowed: type) -> None:
    """A keyword the TypedDict ``allowed`` does not name is a TypeError, as it is for a
    function's keyword arguments (a typo must not be dropped silently)."""
    unknown = sorted(set(given) - set(allowed.__annotations__))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")


class Handler(Generic[P, R]):
    """A registered handler with its options and hooks: what a worker runs for a job.

    Calling it runs the handler in-process (an async handler returns its coroutine).
    Its parameters declared with ``Depends()`` are no job arguments: ``injection`` says
    what the worker fills them with (None: it has none), ``signature`` is what a job's
    arguments bind to (the handler's, without them).
    """

    __slots__ = (
        "_priority", "_shapes", "decoder", "fn", "hooks", "injection", "is_async", "options",
        "signature",
    )  # fmt: skip

    def __init__(
        self, fn: Callable[P, Awaitable[R]] | Callable[P, R], options: TaskOptions
    ) -> None:
        self.fn = fn
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        # read once: a worker pays a truth test per job for a handler with no Depends()
        self.injection: Injection | None = injection_for(fn, f"task {options.name!r}")
        injection = self.injection
        self.signature = inspect.signature(fn) if injection is None else injection.job_signature
        self.hooks = TaskHooks()
        self._priority = resolve_priority(options.priority)  # every enqueue reads it
        self._shapes: dict[tuple[int, frozenset[str]], str | None] = {}
        # how its JSON arguments become what its annotations declare (None: nothing to
        # do); a task's is read when it is registered (Registry.add_task)
        self.decoder: ArgumentDecoder | None = None

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def priority(self) -> int:
        """The task's default priority level, 0..9 (its option may be a name)."""
        return self._priority

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, queue={self.options.queue!r})"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the handler in-process (an async handler returns its coroutine). Its
        injected parameters are not filled here: pass them (``db=...``)."""
        if self.injection is not None and (missing := self.injection.names - kwargs.keys()):
            names = ", ".join(map(self.injection.describe, sorted(missing)))
            raise TypeError(
                f"{self.name}: called in-process, its injected parameter(s) {names} must be "
                "passed by name (a worker fills them; a direct call does not)"
            )
        return self.fn(*args, **kwargs)

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
        try:
            error = self._shapes[shape]
        except KeyError:  # a shape not seen yet
            if len(self._shapes) > 256:  # callers with endlessly varied keywords
                self._shapes.clear()
            error = self._shapes[shape] = self._refusal(args, kwargs)
        if error is not None:
            raise TypeError(error)

    def _refusal(self, args: Any, kwargs: Any) -> str | None:
        """Why these arguments do not bind to the handler's job parameters, or None."""
        injection = self.injection
        if injection is not None and (given := injection.names & kwargs.keys()):
            names = ", ".join(map(injection.describe, sorted(given)))
            if len(given) == 1:
                return (
                    f"parameter {names} is filled by the worker, not a job argument: leave it out"
                )
            return f"parameters {names} are filled by the worker, not job arguments: leave them out"
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            if injection is None:
                return str(exc)
            names = ", ".join(map(injection.describe, sorted(injection.names)))
            return f"{exc} (not counting {names}, which the worker fills)"
        return None


class Subscriber:
    """A handler registered with ``@app.subscriber(topic, group=...)``: aioqueue workers
    call it once per message of the topic for its group, with the message body as its
    one argument (with ``batch``: a list of up to that many bodies). Hooks attach as on
    a task (``@analyse.on_dead``); calling it runs the handler in-process."""

    def __init__(
        self, topic: str, group: str, task: Handler[..., Any], batch: int | None = None
    ) -> None:
        self.topic, self.group, self.task, self.batch = topic, group, task, batch

    @property
    def run_name(self) -> str:
        """The name its messages run under (never a task's: tasks have no colon)."""
        return subscriber_run_name(self.topic, self.group)

    def __repr__(self) -> str:
        return f"Subscriber({self.topic!r}, group={self.group!r})"

    def __call__(self, body: Any) -> Any:
        """Run the handler in-process (a test's shortcut)."""
        return self.task(body)

    def on_success(self, hook: SuccessHook) -> SuccessHook:
        return self.task.on_success(hook)

    def on_failure(self, hook: FailureHook) -> FailureHook:
        return self.task.on_failure(hook)

    def on_retry(self, hook: RetryHook) -> RetryHook:
        return self.task.on_retry(hook)

    def on_dead(self, hook: FailureHook) -> FailureHook:
        return self.task.on_dead(hook)


def subscriber_run_name(topic: str, group: str) -> str:
    return f"{SUBSCRIBER_PREFIX}{topic}/{group}"


def check_subscriber(fn: Callable[..., Any], topic: str, group: str) -> None:
    """A subscriber takes the message body as its one positional argument (and what it
    declares with ``Depends()``)."""
    validate_name("topic", topic)
    validate_name("subscriber group", group)
    injection = injection_for(fn, f"subscriber {fn.__name__!r} of topic {topic!r}")
    signature = inspect.signature(fn) if injection is None else injection.job_signature
    try:
        signature.bind(None)
    except TypeError as exc:
        raise ConfigError(
            f"subscriber {fn.__name__!r} of topic {topic!r} must take the message body as "
            f"its one argument: {exc}"
        ) from exc


def check_call(
    task: str,
    known: Handler[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    skip: int = 0,
) -> None:
    """InvalidArguments unless the task (when this app has it: ``known``) takes these
    arguments, after ``skip`` positional ones the worker fills first (a workflow parent's
    inputs). The enqueue's check, and a periodic spec's."""
    if known is None:
        return
    try:
        known.check_arguments((None,) * skip + tuple(args) if skip else args, kwargs)
    except TypeError as exc:
        raise InvalidArguments(f"task {task!r} cannot take these arguments: {exc}") from exc


def check_carried(
    raw: bytes,
    task: str,
    known: Handler[..., Any] | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    skip: int = 0,
) -> None:
    """SerializationError unless the arguments encoded in the payload ``raw`` arrive as
    sent (``arguments.check_sent``); plain ones to a task that decodes nothing always do,
    so most calls skip the read-back."""
    decoder = None if known is None else known.decoder
    if decoder is not None or not plain(args, kwargs):
        handler = None if known is None else known.fn
        check_sent(raw, args, kwargs, task=task, handler=handler, decoder=decoder, skip=skip)
