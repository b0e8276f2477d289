"""``aioqueue worker`` with a plain ``def`` handler still running in its thread: Ctrl-C
(once or twice) or SIGTERM ends the process after the grace, not when the thread ends,
without a traceback, and without handing the job to anyone while the thread could run
(its lease, no longer renewed, expires after the process is gone: DESIGN.md §12). And a
task that its cancellation does not end (a call to a stalled server) leaves no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

import aioqueue
from tests.helpers import now, wait_until

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

TARGET = "tests.apps.threads_app:app"


@pytest.mark.parametrize(
    "signals",
    [[signal.SIGINT], [signal.SIGINT, signal.SIGINT], [signal.SIGTERM]],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm"],
)
async def test_a_worker_with_a_thread_running_exits_after_the_grace(
    redis_url: str, prefix: str, tmp_path: Path, signals: list[signal.Signals]
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    marker = tmp_path / "marker"
    job = await app.queue("threads").enqueue("block", str(marker), 120)
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET, "-q", "threads", "--grace", "0.5",
        env=env, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []

    async def read() -> None:  # line by line: the test waits for one
        assert process.stderr is not None
        while line := await process.stderr.readline():
            lines.append(line.decode())

    reader = asyncio.ensure_future(read())
    try:
        await wait_until(lambda: now(marker.exists()), timeout=30)
        os.killpg(process.pid, signals[0])  # what Ctrl-C does: the whole group
        if len(signals) > 1:  # again, once the worker has stopped (it was in the exit's wait)
            await wait_until(lambda: now(any(" stopped: " in line for line in lines)))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signals[1])
        code = await asyncio.wait_for(process.wait(), 30)  # not the thread's 120 s
        await reader
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    err = "".join(lines)
    assert code == 0, err
    assert marker.read_text() == "started"  # the thread was still running
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "still runs in a thread" in err
    assert await job.status() is aioqueue.JobStatus.ACTIVE  # not handed back: it ran
    await app.close()


_STUBBORN = """
import asyncio
from aioqueue.ops import serve

async def stubborn():  # as a redis-py call to a stalled server can be: cancelling it waits
    while True:
        try:
            await asyncio.sleep(10)
        except BaseException:
            asyncio.current_task()  # (redis-py's disconnect does this: it needs a loop)
            await asyncio.sleep(0)

async def main():
    asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0.01)
    await serve._cancel_leftovers()

serve.LEFTOVER_WAIT = 0.1
serve._run_leaving_abandoned_tasks(asyncio.new_event_loop(), main())
print("exited")
"""


async def test_a_task_that_outlives_its_cancellation_exits_without_a_traceback() -> None:
    """The exit leaves behind a task its cancellation did not end (a call to a stalled
    server): the process ends without "Task was destroyed but it is pending" and without
    the traceback of the task's coroutine, closed with no loop to run in."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STUBBORN,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert (process.returncode, out.decode().strip()) == (0, "exited"), err.decode()
    assert err.decode() == ""
