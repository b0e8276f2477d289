"""The Lua scripts in ``store/lua``: read from the package, snippets included, run by SHA.

A script pulls in a shared snippet (``lua/include/<name>.lua``: the Redis clock, the
priority clamp, the schedule's wake-up, ...) with a line ``-- @include <name>``. The loader
puts the snippet's text in place of that line, once per script, so Redis runs one
self-contained script and its SHA1 covers the snippets: a changed snippet is a new script,
and every deploy runs the Lua it shipped with.
"""

from __future__ import annotations

import hashlib
import re
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.resources.abc import Traversable

    from redis.asyncio import Redis

Arg = str | bytes | int | float

LUA = files("aioqueue.store") / "lua"
_INCLUDE = re.compile(r"^-- @include ([a-z_]+)[ \t]*$", re.MULTILINE)


def assemble(name: str, root: Traversable = LUA) -> str:
    """The source of ``<root>/<name>.lua`` with its ``-- @include`` lines resolved from
    ``<root>/include``; a snippet that is missing or includes itself raises ValueError."""
    return _resolve(root, (root / f"{name}.lua").read_text("utf-8"), set(), (name,))


def _resolve(root: Traversable, source: str, included: set[str], chain: tuple[str, ...]) -> str:
    def include(match: re.Match[str]) -> str:
        snippet = match.group(1)
        if snippet in chain:
            raise ValueError(f"Lua include cycle: {' -> '.join((*chain, snippet))}")
        if snippet in included:
            return f"-- ({snippet}: included above)"
        included.add(snippet)
        path = root / "include" / f"{snippet}.lua"
        if not path.is_file():
            raise ValueError(f"{chain[-1]}.lua includes {snippet!r}, which lua/include lacks")
        return _resolve(root, path.read_text("utf-8"), included, (*chain, snippet)).rstrip("\n")

    return _INCLUDE.sub(include, source)


class Script:
    """A file from ``store/lua``, called by SHA and reloaded if Redis lost it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = assemble(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, redis: Redis, keys: Sequence[str | bytes], args: Sequence[Arg]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:  # it did not run, so running it again is safe
            await redis.script_load(self.source)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
