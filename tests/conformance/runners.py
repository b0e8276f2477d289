"""The clients under test, each run the same way: a case's steps in, one outcome per step out.

What a runner is given (JSON): ``url``, ``prefix``, ``queue``, ``config`` (``max_payload_bytes``)
and ``steps``. Each step is a ``do`` with its fields:

  enqueue       task, args, kwargs, options          -> {"id", "created"}
  enqueue_many  calls: [{task, args, kwargs, options}] -> {"jobs": [{"id", "created"}, ...]}
  status        job                                  -> {"status"}
  result        job                                  -> {"value"}
  cancel        job                                  -> {"cancelled"}
  wait_running  job: until its status is active     -> {"status"}
  bench         count: no-op jobs one at a time, then in bulk -> {"single_per_s", "bulk_per_s"}

A ``job`` is a step's number (the job it enqueued), ``[step, index]`` (one of an
enqueue_many) or an id. Options have the Python names, in seconds (``at_from_now``: that
many seconds from now); each runner maps them to its client's own (Go: ``WithDelay``, Node:
``delay`` in ms). Markers stand for what JSON cannot write: ``{"$float": "nan"}`` ("inf",
"-inf"), ``{"$unserialisable": true}`` (a value of the language that JSON cannot hold),
``{"$invalid_text": true}`` (text that is not Unicode), ``{"$repeat": [text, n]}``.

A step that fails answers ``{"error": kind, "message": ...}``, kind one of invalid_option,
serialization, payload_too_large, not_found, failed (with ``type``), cancelled, expired,
timeout, other. Every successful enqueue also answers ``before_ms``: the wall clock just
before the call.

The Python runner runs in the test's own process; Go's is ``clients/go/cmd/aioqueue-
conformance`` (built once per session), Node's ``clients/node/conformance/runner.js``: they
read the input on stdin and write one JSON line per step.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aioqueue
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "clients" / "go"
NODE_PACKAGE = ROOT / "clients" / "node"
REQUIRE_ENV = "AIOQUEUE_REQUIRE_CLIENTS"

Runner = Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]]


def required() -> bool:
    """CI requires every client: a missing toolchain fails instead of skipping."""
    return os.environ.get(REQUIRE_ENV) == "1"


def go_missing() -> str | None:
    """Why the Go client cannot run here (None: it can)."""
    if shutil.which("go") is None:
        return "Go is not installed (apt-get install golang-go)"
    return None


def node_missing() -> str | None:
    """Why the Node client cannot run here (None: it can)."""
    if shutil.which("node") is None:
        return "Node is not installed (apt-get install nodejs npm)"
    if not (NODE_PACKAGE / "node_modules" / "ioredis").is_dir():
        return "clients/node has no node_modules (run npm ci in clients/node)"
    return None


def go_env() -> dict[str, str]:
    """The environment of go commands: offline (the module's dependencies are vendored),
    with a build cache even where HOME is unset."""
    env = {**os.environ, "GOFLAGS": "-mod=vendor", "GOPROXY": "off"}
    if "HOME" not in env and "XDG_CACHE_HOME" not in env:
        env.setdefault("GOCACHE", str(Path(tempfile.gettempdir()) / "aioqueue-go-cache"))
    return env


def build_go(out: Path) -> Path:
    """Build the Go runner."""
    binary = out / "aioqueue-conformance"
    command = ["go", "build", "-o", str(binary), "./cmd/aioqueue-conformance"]
    subprocess.run(command, cwd=GO_MODULE, check=True, env=go_env())
    return binary


def process_runner(command: list[str], cwd: Path) -> Runner:
    async def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(json.dumps(spec).encode()), 60)
        if process.returncode != 0:
            raise AssertionError(f"{command[0]} failed ({process.returncode}): {err.decode()}")
        lines = out.decode().split("\n")  # (not splitlines(): JSON may hold a raw U+2028)
        return [json.loads(line) for line in lines if line.strip()]

    return run


# -- the Python client, in process ------------------------------------------------------


def native(value: Any) -> Any:
    """The case's JSON as Python values, markers replaced."""
    if isinstance(value, list):
        return [native(item) for item in value]
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith("$"):
            return _marker(*next(iter(value.items())))
        return {key: native(item) for key, item in value.items()}
    return value


def _marker(name: str, value: Any) -> Any:
    if name == "$float":
        return float(value)
    if name == "$unserialisable":
        return object()
    if name == "$invalid_text":
        return "\ud800 is a lone surrogate"
    if name == "$repeat":
        return value[0] * value[1]
    raise ValueError(f"unknown marker {name}")


def _options(given: dict[str, Any]) -> dict[str, Any]:
    options = dict(given)
    if "at_from_now" in options:
        options["at"] = datetime.now(UTC) + timedelta(seconds=options.pop("at_from_now"))
    return options


def _call(queue: aioqueue.Queue, step: dict[str, Any]) -> aioqueue.EnqueueCall[Any]:
    args, kwargs = native(step.get("args", [])), native(step.get("kwargs", {}))
    return queue.enqueue(step["task"], *args, **kwargs).options(**_options(step.get("options", {})))


def describe(exc: Exception) -> dict[str, Any]:
    """An error as the suite compares it, by kind."""
    kinds: list[tuple[type[Exception], str]] = [
        (aioqueue.SerializationError, "serialization"),
        (aioqueue.PayloadTooLarge, "payload_too_large"),
        (aioqueue.ConfigError, "invalid_option"),
        (TypeError, "invalid_option"),  # .options(unknown=...)
        (aioqueue.JobNotFound, "not_found"),
        (aioqueue.JobCancelled, "cancelled"),
        (aioqueue.JobExpired, "expired"),
        (aioqueue.ResultTimeout, "timeout"),
    ]
    if isinstance(exc, aioqueue.JobFailed):
        return {"error": "failed", "type": exc.error_type, "message": exc.error}
    for kind, name in kinds:
        if isinstance(exc, kind):
            return {"error": name, "message": str(exc)}
    return {"error": "other", "message": f"{type(exc).__name__}: {exc}"}


class PythonRunner:
    """The case's steps through aioqueue's own producer (an App that registers no task)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        config = spec.get("config") or {}
        self.app = aioqueue.App(
            redis_url=spec["url"], prefix=spec["prefix"],
            max_payload_bytes=config.get("max_payload_bytes") or 1024 * 1024,
        )  # fmt: skip
        self.queue = self.app.queue(spec["queue"])
        self.jobs: list[list[aioqueue.Job[Any]]] = []

    def job(self, ref: Any) -> aioqueue.Job[Any]:
        if isinstance(ref, str):
            return self.queue.job(ref)
        step, index = (int(ref[0]), int(ref[1])) if isinstance(ref, list) else (int(ref), 0)
        return self.jobs[step][index]

    async def step(self, step: dict[str, Any]) -> dict[str, Any]:
        before = time.time() * 1000
        jobs: list[aioqueue.Job[Any]] = []
        try:
            out, jobs = await self._do(step)
        except Exception as exc:
            return describe(exc)
        finally:
            self.jobs.append(jobs)
        return {**out, "before_ms": before} if step["do"].startswith("enqueue") else out

    async def _do(self, step: dict[str, Any]) -> tuple[dict[str, Any], list[aioqueue.Job[Any]]]:
        do = step["do"]
        if do == "enqueue":
            job = await _call(self.queue, step)
            return {"id": job.id, "created": job.created}, [job]
        if do == "enqueue_many":
            many = await self.queue.enqueue_many([_call(self.queue, c) for c in step["calls"]])
            return {"jobs": [{"id": job.id, "created": job.created} for job in many]}, many
        job = self.job(step["job"])
        if do == "status":
            return {"status": str(await job.status())}, []
        if do == "result":
            return {"value": await job.result(timeout=30)}, []
        if do == "cancel":
            return {"cancelled": await job.cancel()}, []
        if do == "wait_running":
            await wait_until(lambda: _is_active(job), timeout=10)
            return {"status": "active"}, []
        raise ValueError(f"unknown step {do}")


async def _is_active(job: aioqueue.Job[Any]) -> bool:
    return await job.status() == aioqueue.JobStatus.ACTIVE


async def run_python(spec: dict[str, Any]) -> list[dict[str, Any]]:
    runner = PythonRunner(spec)
    try:
        return [await runner.step(step) for step in spec["steps"]]
    finally:
        await runner.app.close()
