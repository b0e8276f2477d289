"""How the command line writes logs: text for a terminal, or one JSON object per line
for a log collector. The library itself adds no handlers; only the CLI calls this."""

from __future__ import annotations

import logging
import time
from typing import Literal

import orjson

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, and the
    traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def configure(level: str, form: LogFormat) -> None:
    handler = logging.StreamHandler()
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
