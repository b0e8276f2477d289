"""The CLI as a new user meets it, round two: commands given no ``-q`` look in every
queue the app knows (or say which they searched), a bulk purge asks first, a closed pipe
ends the command quietly, and the rough edges of usage and wording."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest

import aioqueue
from tests.apps import mail_app
from tests.helpers import run_until_idle
from tests.ops.test_cli import run_cli

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

TARGET = "tests.apps.mail_app:app"


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


@pytest.fixture
async def mail(redis_url: str, prefix: str) -> AsyncIterator[aioqueue.App]:
    """An app with the CLI app's tasks, on this test's prefix (its burst workers)."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    for task in mail_app.app.tasks.values():
        app.registry.add_task(task)
    yield app
    await app.close()


async def dead_emails(app: aioqueue.App, n: int) -> list[str]:
    jobs = [await app.queue("emails").enqueue("send_email", "bounce") for _ in range(n)]
    await run_until_idle(app, queues=["emails"])
    return [job.id for job in jobs]


async def test_job_show_and_cancel_look_in_every_queue(
    cli_env: dict[str, str], mail: aioqueue.App
) -> None:
    job = await mail.queue("emails").enqueue("send_email", "later").options(delay=600)
    code, out, err = await run_cli(["job", "show", TARGET, job.id], env=cli_env)
    assert code == 0, err
    assert "queue:     emails" in out and "status:    scheduled" in out
    code, _, err = await run_cli(["job", "show", TARGET, "nope"], env=cli_env)
    assert code == 2 and "no job 'nope' in any queue of the app (default, emails)" in err
    code, out, err = await run_cli(["job", "cancel", TARGET, job.id], env=cli_env)
    assert code == 0, err
    assert out == f"cancelled {job.id} (scheduled in emails: it will not run)\n"  # no "abort"


async def test_dead_ls_lists_every_queue_and_says_which_it_searched(
    cli_env: dict[str, str], mail: aioqueue.App
) -> None:
    code, out, err = await run_cli(["dead", "ls", TARGET], env=cli_env)
    assert code == 0 and out == "" and "(no dead jobs in default, emails)" in err
    [dead] = await dead_emails(mail, 1)
    code, out, err = await run_cli(["dead", "ls", TARGET], env=cli_env)
    assert code == 0, err
    assert out.startswith(f"emails\t{dead}\tsend_email\tattempts=1\tValueError")
    code, out, _ = await run_cli(["dead", "ls", TARGET, "-q", "emails"], env=cli_env)
    assert out.startswith(f"{dead}\t")  # one queue named: no queue column


async def test_a_bulk_purge_asks_first(cli_env: dict[str, str], mail: aioqueue.App) -> None:
    """With no ids, purge deletes what is listed only once confirmed: with no terminal to
    ask, it needs --yes; ids given are purged at once."""
    dead = await dead_emails(mail, 3)
    code, out, err = await run_cli(["dead", "purge", TARGET], env=cli_env)
    assert code == 2 and "would delete 3 dead job(s) (emails: 3): confirm with --yes" in err
    assert (await mail.queue("emails").counts()).dead == 3
    code, out, err = await run_cli(["dead", "purge", TARGET, dead[0]], env=cli_env)
    assert (code, out) == (0, "purged 1 job(s) (emails: 1)\n"), err
    code, out, err = await run_cli(["dead", "purge", TARGET, "--yes"], env=cli_env)
    assert (code, out) == (0, "purged 2 job(s) (emails: 2)\n"), err
    assert (await mail.queue("emails").counts()).dead == 0


async def test_a_closed_pipe_ends_a_command_quietly(
    cli_env: dict[str, str], mail: aioqueue.App
) -> None:
    """``aioqueue dead ls APP -q emails | head -1``: the reader leaves; the command ends
    without a word, with the status of a process SIGPIPE ended, as Unix tools do."""
    await dead_emails(mail, 2)
    for argv in (["dead", "ls", TARGET, "-q", "emails"], ["jobs", "ls", TARGET, "-q", "emails"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first line
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aioqueue", *argv,
            env=cli_env, stdout=write, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        os.close(write)
        _, err = await asyncio.wait_for(process.communicate(), 30)
        assert (process.returncode, err.decode()) == (141, ""), argv


async def test_usage_and_wording(cli_env: dict[str, str], redis_url: str) -> None:
    code, _, err = await run_cli([], env=cli_env)
    assert code == 2 and "commands:" in err and "worker" in err and "required" not in err
    code, _, err = await run_cli(["dead"], env=cli_env)
    assert "required: action, target" in err and "ids" not in err
    code, out, _ = await run_cli(["dead", "-h"], env=cli_env)
    assert "job ids, optional" in out
    code, _, err = await run_cli(
        ["info", TARGET, "--redis-url", f"{redis_url[:-2]}/99"], env=cli_env
    )
    assert code == 2 and "has no db 99 (DB index is out of range" in err
    assert "cannot reach" not in err
    code, _, err = await run_cli(
        ["info", TARGET, "--redis-url", f"{redis_url[:-2]}/abc"], env=cli_env
    )
    assert code == 2 and "db 'abc' is not a number" in err
    code, _, err = await run_cli(["worker", TARGET, "-q", "emailz", "--burst"], env=cli_env)
    assert code == 0 and "no task of this app uses queue 'emailz'" in err
    assert "did you mean 'emails'?" in err
