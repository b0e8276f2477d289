"""The inspection commands as a user runs them: ``aioqueue info [--watch]``, ``aioqueue
jobs ls``, ``aioqueue job show|cancel``."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import pytest
from rich.console import Console

import aioqueue
from aioqueue.ops.tables import QueueSnapshot, info_table
from tests.ops.test_cli import TARGET, cli_env, producer, run_cli

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

__all__ = ["cli_env", "producer"]  # fixtures, shared with test_cli


async def test_info_shows_each_queue_with_its_counts_and_rates(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    queue = producer.queue()
    for word in ("a", "b", "boom"):
        await queue.enqueue("shout", word)
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0, err
    for n in range(3):
        await queue.enqueue("shout", f"w{n}").options(priority=9 if n == 0 else 1)
    await queue.enqueue("shout", "later").options(delay=3600)

    code, out, err = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0, err
    [row] = [line for line in out.splitlines() if "default" in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[:5] == ["default", "3 (p9:1 p1:2)", "1", "0", "1"]
    assert float(cells[5]) > 0  # two completed within the last minute
    assert float(cells[6]) > 0  # and one failed for good (no retries)
    assert float(cells[7]) == 0  # no retry
    assert cells[8] == "none"  # the burst worker is gone
    assert "fail/s (failed for good" in out  # what each rate means, on screen
    await producer.close()


def test_rates_cover_the_last_sixty_seconds() -> None:
    minute = 60_000 * 1000
    history = [
        aioqueue.MinuteCounts(minute - 60_000, complete=60),
        aioqueue.MinuteCounts(minute, complete=30),
    ]
    snapshot = QueueSnapshot("q", aioqueue.QueueCounts(0, 0, 0, 0), history, [])
    # 30 s into this minute: all 30 of it, and half of the previous minute's 60
    assert snapshot.per_second("complete", now_ms=minute + 30_000) == pytest.approx(1.0)
    assert snapshot.per_second("complete", now_ms=minute + 60_000) == pytest.approx(0.5)


@pytest.mark.skipif(sys.platform == "win32", reason="signals")
async def test_info_watch_redraws_until_ctrl_c(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "info", TARGET, "--watch", "0.2",
        env=cli_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    first = await asyncio.wait_for(process.stdout.readuntil(b"default"), 20)
    assert b"ready" in first
    await producer.queue().enqueue("shout", "x")  # the next redraw shows it
    await asyncio.sleep(0.5)  # pacing: let it redraw a time or two before Ctrl-C
    process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, err
    assert b"Traceback" not in err
    assert re.search(r"default\s*│\s*1\s*│", out.decode()), out.decode()  # redrawn since
    await producer.close()


async def test_jobs_ls_lists_each_state(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    queue = producer.queue()
    ready = await queue.enqueue("shout", "a").options(id="ready-one")
    await queue.enqueue("shout", "b").options(id="later-one", delay=3600)
    await queue.enqueue("shout", "boom").options(id="dead-one", delay=0.001)
    code, _, err = await run_cli(["worker", TARGET, "--burst", "-q", "other"], env=cli_env)
    assert code == 0, err

    code, out, err = await run_cli(["jobs", "ls", TARGET, "--state", "ready"], env=cli_env)
    assert code == 0, err
    assert ready.id in out and "later-one" not in out and "shout" in out
    code, out, _ = await run_cli(["jobs", "ls", "--state", "scheduled", TARGET], env=cli_env)
    assert "later-one" in out and "due (UTC)" in out and ready.id not in out
    code, out, _ = await run_cli(["jobs", "ls", TARGET, "--limit", "0"], env=cli_env)
    assert code == 0 and ready.id not in out
    code, _, err = await run_cli(["jobs", "ls", TARGET, "--state", "done"], env=cli_env)
    assert code == 2 and "invalid choice: 'done'" in err and len(err.splitlines()) == 1
    await producer.close()


async def test_job_show_and_cancel(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    job = await producer.queue().enqueue("shout", "hello").options(id="job-1", priority=7)
    code, out, err = await run_cli(["job", "show", TARGET, "job-1"], env=cli_env)
    assert code == 0, err
    assert "status:    queued" in out and "args:      ['hello']" in out and "priority:  7" in out

    code, out, err = await run_cli(["job", "cancel", TARGET, "job-1"], env=cli_env)
    assert code == 0 and "cancelled job-1" in out, err
    assert await job.status() is aioqueue.JobStatus.CANCELLED
    code, out, _ = await run_cli(["job", "cancel", TARGET, "job-1"], env=cli_env)
    assert code == 1 and "is cancelled: nothing to cancel" in out

    code, _, err = await run_cli(["job", "show", TARGET, "nope"], env=cli_env)
    assert code == 2 and "no job 'nope' in any queue of the app (default)" in err
    assert "Traceback" not in err
    await producer.close()


async def test_info_lists_mailboxes_and_groups_with_their_laggards(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    code, out, _ = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0 and "messaging" not in out  # none yet: no second table
    room = producer.group("room-7")
    await room.join("alice")
    await room.join("bob")
    await room.send_many("alice", ["a", "b", "c"])
    await room.ack("bob", 1)
    await producer.mailbox("user-42").send_many(["x", "y"])

    code, out, err = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0, err
    rows = {
        tuple(cell.strip() for cell in line.strip("│ ").split("│"))[:2]: line
        for line in out.splitlines()
        if "room-7" in line or "user-42" in line
    }
    group = [cell.strip() for cell in rows[("group", "room-7")].strip("│ ").split("│")]
    assert group == ["group", "room-7", "2", "3", "2", "bob 2", "0"]
    mailbox = [cell.strip() for cell in rows[("mailbox", "user-42")].strip("│ ").split("│")]
    assert mailbox == ["mailbox", "user-42", "2", "2", "0", "(reader) 2", "0"]
    await producer.close()


async def test_info_lists_topics_with_each_subscriber_group(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    code, out, _ = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0 and "topics" not in out  # none yet: no topics table
    logs = producer.topic("logs")
    await logs.add_group("analytics")
    await logs.add_group("archive")
    await logs.publish_many(range(5))

    code, out, err = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0, err
    rows = [
        [cell.strip() for cell in line.strip().split("│")[1:-1]]
        for line in out.splitlines()
        if "analytics" in line or "archive" in line
    ]
    assert rows == [
        ["logs", "5", "0", "0", "analytics", "0", "0", "5"],
        ["", "", "", "", "archive", "0", "0", "5"],
    ]
    await producer.close()


async def test_queue_pause_and_resume_from_the_cli(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    code, out, err = await run_cli(["queue", "pause", TARGET, "-q", "emails"], env=cli_env)
    assert (code, out.strip()) == (0, "emails: paused"), err
    assert await producer.queue("emails").paused()
    code, out, _ = await run_cli(["info", TARGET, "-q", "emails"], env=cli_env)
    assert code == 0 and "emails (paused)" in out
    code, out, _ = await run_cli(["queue", "pause", TARGET, "-q", "emails"], env=cli_env)
    assert (code, out.strip()) == (0, "emails was paused already")
    code, out, _ = await run_cli(["queue", "resume", TARGET, "-q", "emails"], env=cli_env)
    assert (code, out.strip()) == (0, "emails: resumed")
    assert not await producer.queue("emails").paused()
    await producer.close()


async def test_queue_limits_from_the_cli(cli_env: dict[str, str], producer: aioqueue.App) -> None:
    command = ["queue", "limit", TARGET, "-q", "emails", "--rate", "100/s", "--burst", "10"]
    code, out, err = await run_cli([*command, "--concurrency", "5"], env=cli_env)
    assert (code, out.strip()) == (0, "emails: at most 5 running, 100/s (burst 10)"), err
    assert await producer.queue("emails").limits() == aioqueue.QueueLimits(5, 10.0, 10)
    code, out, _ = await run_cli(["queue", "limits", TARGET, "-q", "emails"], env=cli_env)
    assert (code, out.strip()) == (0, "emails: at most 5 running, 100/s (burst 10)")
    code, out, _ = await run_cli(["info", TARGET, "-q", "emails"], env=cli_env)
    assert code == 0 and "≤5 running, 100/s" in out
    code, out, err = await run_cli([*command[:5], "--rate", "fast"], env=cli_env)
    assert code == 2 and "rate must look like" in err and "Traceback" not in err
    code, out, _ = await run_cli(["queue", "limit", TARGET, "-q", "emails"], env=cli_env)
    assert (code, out.strip()) == (0, "emails: no limits")
    assert await producer.queue("emails").limits() == aioqueue.QueueLimits()
    await producer.close()


def test_info_says_how_many_jobs_wait() -> None:
    counts = aioqueue.QueueCounts(0, 0, 0, 0, waiting=12)
    table = info_table([QueueSnapshot("q", counts, [], [])], now_ms=0)
    console = Console(width=120, record=True)
    console.print(table)
    assert "12 waiting" in console.export_text()


async def test_info_shows_the_tenants_with_the_most_jobs_ready(
    cli_env: dict[str, str], producer: aioqueue.App
) -> None:
    queue = producer.queue()
    await queue.set_tenant_limits("[b]", max_running=1)
    for n in range(3):
        await queue.enqueue("shout", f"a{n}").options(tenant="acme")
    for n in range(2):
        await queue.enqueue("shout", f"b{n}").options(tenant="[b]")  # (rich markup: shown as is)
    await queue.enqueue("shout", "plain")

    code, out, err = await run_cli(["info", TARGET], env=cli_env)
    assert code == 0, err
    assert "2 tenants" in out
    rows = [line for line in out.splitlines() if "acme" in line or "[b]" in line]
    cells = [[cell.strip() for cell in row.strip("│ ").split("│")] for row in rows]
    assert cells == [
        ["default", "acme", "3", "0"],
        ["[b]", "2", "0"],  # (the queue's cell left blank)
    ]
    await producer.close()
