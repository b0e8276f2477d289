"""The command line as a new user meets it: options in any order, one-line errors, Ctrl-C
in a terminal, a Redis that is down, a worker killed outright, and its logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.exceptions

import aioqueue
from aioqueue.core.errors import describe
from aioqueue.ops.embedded import DIR_PREFIX, OWNER_FILE, EmbeddedServer, remove_stale_dirs
from tests.helpers import now, wait_until
from tests.ops.test_cli import TARGET, run_cli

pytestmark = pytest.mark.real_redis("the command line runs in processes of its own")

EMBEDDED = re.compile(rb"started an embedded server \S+ at (redis://127\.0\.0\.1:(\d+)/0)")


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


@pytest.fixture
def no_url_env(prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AIOQUEUE_REDIS_URL"}
    return {**env, "TEST_PREFIX": prefix}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- 1. options anywhere, log options before or after the command ------------------------


async def test_dead_commands_take_their_options_anywhere(
    cli_env: dict[str, str], redis_url: str, prefix: str
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    job = await app.queue().enqueue("shout", "boom")
    code, _, err = await run_cli(["worker", TARGET, "--burst"], env=cli_env)
    assert code == 0, err
    for argv in (
        ["dead", "show", TARGET, "-q", "default", job.id],  # the README's form
        ["dead", "show", "-q", "default", TARGET, job.id],
        ["--log-level", "debug", "dead", "show", TARGET, job.id],
        ["dead", "show", TARGET, job.id, "--log-level", "warning"],
    ):
        code, out, err = await run_cli(argv, env=cli_env)
        assert code == 0, (argv, err)
        assert "status:    dead" in out
    await app.close()


async def test_a_bad_option_is_one_line(cli_env: dict[str, str]) -> None:
    for argv, message in (
        (["--log-level", "loud", "check", TARGET], "invalid choice: 'loud'"),
        (["check", TARGET, "--log-level", "loud"], "invalid choice: 'loud'"),
        (["worker", TARGET, "-p", "0"], "--processes must be at least 1"),
        (["worker", TARGET, "-c", "0"], "concurrency must be at least 1"),
        (["worker", TARGET, "--lease", "0.1"], "lease must be at least 1 second"),
        (["worker", TARGET, "-q", "a:b"], "invalid queue name"),
        (["nosuchcommand", TARGET], "invalid choice: 'nosuchcommand'"),
    ):
        code, _, err = await run_cli(argv, env=cli_env)
        assert code == 2, argv
        assert message in one_line(err), argv


async def test_bad_worker_options_are_refused_before_a_server_starts(
    no_url_env: dict[str, str],
) -> None:
    code, _, err = await run_cli(["worker", TARGET, "-c", "0"], env=no_url_env)
    assert code == 2
    assert "concurrency must be at least 1" in one_line(err)  # and no embedded server


# -- 3, 4. a Redis that is down, a module that does not import, a URL that does not parse ---


def dead_port() -> int:
    with socket.socket() as sock:  # bound and closed: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_one_shot_commands_name_an_unreachable_redis_in_one_line(
    cli_env: dict[str, str],
) -> None:
    url = f"redis://user:secret@127.0.0.1:{dead_port()}/0"
    for command in (["check", TARGET], ["dead", "ls", TARGET], ["reconcile", TARGET]):
        code, _, err = await run_cli([*command, "--redis-url", url], env=cli_env)
        assert code == 2, command
        line = one_line(err)
        assert "cannot reach Redis at redis://user:***@127.0.0.1:" in line, line
        assert "secret" not in line and "Connect" in line


async def test_a_worker_waits_for_an_unreachable_redis_saying_why(
    cli_env: dict[str, str],
) -> None:
    url = f"redis://127.0.0.1:{dead_port()}/0"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET, "--redis-url", url,
        env=cli_env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    lines = [await asyncio.wait_for(process.stderr.readline(), 10) for _ in range(2)]
    for line in lines:  # every attempt says why, and when the next comes
        assert b"cannot reach Redis at " + url.encode() in line
        assert b"Connect" in line and b"trying again in" in line
    process.send_signal(signal.SIGTERM)
    rest = await asyncio.wait_for(process.stderr.read(), 10)
    assert await process.wait() == 0
    assert b"Traceback" not in rest


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", "nosuchmod:app"], "cannot import 'nosuchmod': No module named 'nosuchmod'"),
        (
            ["check", TARGET, "--redis-url", "redis://u:pw@127.0.0.1:port/0"],
            "invalid Redis URL 'redis://u:***@127.0.0.1:port/0'",
        ),
        (["check", TARGET, "--redis-url", "http://127.0.0.1:6379"], "must start with redis://"),
    ],
)
async def test_import_and_url_errors_are_one_line(
    cli_env: dict[str, str], argv: list[str], message: str
) -> None:
    code, _, err = await run_cli(argv, env=cli_env)
    assert code == 2
    assert message in one_line(err)


@pytest.mark.parametrize(
    ("argv", "env_url"),
    [
        (["worker", TARGET, "--redis-url", "memory://"], None),
        (["info", TARGET], "memory://shared"),
        (["dashboard", TARGET, "--redis-url", "memory://x"], None),
    ],
)
async def test_an_in_process_server_is_refused_in_one_line(
    cli_env: dict[str, str], argv: list[str], env_url: str | None
) -> None:
    """memory:// lives in the process that uses it: a command, a process of its own,
    would see an empty server of its own and act on nothing."""
    env = {**cli_env, **({"AIOQUEUE_REDIS_URL": env_url} if env_url else {})}
    code, _, err = await run_cli(argv, env=env)
    assert code == 2
    assert "is an in-process server for tests: the command line, a process of its own, " in (
        one_line(err)
    )


# -- 2, 5. the embedded server: Ctrl-C, kill -9, stale directories -------------------------


@contextlib.asynccontextmanager
async def worker_on_an_embedded_server(
    env: dict[str, str], *extra: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``aioqueue worker`` with no URL, in a process group of its own (as a terminal runs
    it), and the URL of the embedded server it started."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET, *extra,
        env=env, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        line = await asyncio.wait_for(process.stderr.readline(), 20)
        found = EMBEDDED.search(line)
        assert found, line
        yield process, found.group(1).decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_ctrl_c_in_a_terminal_puts_running_jobs_back_at_once(
    no_url_env: dict[str, str], prefix: str
) -> None:
    """A terminal's Ctrl-C signals the whole process group. The embedded server once died
    first, and the worker spent ~40 s failing to ack before giving up."""
    async with worker_on_an_embedded_server(no_url_env, "--grace", "0.2") as (process, url):
        app = aioqueue.App(redis_url=url, prefix=prefix)
        job = await app.queue().enqueue("nap", 60)
        await wait_until(lambda: _is(job, aioqueue.JobStatus.ACTIVE), timeout=10)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does
        assert process.stderr is not None
        rest = await asyncio.wait_for(process.stderr.read(), 20)
        assert await process.wait() == 0
        await app.close()
    assert b"stopped: {'release': 1}" in rest  # the job went back to ready, at once
    assert b"giving up" not in rest and b"failed" not in rest


async def _is(job: aioqueue.Job[object], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


async def test_kill_9_takes_the_embedded_server_down_and_its_dir_is_cleaned_later(
    no_url_env: dict[str, str], tmp_path: Path
) -> None:
    # A temp root of its own: another test process's embedded server, starting, would
    # otherwise sweep the killed worker's directory before this test looks.
    env = {**no_url_env, "TMPDIR": str(tmp_path)}
    async with worker_on_an_embedded_server(env) as (process, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert _answers(port)
        process.kill()  # SIGKILL: nothing in the worker runs
        await process.wait()
        await wait_until(lambda: _gone(port), timeout=10)  # the server died with it
    left = dirs_owned_by(process.pid, tmp_path)
    assert left, "the killed worker's directory is there to be cleaned"
    remove_stale_dirs(str(tmp_path))  # what the next embedded server does first
    assert dirs_owned_by(process.pid, tmp_path) == []


def dirs_owned_by(pid: int, root: Path) -> list[Path]:
    return [
        path
        for path in root.glob(f"{DIR_PREFIX}*")
        if (path / OWNER_FILE).is_file() and (path / OWNER_FILE).read_text() == str(pid)
    ]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


async def _gone(port: int) -> bool:
    return not _answers(port)


def test_a_live_servers_directory_is_left_alone() -> None:
    with EmbeddedServer() as server:
        assert remove_stale_dirs() >= 0
        assert _answers(server.port)


# -- 8. polish ----------------------------------------------------------------------------


async def test_version_and_help(cli_env: dict[str, str], redis_url: str) -> None:
    code, out, _ = await run_cli(["--version"], env=cli_env)
    assert code == 0 and out.strip() == f"aioqueue {aioqueue.__version__}"
    code, out, _ = await run_cli(["-h"], env=cli_env)
    assert code == 0
    assert all(command in out for command in ("worker", "check", "dead", "reconcile"))
    code, out, _ = await run_cli(["worker", "-h"], env=cli_env)
    words = " ".join(out.split())  # argparse wraps its help lines
    assert "(default: 50)" in words and "(default: 30.0)" in words


def test_the_license_matches_pyproject() -> None:
    root = Path(__file__).resolve().parents[2]
    assert (root / "LICENSE").read_text().startswith("MIT License")
    assert 'license = "MIT"' in (root / "pyproject.toml").read_text()


def test_dead_show_prints_iso_times() -> None:
    from aioqueue.ops.tables import iso

    assert iso(1_700_000_000_123) == "2023-11-14T22:13:20.123+00:00"
    assert iso(None) == "-"


# -- 9. logs -------------------------------------------------------------------------------


def test_errors_are_described_with_their_message() -> None:
    from redis.exceptions import NoPermissionError, ResponseError

    assert describe(ResponseError("ERR boom")) == "ResponseError: ERR boom"  # repr: no message
    assert describe(NoPermissionError("NOPERM nope")) == "NoPermissionError: NOPERM nope"
    assert describe(TimeoutError()) == "TimeoutError"


async def test_json_logs_and_a_debug_line_per_job(
    cli_env: dict[str, str], redis_url: str, prefix: str
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    job = await app.queue().enqueue("shout", "hi")
    failing = await app.queue().enqueue("shout", "boom")
    argv = ["worker", TARGET, "--burst", "--log-format", "json", "--log-level", "debug"]
    code, _, err = await run_cli(argv, env=cli_env)
    assert code == 0, err
    records = [json.loads(line) for line in err.splitlines()]
    messages = [record["message"] for record in records]
    assert f"job {job.id} (shout) complete in" in "\n".join(messages)
    assert any(
        f"job {failing.id} (shout) failed for good" in message
        and "ValueError: cannot shout boom" in message
        for message in messages
    )
    assert {"time", "level", "logger", "message"} <= set(records[0])
    await app.close()


# -- 10. errors a producer can act on --------------------------------------------------------


async def test_a_wrong_password_is_an_authentication_error(redis_url: str, prefix: str) -> None:
    admin = aioqueue.App(redis_url=redis_url, prefix=prefix)
    client = await admin.client()
    user = f"pw{prefix}"
    await client.acl_setuser(
        user, enabled=True, passwords=["+right"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    host = redis_url.removeprefix("redis://")
    wrong = aioqueue.App(redis_url=f"redis://{user}:wrong@{host}", prefix=prefix)
    try:
        with pytest.raises(aioqueue.AuthenticationFailed, match="refused the credentials") as info:
            await wrong.queue().enqueue("shout", "x")
        assert "wrong" not in str(info.value)  # the password is masked
        assert "WRONGPASS" in str(info.value) or "invalid" in str(info.value)
    finally:
        await client.acl_deluser(user)
        await wrong.close()
        await admin.close()


async def test_a_missing_permission_is_a_permission_error(redis_url: str, prefix: str) -> None:
    admin = aioqueue.App(redis_url=redis_url, prefix=prefix)
    client = await admin.client()
    user = f"ro{prefix}"
    await client.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-evalsha"],
    )  # fmt: skip
    host = redis_url.removeprefix("redis://")
    limited = aioqueue.App(redis_url=f"redis://{user}:pw@{host}", prefix=prefix)
    try:
        with pytest.raises(aioqueue.PermissionDenied, match="no permissions to run the 'evalsha'"):
            await limited.queue().enqueue("shout", "x")
    finally:
        await client.acl_deluser(user)
        await limited.close()
        await admin.close()


async def test_a_full_server_is_out_of_memory_and_nothing_is_written(prefix: str) -> None:
    args = ["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]
    with EmbeddedServer(extra_args=args) as server:
        app = aioqueue.App(redis_url=server.url, prefix=prefix)
        client = await app.client()
        with pytest.raises(redis.exceptions.OutOfMemoryError):  # before the 10,000th
            for n in range(10_000):  # fill it with someone else's data, small writes that
                await client.set(f"ballast:{n}", b"x" * 1_000)  # leave it over its limit
        with pytest.raises(aioqueue.ServerOutOfMemory, match=r"out of memory.*maxmemory") as info:
            await app.queue().enqueue("shout", "x").options(id="never-written")
        assert isinstance(info.value, aioqueue.ServerRefused)
        assert await app.queue().status("never-written") is None
        await app.close()


async def test_a_full_server_still_shows_its_counts_and_says_it_is_full(prefix: str) -> None:
    """Over its maxmemory, Redis refuses every command inside MULTI, reads too: a queue's
    counts (``aioqueue info``, the dashboard, metrics) failed with "out of memory" just when
    an operator looks. They are read without MULTI then. And the server's health says it is
    full (``aioqueue check``, and a worker's warning): nothing moves until it is not."""
    args = ["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]
    with EmbeddedServer(extra_args=args) as server:
        app = aioqueue.App(redis_url=server.url, prefix=prefix)
        queue = app.queue()
        queued = 0
        with pytest.raises(aioqueue.ServerOutOfMemory):  # filled with its own jobs
            for n in range(20_000):
                await queue.enqueue("shout", "x" * 500)
                queued = n + 1
        counts = await queue.counts()
        assert (counts.ready, counts.scheduled, counts.active) == (queued, 0, 0)
        health = await queue.eviction()
        assert health.full and not health.unsafe
        assert health.problem() == (
            "Redis is full (its maxmemory, 2.0 MiB, is used): it refuses every write, so "
            "enqueues fail and workers can neither take nor ack jobs until memory is freed or "
            "maxmemory is raised"
        )
        await (await app.client()).config_set("maxmemory", "0")  # no limit: not full
        assert not (await queue.eviction()).full
        assert (await queue.eviction()).problem() is None
        await app.close()


async def test_tls_to_a_plain_server_is_a_tls_error(redis_url: str, prefix: str) -> None:
    host = redis_url.removeprefix("redis://")
    app = aioqueue.App(redis_url=f"rediss://{host}", prefix=prefix, connect_timeout=2)
    try:
        with pytest.raises(aioqueue.TlsFailed, match="TLS with Redis at rediss://"):
            await app.queue().enqueue("shout", "x")
    finally:
        await app.close()


async def test_giving_up_acks_names_the_jobs_and_they_run_again(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 2: a worker stopping while Redis is away gives up its acks after a while.
    It says which jobs and what becomes of them, and that is what happens: they stay
    active in Redis and run again once their leases expire."""
    with EmbeddedServer(appendonly=True) as server:
        app = aioqueue.App(
            redis_url=server.url, prefix=prefix, socket_timeout=0.5, connect_timeout=0.5,
            call_timeout=0.5,  # (how long a stop tries to land the last acks)
        )  # fmt: skip
        release, runs = asyncio.Event(), []

        @app.task
        async def hold(n: int) -> int:
            runs.append(n)
            await release.wait()
            return n

        jobs = [await hold.enqueue(n) for n in range(3)]
        worker = app.worker(lease=2, grace=5)
        running = asyncio.create_task(worker.run())
        await wait_until(lambda: now(len(runs) == 3), timeout=10)
        await asyncio.to_thread(server.kill)
        release.set()  # they finish, but their acks cannot land
        worker.request_stop()
        with caplog.at_level("ERROR", logger="aioqueue"):
            await asyncio.wait_for(running, timeout=60)
        gave_up = [r.getMessage() for r in caplog.records if "giving up acking" in r.message]
        assert len(gave_up) == 1, caplog.text
        assert "giving up acking 3 job(s)" in gave_up[0]
        assert all(job.id in gave_up[0] for job in jobs)
        assert "run again" in gave_up[0]

        await asyncio.to_thread(server.start)
        runs.clear()
        assert {await job.status() for job in jobs} == {aioqueue.JobStatus.ACTIVE}
        again = app.worker(lease=2, reclaim_interval=0.2)
        running = asyncio.create_task(again.run())
        try:
            results = [await job.result(timeout=30) for job in jobs]
        finally:
            again.request_stop()
            await asyncio.wait_for(running, timeout=30)
        assert results == [0, 1, 2] and sorted(runs) == [0, 1, 2]
        await app.close()


async def test_ctrl_c_reaches_each_of_several_processes_once(
    cli_env: dict[str, str], redis_url: str, prefix: str
) -> None:
    """With -p 2, the terminal's SIGINT reached each child directly and again forwarded by
    the parent: the second one skipped the grace and cancelled the running jobs."""
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    jobs = [await app.queue().enqueue("nap", 1.5) for _ in range(4)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", TARGET, "-p", "2", "-c", "2",
        "--grace", "30", env=cli_env, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        await wait_until(lambda: _all(jobs, aioqueue.JobStatus.ACTIVE), timeout=20)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does
        assert process.stderr is not None
        rest = await asyncio.wait_for(process.stderr.read(), 30)
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
    assert [await job.status() for job in jobs] == [aioqueue.JobStatus.COMPLETE] * 4
    assert b"second" not in rest and b"cancelling running jobs now" not in rest
    await app.close()


async def _all(jobs: list[aioqueue.Job[str]], status: aioqueue.JobStatus) -> bool:
    return all([await job.status() is status for job in jobs])
