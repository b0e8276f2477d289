"""Workflows: jobs that wait for other jobs, counted inside Redis.

A ``Flow`` is a parent job and the children it waits for (each child a job, or a flow of
its own: a tree). The whole tree is written at once, parents first, by
``enqueue_linked.lua`` (``client/trees.py``); from then on the scripts that settle jobs
keep the counts (``store/lua/include/links.lua``): a child that finishes for good counts
in its parent once (a re-run never counts twice), and the parent runs when none is
pending, with its children's outcomes as its first argument. Nothing polls, and every
count moves in the same atomic step as the settlement it follows: a worker killed
mid-workflow loses nothing.

``chain(a, b, c)``: b runs with a's result, c with b's. ``chord(jobs, callback)``: the
callback runs with every job's result, in order. ``Batch``: jobs whose callbacks run once
all have settled, with their counts.

A workflow may span queues: a parent's counts live in its own queue's slot, updated
atomically with each settlement there; a child on another queue hands its outcome off
(``worker/delivery.py``: ``HandOff``), so no script ever touches two Cluster slots.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from redis.exceptions import RedisError

from ..core.errors import ConfigError, JobNotFound
from ..core.records import JobStatus
from ..store import reads
from ..store.connection import failure
from .enqueue import NO_OPTIONS, new_job_id
from .job import Job
from .queue import EnqueueCall
from .trees import JobTree

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence
    from types import TracebackType

    from .queue import Queue
    from .trees import Parent

R = TypeVar("R")

ChildFailurePolicy = Literal["fail", "ignore"]
"""What a failed child (dead, failed, cancelled or expired) does to its parent: "fail" it
at once (its task never runs; the error is ``ChildFailed``), or "ignore" it (the parent
runs once every child has settled, with a ``ChildFailed`` in that child's place)."""

_POLICY_CODES = {"fail": "f", "ignore": "i"}


class Flow(Generic[R]):
    """A parent job and the children it waits for: ``await`` it to enqueue the whole tree.

    The parent's task runs with its children's results as its first argument (a list, in
    the order given; ``inputs="first"``: the one child's result, as a chain does), then the
    arguments of its own call. A child is a task call (``task.enqueue(...)``, not awaited)
    or a Flow, whose parent is then the child."""

    __slots__ = ("call", "children", "inputs", "policy")

    def __init__(
        self,
        parent: EnqueueCall[R],
        children: Sequence[EnqueueCall[Any] | Flow[Any]],
        *,
        on_child_failure: ChildFailurePolicy = "fail",
        inputs: Literal["list", "first"] = "list",
    ) -> None:
        if inputs not in ("list", "first"):
            raise ConfigError(f"inputs must be 'list' or 'first', not {inputs!r}")
        if not _is_call(parent):
            raise ConfigError(
                f"a flow's parent is a task call (task.callback(...)), not {parent!r}"
            )
        if on_child_failure not in _POLICY_CODES:
            raise ConfigError(
                f"on_child_failure must be 'fail' or 'ignore', not {on_child_failure!r}"
            )
        if not children:
            raise ConfigError("a flow needs at least one child")
        for child in children:
            if not (_is_call(child) or isinstance(child, Flow)):
                raise ConfigError(
                    f"a flow's child is a task call (task.enqueue(...), not awaited) or a "
                    f"flow, not {child!r}"
                )
        self.call, self.children, self.inputs = parent, tuple(children), inputs
        self.policy = _POLICY_CODES[on_child_failure]

    def __await__(self) -> Generator[Any, None, Workflow[R]]:
        return _submit(self).__await__()


def flow(
    parent: EnqueueCall[R],
    children: Sequence[EnqueueCall[Any] | Flow[Any]],
    *,
    on_child_failure: ChildFailurePolicy = "fail",
) -> Flow[R]:
    """``parent`` runs once all ``children`` have completed, with their results (a list, in
    order) as its first argument. See ``ChildFailurePolicy`` for failed children."""
    return Flow(parent, children, on_child_failure=on_child_failure)


def chord(
    header: Sequence[EnqueueCall[Any] | Flow[Any]],
    callback: EnqueueCall[R],
    *,
    on_child_failure: ChildFailurePolicy = "fail",
) -> Flow[R]:
    """Run every job of ``header`` (in parallel), then ``callback`` with their results."""
    return Flow(callback, header, on_child_failure=on_child_failure)


def chain(first: EnqueueCall[Any] | Flow[Any], *steps: EnqueueCall[Any]) -> Flow[Any]:
    """Run the steps one after another, each with the one before's result as its first
    argument; a step that fails for good stops the chain (the later ones end failed).
    The first step may be a flow (a chord, say); ``await`` the chain for its last step."""
    if not steps:
        raise ConfigError("a chain needs at least two steps")
    node: EnqueueCall[Any] | Flow[Any] = first
    for step in steps:
        if isinstance(step, Flow):
            raise ConfigError("only a chain's first step may be a flow")
        node = Flow(step, [node], inputs="first")
    assert isinstance(node, Flow)
    return node


@dataclass(frozen=True, slots=True)
class FlowStatus:
    """A parent's own state and its direct children's counts."""

    status: JobStatus
    children: int
    pending: int
    complete: int
    failed: int


class Workflow(Generic[R]):
    """The handle of an enqueued flow: its root job (the last to run), its status."""

    __slots__ = ("job", "queue")

    def __init__(self, queue: Queue, job: Job[R]) -> None:
        self.queue, self.job = queue, job

    @property
    def id(self) -> str:
        return self.job.id

    def __repr__(self) -> str:
        return f"Workflow(id={self.id!r}, queue={self.queue.name!r})"

    async def result(self, *, timeout: float | None = None) -> R:
        """The root job's result, once it has run (``Job.result``: raises JobFailed with
        error type ChildFailed if a child failed it)."""
        return await self.job.result(timeout=timeout)

    async def status(self) -> FlowStatus:
        """The root's state and its direct children's counts (one read)."""
        return await flow_status(self.queue, self.id)


async def flow_status(queue: Queue, job_id: str) -> FlowStatus:
    """A parent's state and its children's counts; JobNotFound if it has no record."""
    redis = await queue._host.client()
    try:
        state, total, pending, complete, failed = await reads.flow_counts(redis, queue.keys, job_id)
    except RedisError as exc:
        raise failure(exc, queue._host.redis_url or "") or exc from exc
    if state is None:
        raise JobNotFound(job_id)
    counts = (int(value or 0) for value in (total, pending, complete, failed))
    return FlowStatus(JobStatus(state.decode()), *counts)


# -- writing one ---------------------------------------------------------------------------


def _is_call(node: object) -> bool:
    return isinstance(node, EnqueueCall)


def _queue_of(node: Flow[Any] | EnqueueCall[Any]) -> Queue:
    return node.call._queue if isinstance(node, Flow) else node._queue


def _add_flow(tree: JobTree, root: Flow[Any], stack: contextlib.ExitStack | None) -> str:
    """Every job of the flow ``root`` into ``tree``, breadth first; the root's id."""
    root_id = ""
    pending: deque[tuple[Flow[Any] | EnqueueCall[Any], Parent | None]] = deque([(root, None)])
    while pending:
        node, parent = pending.popleft()
        job_id = None if parent is None else f"{parent[1]}/{parent[2]}"
        if isinstance(node, Flow):
            queue = node.call._queue
            remote = sum(_queue_of(child) is not queue for child in node.children)
            new = tree.add_call(
                node.call, job_id, parent=parent, spec=node.policy + "1", inputs=node.inputs,
                remote_children=remote, stack=stack,
            )  # fmt: skip
            pending.extend((child, (queue, new.id, i)) for i, child in enumerate(node.children, 1))
        else:
            new = tree.add_call(node, job_id, parent=parent, stack=stack)
        root_id = root_id or new.id
    return root_id


async def _submit(root: Flow[R]) -> Workflow[R]:
    queue = root.call._queue
    tree = JobTree()
    with contextlib.ExitStack() as stack:
        root_id = _add_flow(tree, root, stack if queue._host.registry.observers else None)
        created = await tree.write()
    await queue._host.eager_mode.run()  # (tests: ``App.eager``; else nothing)
    return Workflow(queue, Job(queue, root_id, created=created))


# -- batches -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """How a batch's jobs ended: every one counted once, when it settled for good."""

    total: int
    succeeded: int
    failed: int


class Batch:
    """Jobs enqueued together whose callbacks run once all of them have settled.

    ``async with app.batch(on_complete=report.enqueue()) as batch:`` then ``batch.add(...)``
    each job (a task call, not awaited); the jobs are written when the block exits (none if
    it raises). ``on_complete`` runs once every job has settled, ``on_success`` only if every
    one succeeded (else it ends failed, ChildFailed, without running); each gets the
    batch's counts (a dict: total, succeeded, failed) as its first argument. ``await
    batch.wait()`` for the counts without a callback."""

    def __init__(
        self,
        queue: Queue,
        *,
        on_complete: EnqueueCall[Any] | None = None,
        on_success: EnqueueCall[Any] | None = None,
    ) -> None:
        for callback in (on_complete, on_success):
            if callback is not None and not _is_call(callback):
                raise ConfigError(f"a batch's callback is a task call, not {callback!r}")
            if callback is not None and callback._queue is not queue:
                raise ConfigError(
                    f"a batch's callbacks run on its queue {queue.name!r}, "
                    f"not {callback._queue.name!r}"
                )
        self.queue = queue
        self.id = new_job_id()
        self._callbacks = (on_complete, on_success)
        self._calls: list[EnqueueCall[Any]] = []
        self._written = False

    def __repr__(self) -> str:
        return f"Batch(id={self.id!r}, queue={self.queue.name!r}, jobs={len(self._calls)})"

    def add(self, call: EnqueueCall[Any]) -> None:
        """Add a job (``task.enqueue(...)``, not awaited): written when the block exits."""
        if self._written:
            raise ConfigError("this batch has been written: start a new one")
        if not _is_call(call):
            raise ConfigError(
                f"a batch takes task calls (task.enqueue(...), not awaited), not {call!r}"
            )
        if call._options.id is not None:
            raise ConfigError("a batch's jobs get generated ids")
        if call._queue is not self.queue:
            raise ConfigError(
                f"a batch's jobs share its queue {self.queue.name!r}, not {call._queue.name!r}"
            )
        self._calls.append(call)

    async def __aenter__(self) -> Batch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.write()

    async def write(self) -> None:
        """Write the batch (``async with`` does this on exit): callbacks, then the jobs."""
        if self._written:
            return
        tree, queue = JobTree(), self.queue
        parents = []
        with contextlib.ExitStack() as stack:
            observed = stack if queue._host.registry.observers else None
            callbacks = zip(self._callbacks, (("i1", "complete"), ("f1", "success")), strict=True)
            for callback, (spec, name) in callbacks:
                if callback is not None:
                    new = tree.add_call(
                        _without_id(callback), f"{self.id}/{name}", spec=spec, inputs="summary",
                        stack=observed,
                    )  # fmt: skip
                    parents.append(new.id)
            tree.add_barrier(queue, self.id, parents=" ".join(parents))
            for index, call in enumerate(self._calls, 1):
                tree.add_call(
                    call, f"{self.id}/{index}", parent=(queue, self.id, index), stack=observed
                )
            await tree.write()
        self._written = True
        await queue._host.eager_mode.run()  # (tests: ``App.eager``; else nothing)

    @property
    def job(self) -> Job[dict[str, int]]:
        """The batch's own record: complete once every job has settled, with its counts."""
        return Job(self.queue, self.id)

    async def wait(self, *, timeout: float | None = None) -> BatchSummary:
        """Wait until every job has settled; their counts."""
        counts = await self.job.result(timeout=timeout)
        return BatchSummary(counts["total"], counts["succeeded"], counts["failed"])

    async def status(self) -> FlowStatus:
        """The batch's state and its jobs' counts so far (one read)."""
        return await flow_status(self.queue, self.id)


def _without_id(call: EnqueueCall[R]) -> EnqueueCall[R]:
    """Callbacks are written before the jobs: their own ids are generated too."""
    if call._options is NO_OPTIONS or call._options.id is None:
        return call
    raise ConfigError("a batch's callbacks get generated ids")
