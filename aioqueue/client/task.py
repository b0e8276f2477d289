"""Task: a registered handler that producers enqueue by its typed handle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast, overload

from ..core.handlers import Handler

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from ..core.handlers import TaskOptions
    from .job import Job
    from .queue import EnqueueCall, Queue

P = ParamSpec("P")
Rest = ParamSpec("Rest")
R = TypeVar("R")


class Task(Handler[P, R]):
    """A registered handler. Call it to run it in-process; ``.enqueue(...)`` to queue it.

    ``enqueue`` takes exactly the handler's parameters (checked by the type checker through
    ParamSpec); per-call options go on the returned call: ``.options(delay=60)``.
    """

    __slots__ = ("_queue_for",)

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        options: TaskOptions,
        queue_for: Callable[[str], Queue],
    ) -> None:
        super().__init__(fn, options)
        self._queue_for = queue_for

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
        it runs, with its children's outcomes (``aioqueue.client.workflows``)."""
        queue = self._queue_for(self.options.queue)
        return cast("EnqueueCall[R]", queue.enqueue(cast("Any", self), *args, **kwargs))


class TaskDecorator:
    """What ``@app.task(...)`` returns: applied to a handler, it registers a Task."""

    def __init__(self, register: Callable[[Callable[..., Any]], Task[..., Any]]) -> None:
        self._register = register

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Task[..., Any]:
        return self._register(fn)
