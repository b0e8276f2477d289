"""Dependencies inside aioqueue point one way (STYLE.md, "Dependencies point one way").

    pure (no I/O)  ->  scripts  ->  task, queue  ->  runtime loops  ->  edges

A module may import modules of its own layer or a lower one, never a higher one. Imports
under ``if TYPE_CHECKING:`` are exempt (they never run); imports inside functions count.
Only ``scripts`` talks Lua to Redis, and every file in ``aioqueue/lua`` has its wrapper.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import aioqueue
from aioqueue import scripts

PACKAGE = Path(aioqueue.__file__).parent

PURE = 0
SCRIPTS = 1
REDIS = 2
RUNTIME = 3
EDGE = 4

LAYERS: dict[str, int] = {
    # pure, no I/O (plus the planned periodic, middleware and _clock)
    "errors": PURE,
    "settings": PURE,
    "keys": PURE,
    "job": PURE,
    "backoff": PURE,
    "_aio": PURE,
    "embedded": PURE,
    "priorities": PURE,
    "periodic": PURE,
    "middleware": PURE,
    "_clock": PURE,
    # the only module that sends EVALSHA
    "scripts": SCRIPTS,
    # Redis, thin over scripts
    "task": REDIS,
    "queue": REDIS,
    "batching": REDIS,
    "connection": REDIS,
    # runtime
    "runner": RUNTIME,
    "deadlines": RUNTIME,
    "consumer": RUNTIME,
    "slots": RUNTIME,
    "leases": RUNTIME,
    "scheduler": RUNTIME,
    "worker": RUNTIME,
    "watchdog": RUNTIME,
    "aborts": RUNTIME,
    "jobs": RUNTIME,
    "retention": RUNTIME,
    "health": RUNTIME,
    # edges
    "app": EDGE,
    "cli": EDGE,
    "__init__": EDGE,
    "__main__": EDGE,
}


def modules() -> dict[str, Path]:
    return {path.stem: path for path in sorted(PACKAGE.glob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The aioqueue modules one import statement depends on (``__init__`` for the package)."""
    if isinstance(node, ast.Import):
        dotted = [alias.name for alias in node.names]
        return {
            name.split(".")[1] if "." in name else "__init__"
            for name in dotted
            if name == "aioqueue" or name.startswith("aioqueue.")
        }
    base = node.module or ""
    if node.level == 0:
        if base != "aioqueue" and not base.startswith("aioqueue."):
            return set()
        base = base.removeprefix("aioqueue").removeprefix(".")
    elif node.level > 1:
        raise AssertionError("aioqueue has no subpackages to import from with '..'")
    if base:
        return {base.split(".")[0]}
    # from . import x: a submodule, or else a name that the package __init__ binds
    return {alias.name if alias.name in known else "__init__" for alias in node.names}


def runtime_imports(source: str, known: set[str]) -> set[str]:
    """Every aioqueue module imported at run time, wherever the import statement sits."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_targets(node, known))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph() -> dict[str, set[str]]:
    known = set(modules())
    return {
        name: runtime_imports(path.read_text("utf-8"), known) - {name}
        for name, path in modules().items()
    }


def test_the_import_scanner_itself() -> None:
    source = """
from __future__ import annotations
import typing
from typing import TYPE_CHECKING
from . import scripts, keys
from .keys import QueueKeys
import aioqueue.job
import collections.abc
from aioqueue.errors import ConfigError
if TYPE_CHECKING:
    from .worker import Worker
if typing.TYPE_CHECKING:
    from .app import App
else:
    from .backoff import Fixed
def late():
    from .runner import run_job
    from aioqueue import __version__
"""
    known = {"scripts", "keys", "job", "errors", "worker", "app", "backoff", "runner"}
    assert runtime_imports(source, known) == {
        "scripts",
        "keys",
        "job",
        "errors",
        "backoff",
        "runner",
        "__init__",
    }


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(set(modules()) - set(LAYERS))
    assert unplaced == [], f"add these modules to LAYERS: {unplaced}"


def test_dependencies_point_one_way() -> None:
    graph = import_graph()
    assert graph["worker"], "the scanner found no imports in worker.py"
    upward = sorted(
        f"{module} ({LAYERS[module]}) imports {target} ({LAYERS[target]})"
        for module, targets in graph.items()
        for target in targets
        if LAYERS[target] > LAYERS[module]
    )
    assert upward == []


@pytest.mark.parametrize("module", [name for name in modules() if LAYERS.get(name) == PURE])
def test_pure_modules_import_only_pure_modules(module: str) -> None:
    targets = import_graph()[module]
    assert {target for target in targets if LAYERS[target] != PURE} == set()


def test_no_import_cycles_at_run_time() -> None:
    graph = import_graph()
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert done == set(graph)


def test_only_scripts_sends_lua() -> None:
    offenders = sorted(
        f"{name}.py: {word}"
        for name, path in modules().items()
        if name != "scripts"
        for word in ("evalsha", "script_load", "register_script")
        if word in path.read_text("utf-8").lower()
    )
    assert offenders == []
    assert "evalsha" in (PACKAGE / "scripts.py").read_text("utf-8")


def _script_names() -> list[str]:
    """The names passed to ``Script("<name>")`` calls in scripts.py."""
    tree = ast.parse((PACKAGE / "scripts.py").read_text("utf-8"))
    return [
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Script"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


LUA_FILES = sorted(path.stem for path in (PACKAGE / "lua").glob("*.lua"))


def test_every_lua_file_has_exactly_one_script_and_back() -> None:
    names = _script_names()
    assert len(names) == len(set(names))
    assert sorted(names) == LUA_FILES
    assert len(LUA_FILES) >= 9


@pytest.mark.parametrize("name", LUA_FILES)
def test_lua_header_states_its_contract(name: str) -> None:
    source = (PACKAGE / "lua" / f"{name}.lua").read_text("utf-8")
    assert source.startswith(f"--[[ {name}:"), "the header opens with the script's name"
    header = source.split("]]", 1)[0]
    for word in ("KEYS[1]", "ARGV[1]", "Returns"):
        assert word in header, f"{name}.lua header does not mention {word}"


@pytest.mark.parametrize("name", LUA_FILES)
def test_every_lua_file_has_a_typed_wrapper(name: str) -> None:
    wrapper = getattr(scripts, name, None)
    assert inspect.iscoroutinefunction(wrapper), f"scripts.{name}() is missing"
