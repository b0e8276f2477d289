"""Logs a log collector can use: with ``--log-format json`` each line about a job carries
its ``job_id``, ``task`` and ``queue`` as fields (so does whatever a handler logs while it
runs), a job that dies carries its traceback, and ``--log-jobs`` adds a line per finished
job (off by default: it costs a little per job)."""

from __future__ import annotations

import contextvars
import json
import logging
import os
from typing import Any

import pytest

import aioqueue
from aioqueue.core.middleware import JobContext, enter_job
from aioqueue.ops.logs import JsonFormatter
from tests.ops.test_cli import run_cli

TARGET = "tests.apps.cli_app:app"


def formatted(record: logging.LogRecord) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(JsonFormatter().format(record))
    return line


def record(message: str, **fields: Any) -> logging.LogRecord:
    logger = logging.getLogger("tests.logs")
    return logger.makeRecord(
        "tests.logs", logging.INFO, __file__, 1, message, (), None, extra=fields
    )


def test_a_records_fields_become_json_fields() -> None:
    line = formatted(record("job j (t) retried", job_id="j", task="t", queue="q", attempt=2))
    assert line["message"] == "job j (t) retried"
    assert (line["job_id"], line["task"], line["queue"], line["attempt"]) == ("j", "t", "q", 2)
    assert {"time", "level", "logger"} <= set(line)
    assert "args" not in line and "msecs" not in line  # a LogRecord's own attributes are not


def test_a_line_logged_while_a_job_runs_names_the_job() -> None:
    def inside() -> dict[str, Any]:
        enter_job(JobContext("j1", "emails", "send", 1, 3, {}))
        return formatted(record("sending"))

    line = contextvars.copy_context().run(inside)
    assert (line["job_id"], line["task"], line["queue"]) == ("j1", "send", "emails")
    assert "job_id" not in formatted(record("outside any job"))


@pytest.fixture
def cli_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}


def _lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines()]


@pytest.mark.real_redis("the command line's worker process")
async def test_json_logs_name_the_job_and_a_dead_job_has_its_traceback(
    cli_env: dict[str, str], redis_url: str, prefix: str
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    ok = await app.queue().enqueue("shout", "hi")
    dead = await app.queue().enqueue("shout", "boom")
    argv = ["worker", TARGET, "--burst", "--log-format", "json", "--log-jobs"]
    code, _, err = await run_cli(argv, env=cli_env)
    assert code == 0, err
    lines = _lines(err)
    (died,) = [line for line in lines if "failed for good" in line["message"]]
    assert died["level"] == "error"
    assert (died["job_id"], died["task"], died["queue"]) == (dead.id, "shout", "default")
    assert "ValueError: cannot shout boom" in died["traceback"]
    assert "in shout" in died["traceback"]  # the handler's own frame
    ended = {line["job_id"]: line for line in lines if line.get("outcome")}
    assert ended[ok.id]["message"].startswith(f"job {ok.id} (shout) complete in ")
    assert (ended[ok.id]["level"], ended[ok.id]["queue"]) == ("info", "default")
    assert ended[ok.id]["seconds"] >= 0 and ended[ok.id]["attempt"] == 1
    assert ended[dead.id]["outcome"] == "bury"
    await app.close()


@pytest.mark.real_redis("the command line's worker process")
async def test_no_line_per_job_unless_asked(
    cli_env: dict[str, str], redis_url: str, prefix: str
) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    await app.queue().enqueue("shout", "hi")
    code, _, err = await run_cli(["worker", TARGET, "--burst", "--log-format", "json"], env=cli_env)
    assert code == 0, err
    assert not [line for line in _lines(err) if "outcome" in line]
    await app.close()
