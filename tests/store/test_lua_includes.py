"""Lua snippets (``store/lua/include``): written once, pulled into scripts by the loader.

Pure: reads the package's files (and a temporary tree for the loader's errors); the
assembled scripts themselves run in the ``test_scripts_*`` tests, on fakeredis and Redis.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from aioqueue.store import loader, scripts

LUA = Path(loader.__file__).parent / "lua"
SCRIPTS = sorted(path.stem for path in LUA.glob("*.lua"))
SNIPPETS = sorted(path.stem for path in (LUA / "include").glob("*.lua"))
_DIRECTIVE = re.compile(r"^-- @include ([a-z_]+)$", re.MULTILINE)
_FUNCTION = re.compile(r"^local function ([a-z_]+)\(", re.MULTILINE)


def own_text(path: Path) -> str:
    return path.read_text("utf-8")


def direct_includes(path: Path) -> list[str]:
    return _DIRECTIVE.findall(own_text(path))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_include_is_resolved(name: str) -> None:
    source = loader.assemble(name)
    assert "-- @include" not in source
    for snippet in direct_includes(LUA / f"{name}.lua"):
        for function in _FUNCTION.findall(own_text(LUA / "include" / f"{snippet}.lua")):
            assert source.count(f"local function {function}(") == 1, f"{function} twice"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_uses_what_it_includes(name: str) -> None:
    text = own_text(LUA / f"{name}.lua")
    for snippet in direct_includes(LUA / f"{name}.lua"):
        functions = _FUNCTION.findall(own_text(LUA / "include" / f"{snippet}.lua"))
        assert any(f"{function}(" in text for function in functions), f"{snippet} unused"


def test_the_header_stays_first() -> None:
    for name in SCRIPTS:
        assert loader.assemble(name).startswith(f"--[[ {name}:")


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_every_snippet_is_shared(snippet: str) -> None:
    """A snippet used by one script only belongs in that script (a cluster build's snippet
    counts as the one it replaces)."""
    replaced = {swap: original for original, swap in loader.SHARDED.items()}
    users = [name for name in SCRIPTS if replaced.get(snippet, snippet) in _all_includes(name)]
    assert len(users) >= 2, f"{snippet} is used by {users}"


def test_scripts_that_publish_have_a_cluster_build_with_sharded_pub_sub() -> None:
    publishing = {script.name for script in scripts.ALL_SCRIPTS if "'PUBLISH'" in script.source}
    assert publishing == {
        "ack", "cancel", "channel_post", "deliver", "enqueue_linked", "reclaim", "topic_ack",
    }  # fmt: skip
    for script in scripts.ALL_SCRIPTS:
        sharded = script.sharded
        assert "'SPUBLISH'" not in script.source and "'PUBLISH'" not in sharded.source
        assert (sharded is not script) == (script.name in publishing)
        if sharded is not script:
            assert "'SPUBLISH'" in sharded.source and sharded.sha != script.sha


def _all_includes(name: str) -> set[str]:
    found: set[str] = set()
    pending = direct_includes(LUA / f"{name}.lua")
    while pending:
        snippet = pending.pop()
        if snippet not in found:
            found.add(snippet)
            pending += direct_includes(LUA / "include" / f"{snippet}.lua")
    return found


@pytest.mark.parametrize(
    ("concept", "pattern"),
    [
        ("the Redis clock", r"redis\.call\('TIME'\)"),
        ("the priority clamp", r"math\.min\(9"),
        ("the schedule's wake-up", r"RPUSH', schedule_wake"),
        ("a finished record's expiry", r"PEXPIRE', key"),
        ("promotion", r"ZRANGEBYSCORE', schedule"),
        ("a new job's due time", r"due_ms > due"),
        ("an enqueued id's look-up in the done hashes", r"and is_done\("),
    ],
)
def test_shared_logic_is_written_once(concept: str, pattern: str) -> None:
    files = [path for path in sorted(LUA.rglob("*.lua")) if re.search(pattern, own_text(path))]
    assert len(files) == 1, f"{concept} is written in {[path.name for path in files]}"
    assert files[0].parent.name == "include"


def test_the_sha_covers_the_snippets() -> None:
    for script in scripts.ALL_SCRIPTS:
        assert script.sha == hashlib.sha1(loader.assemble(script.name).encode()).hexdigest()
        assert "-- @include" not in script.source


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_snippets_are_included_once_in_the_order_first_asked(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "main.lua": "--[[ main: x ]]\n-- @include b\n-- @include a\nreturn 1\n",
            "include/a.lua": "local function a() end\n",
            "include/b.lua": "-- @include a\nlocal function b() a() end\n",
        },
    )
    assert loader.assemble("main", root) == (
        "--[[ main: x ]]\nlocal function a() end\nlocal function b() a() end\n"
        "-- (a: included above)\nreturn 1\n"
    )


def test_a_missing_snippet_is_an_error(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {"main.lua": "-- @include nowhere\n"})
    with pytest.raises(ValueError, match=r"main\.lua includes 'nowhere'"):
        loader.assemble("main", root)


def test_an_include_cycle_is_an_error(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "main.lua": "-- @include a\n",
            "include/a.lua": "-- @include b\n",
            "include/b.lua": "-- @include a\n",
        },
    )
    with pytest.raises(ValueError, match="main -> a -> b -> a"):
        loader.assemble("main", root)


def test_only_a_directive_that_starts_a_line_includes(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path,
        {
            "main.lua": "-- @include a\nlocal x = 1 -- @include a\n",
            "include/a.lua": "local function a() end\n",
        },
    )
    assert loader.assemble("main", root) == ("local function a() end\nlocal x = 1 -- @include a\n")


def test_a_cluster_build_exists_where_it_differs() -> None:
    """A script has its own Cluster build exactly when the swapped snippets change it."""
    for script in scripts.ALL_SCRIPTS:
        sharded = loader.assemble(script.name, swaps=loader.SHARDED)
        assert script.sharded.source == sharded
        assert (script.sharded is script) == (sharded == script.source), script.name
    assert any(script.sharded is not script for script in scripts.ALL_SCRIPTS)
