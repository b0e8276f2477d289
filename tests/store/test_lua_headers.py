"""Every file in ``store/lua`` is one script with one typed wrapper, a header that states
its contract, and return codes read in one table."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import aioqueue
from aioqueue.store import scripts

PACKAGE = Path(aioqueue.__file__).parent


def _script_names() -> list[str]:
    """The names passed to ``Script("<name>")`` calls in store/scripts.py."""
    tree = ast.parse((PACKAGE / "store" / "scripts.py").read_text("utf-8"))
    return [
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Script"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


LUA_FILES = sorted(path.stem for path in (PACKAGE / "store" / "lua").glob("*.lua"))


def test_every_lua_file_has_exactly_one_script_and_back() -> None:
    names = _script_names()
    assert len(names) == len(set(names))
    assert sorted(names) == LUA_FILES
    assert len(LUA_FILES) >= 9
    assert sorted(script.name for script in scripts.ALL_SCRIPTS) == LUA_FILES


@pytest.mark.parametrize("name", LUA_FILES)
def test_lua_header_states_its_contract(name: str) -> None:
    source = (PACKAGE / "store" / "lua" / f"{name}.lua").read_text("utf-8")
    assert source.startswith(f"--[[ {name}:"), "the header opens with the script's name"
    header = source.split("]]", 1)[0]
    for word in ("KEYS[1", "ARGV[1", "Returns"):
        assert word in header, f"{name}.lua header does not mention {word}"


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_lua_file_has_a_typed_wrapper(name: str) -> None:
    wrapper = getattr(scripts, name, None)
    assert inspect.iscoroutinefunction(wrapper), f"scripts.{name}() is missing"


def test_the_return_codes_are_read_in_one_table() -> None:
    """Codes are given meaning in ``scripts.CODES`` alone: no other table of codes."""
    tree = ast.parse((PACKAGE / "store" / "scripts.py").read_text("utf-8"))
    tables = [node for node in ast.walk(tree) if isinstance(node, ast.Dict) and _int_keys(node)]
    assert len(tables) == len(scripts.CODES)  # the inner tables of CODES, and no others
    for name in scripts.CODES:
        assert name in LUA_FILES


def _int_keys(table: ast.Dict) -> bool:
    keys = [key.operand if isinstance(key, ast.UnaryOp) else key for key in table.keys]
    return bool(keys) and all(
        isinstance(key, ast.Constant) and isinstance(key.value, int) for key in keys
    )
