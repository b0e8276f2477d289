"""The in-process backend's URL: ``memory://`` (the process's default in-memory server)
or ``memory://NAME`` (one of its own); the Apps of one process that name the same server
share its data, as Apps on one Redis do. It takes no options: anything else in the URL is
a mistake, refused when the App is made (``AppSettings`` checks the URL).

The backend itself (fakeredis running the same Lua scripts) is ``store/memory.py``.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

MEMORY_SCHEME = "memory"
_NAME = re.compile(r"[A-Za-z0-9_.-]*")


def memory_server_name(url: str) -> str:
    """The server a ``memory://[NAME]`` URL names ("" for the default); ValueError (one
    line, naming what is wrong) for an option, a port, credentials or a path."""
    parts = urlsplit(url)
    if parts.query:
        options = ", ".join(repr(option) for option in parse_qs(parts.query, True)) or "?"
        raise ValueError(
            f"unknown option {options}: memory:// takes none (memory:// or memory://NAME)"
        )
    if parts.fragment or parts.path not in ("", "/"):
        raise ValueError("memory:// takes a name only (memory:// or memory://NAME)")
    if "@" in parts.netloc or ":" in parts.netloc:
        raise ValueError("memory:// has no credentials or port (memory:// or memory://NAME)")
    if not _NAME.fullmatch(parts.netloc):
        raise ValueError(
            f"memory:// server name {parts.netloc!r} may use letters, digits, '.', '_', '-'"
        )
    return parts.netloc
