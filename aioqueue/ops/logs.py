"""How the command line writes logs: text for a terminal, or one JSON object per line
for a log collector. The library itself adds no handlers; only the CLI calls this."""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

import orjson

from ..core.middleware import current_job

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")

# What every LogRecord has: anything else on a record came from ``extra=`` (a field).
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, the
    record's fields (``extra=``: aioqueue's lines about a job carry ``job_id``, ``task``
    and ``queue``, and more where they apply: ``attempt``, ``outcome``, ``seconds``), and
    the traceback when there is one. A line logged while a job runs (a handler's own
    logging, in its task or its thread) gets that job's ``job_id``, ``task`` and ``queue``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(fields(record))
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's own fields, or else those of the job running where it was logged."""
    found = {name: value for name, value in record.__dict__.items() if name not in _STANDARD}
    if "job_id" not in found:
        try:
            job = current_job()
        except LookupError:
            return found
        found.update(job_id=job.id, task=job.task, queue=job.queue)
    return found


def configure(level: str, form: LogFormat) -> None:
    handler = logging.StreamHandler()
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
