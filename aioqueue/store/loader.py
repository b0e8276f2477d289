"""The Lua scripts in ``store/lua``: read from the package, snippets included, run by SHA.

A script pulls in a shared snippet (``lua/include/<name>.lua``: the Redis clock, the
priority clamp, the schedule's wake-up, ...) with a line ``-- @include <name>``. The loader
puts the snippet's text in place of that line, once per script, so Redis runs one
self-contained script and its SHA1 covers the snippets: a changed snippet is a new script,
and every deploy runs the Lua it shipped with.

A script that publishes (``-- @include publish``) has a second build for Redis Cluster, in
which that line takes ``include/publish_sharded.lua`` (SPUBLISH): ``Script.on(redis)``
picks the build for a client, and the call does it by itself.

Each script's KEYS and ARGV are read from its header once, when it is loaded
(``Script.layout``: see ``layout``). Calling a script here goes through redis-py's
command layer (EVALSHA); the packed hot path goes through ``routing`` (see ``scripts``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from redis.asyncio import RedisCluster
from redis.exceptions import NoScriptError

from .layout import Layout

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from importlib.resources.abc import Traversable

    from redis.asyncio import Redis

    from .layout import Arg

LUA = files("aioqueue.store") / "lua"
# (No "^" anchor: with one, the regex engine tries every position of ~370 KB of Lua, 5x
# slower than a search for the literal; ``include`` checks that a match starts a line.)
_INCLUDE = re.compile(r"-- @include ([a-z_]+)[ \t]*$", re.MULTILINE)


SHARDED = {"publish": "publish_sharded"}  # the snippets a Redis Cluster build swaps


def assemble(
    name: str,
    root: Traversable = LUA,
    swaps: Mapping[str, str] | None = None,
    included: set[str] | None = None,
) -> str:
    """The source of ``<root>/<name>.lua`` with its ``-- @include`` lines resolved from
    ``<root>/include`` (``swaps``: snippet -> the one to include in its place; ``included``,
    if given, gets the names of the snippets it included); a snippet that is missing or
    includes itself raises ValueError."""
    source = _read(root, f"{name}.lua")
    if source is None:
        raise FileNotFoundError(f"no Lua script {name}.lua in {root}")
    return _resolve(root, source, set() if included is None else included, (name,), swaps or {})


def _read(root: Traversable, relative: str) -> str | None:
    """The text of ``<root>/<relative>``, or None if there is no such file."""
    return _packaged(relative) if root is LUA else _text(root, relative)


@functools.cache
def _packaged(relative: str) -> str | None:
    """A file of the package's own ``lua`` folder, read once: its thirty scripts and their
    Cluster builds include the same few snippets ~350 times (~10 ms of a worker's start)."""
    return _text(LUA, relative)


def _text(root: Traversable, relative: str) -> str | None:
    path = root.joinpath(*relative.split("/"))
    return path.read_text("utf-8") if path.is_file() else None


def _resolve(
    root: Traversable,
    source: str,
    included: set[str],
    chain: tuple[str, ...],
    swaps: Mapping[str, str],
) -> str:
    def include(match: re.Match[str]) -> str:
        if match.start() and source[match.start() - 1] != "\n":
            return match.group(0)  # (not at the start of a line: a comment about it)
        snippet = swaps.get(match.group(1), match.group(1))
        if snippet in chain:
            raise ValueError(f"Lua include cycle: {' -> '.join((*chain, snippet))}")
        if snippet in included:
            return f"-- ({snippet}: included above)"
        included.add(snippet)
        text = _read(root, f"include/{snippet}.lua")
        if text is None:
            raise ValueError(f"{chain[-1]}.lua includes {snippet!r}, which lua/include lacks")
        return _resolve(root, text, included, (*chain, snippet), swaps).rstrip("\n")

    if "-- @include" not in source:  # most snippets include none: skip scanning them
        return source
    return _INCLUDE.sub(include, source)


class Script:
    """A file from ``store/lua``, called by SHA and reloaded if Redis lost it."""

    def __init__(
        self, name: str, swaps: Mapping[str, str] | None = None, layout: Layout | None = None
    ) -> None:
        included: set[str] = set()
        self.name = name
        self.source = assemble(name, swaps=swaps, included=included)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self.layout = layout or Layout.parse(name, self.source)  # its header's KEYS, ARGV
        self.sharded = self  # its Redis Cluster build (itself when that changes nothing)
        if swaps is None and not included.isdisjoint(SHARDED):
            self.sharded = Script(name, SHARDED, self.layout)

    def on(self, redis: Redis) -> Script:
        """The build of this script for ``redis`` (a Redis Cluster client or not)."""
        return self.sharded if isinstance(redis, RedisCluster) else self

    async def __call__(self, redis: Redis, keys: Sequence[str | bytes], args: Sequence[Arg]) -> Any:
        script = self.on(redis)
        try:
            return await redis.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:  # it did not run, so running it again is safe
            await redis.script_load(script.source)
            return await redis.evalsha(script.sha, len(keys), *keys, *args)
