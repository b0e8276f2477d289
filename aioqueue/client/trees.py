"""JobTree: how a workflow or a batch is written, as one tree of linked jobs.

``client/workflows.py`` says what the tree holds (a flow's parents and children, a batch's
barrier, callbacks and jobs); this module checks and encodes each job, then writes them
parents first with ``enqueue_linked.lua``, one call per run of jobs on one queue, and
seals the parents last, so that no parent runs before its last child is written.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.lifecycle import LinkedJob, NewJob
from ..store import reads
from ..store.connection import CALL_FAILURES

if TYPE_CHECKING:
    import contextlib

    from .queue import EnqueueCall, Queue

Parent = tuple["Queue", str, int]
"""Where a job counts when it settles: its parent's queue, the parent's id, its index."""


class JobTree:
    """The jobs of one workflow, parents before children, as enqueue_linked.lua takes them.

    Ids below the root are the root's with the path appended (``<root>/2/1``), so writing
    the same tree again under its root's id (a retry after an unconfirmed write) writes
    the same jobs, which are skipped where they exist: the write is idempotent across
    queues too."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Queue, LinkedJob]] = []
        self._seen: set[int] = set()

    def add_call(
        self,
        call: EnqueueCall[Any],
        job_id: str | None,
        *,
        parent: Parent | None = None,
        spec: str = "",
        inputs: str | None = None,
        remote_children: int = 0,
        stack: contextlib.ExitStack | None = None,
    ) -> NewJob:
        """Check and encode one job of the tree (raising, writing nothing, on bad input).
        ``parent``: its parent's queue, id and its index there; ``spec``: if it is a
        parent, its policy and whether it keeps its children's results."""
        if id(call) in self._seen:
            raise ConfigError("a workflow is a tree: the same call appears in it twice")
        self._seen.add(id(call))
        queue, options = call._queue, call._options
        if options.debounce is not None:
            raise ConfigError("a workflow's job cannot be debounced")
        if options.id is not None and self.jobs:
            raise ConfigError("only a workflow's root may have an id (the others are generated)")
        if options.group is not None and spec:
            raise ConfigError("a workflow's parent cannot have a group (its children can)")
        if job_id is not None:
            options = dataclasses.replace(options, id=job_id)
        elif options.id is not None and any(char.isspace() for char in options.id):
            raise ConfigError(f"a workflow's root id has no whitespace: {options.id!r}")
        headers = None if stack is None else queue._observe(stack, call._task)
        new = queue._prepare(call._task, call._args, call._kwargs, options, headers, inputs)
        parent_queue, parent_id, index = parent or (queue, "", 0)
        linked = LinkedJob(
            new, options.group or "", parent_id, index, spec,
            "" if parent_queue is queue else parent_queue.name, remote_children,
            options.tenant or "",
        )  # fmt: skip
        self.jobs.append((queue, linked))
        return new

    def add_barrier(self, queue: Queue, job_id: str, *, parents: str) -> None:
        """A parent with no task (a batch): it completes once its children have settled."""
        index = 1 if parents else 0
        self.jobs.append((queue, LinkedJob(NewJob(job_id, b"", 0), "", parents, index, "i0")))

    def _runs(self) -> list[tuple[Queue, list[LinkedJob]]]:
        """The jobs in order, cut where the queue changes: one call per run."""
        runs: list[tuple[Queue, list[LinkedJob]]] = []
        for queue, linked in self.jobs:
            if runs and runs[-1][0] is queue:
                runs[-1][1].append(linked)
            else:
                runs.append((queue, [linked]))
        return runs

    async def write(self) -> bool:
        """Write the tree; whether its root was created (False: it existed, and so does
        the tree: nothing more is written once the root is found sealed)."""
        runs = self._runs()
        seals: dict[Queue, list[str]] = {}
        for queue, linked in self.jobs:
            if linked.parent:
                seals.setdefault(queue, []).append(linked.job.id)
        root_queue = self.jobs[0][0]  # sealed last: a sealed root means a sealed tree
        if root_queue in seals:
            seals[root_queue] = seals.pop(root_queue)
        try:
            if len(runs) == 1:  # one queue: one call, sealed with it
                [(queue, jobs)] = runs
                return (await queue._write_linked(jobs, seals.get(queue, [])))[0].created
            created = True
            for number, (queue, jobs) in enumerate(runs):
                results = await queue._write_linked(jobs)
                if number == 0:
                    created = results[0].created
                    if not created and not await _unsealed(queue, jobs[0].job.id):
                        return False
            for queue, parents in seals.items():
                await queue._write_linked([], parents)
        except CALL_FAILURES as exc:
            queue = self.jobs[0][0]
            raise queue._failure(exc, [linked.job.id for _, linked in self.jobs]) from exc
        return created


async def _unsealed(queue: Queue, job_id: str) -> bool:
    return await reads.unsealed(await queue._host.client(), queue.keys, job_id)
