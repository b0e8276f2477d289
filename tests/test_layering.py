"""Dependencies inside aioqueue point one way (ARCHITECTURE.md, "Layers").

    core (pure)  ->  store (Redis)  ->  producer side | worker  ->  edges (app, cli)

A module may import modules of its own layer or a lower one, never a higher one; the
producer side and the worker are siblings that never import each other. Imports under
``if TYPE_CHECKING:`` are exempt (they never run); imports inside functions count. Only
the store talks Lua to Redis, and every file in ``store/lua`` has its typed wrapper.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import aioqueue
from aioqueue.store import scripts

PACKAGE = Path(aioqueue.__file__).parent

CORE = 0
STORE = 1
PRODUCER = 2
WORKER = 2  # a sibling of the producer side, checked apart
EDGE = 3

_CORE = {
    "errors", "settings", "backoff", "priorities", "periodic", "middleware", "observers", "limits",
    "store.keys", "store.records", "store.payload",
}  # fmt: skip
_PRODUCER = {"task", "enqueue", "job", "queue", "messaging", "topics", "workflows"}
_EDGE = {"app", "__init__", "__main__"}


def layer(module: str) -> int:
    if module in _CORE:
        return CORE
    if module in _PRODUCER:
        return PRODUCER
    if module in _EDGE or module.split(".")[0] in ("ops", "web"):
        return EDGE
    if module == "store" or module.startswith("store."):
        return STORE
    if module == "worker" or module.startswith("worker."):
        return WORKER
    raise AssertionError(f"no layer for {module}: place it in test_layering.py")


def modules() -> dict[str, Path]:
    """Every module by dotted name under aioqueue ("store.keys"; a package is "store")."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package_of(module: str, known: set[str]) -> list[str]:
    """The package a module's relative imports start from, as a list of parts."""
    parts = [] if module == "__init__" else module.split(".")
    return parts if module in known and _is_package(module) else parts[:-1]


def _is_package(module: str) -> bool:
    return module != "__init__" and (PACKAGE / module.replace(".", "/") / "__init__.py").exists()


def _targets(node: ast.Import | ast.ImportFrom, module: str, known: set[str]) -> set[str]:
    """The aioqueue modules one import statement depends on (``__init__`` for the package)."""
    if isinstance(node, ast.Import):
        dotted = [alias.name for alias in node.names]
        return {
            name.removeprefix("aioqueue.") if "." in name else "__init__"
            for name in dotted
            if name == "aioqueue" or name.startswith("aioqueue.")
        }
    if node.level == 0:
        base_name = node.module or ""
        if base_name != "aioqueue" and not base_name.startswith("aioqueue."):
            return set()
        base = base_name.split(".")[1:]
    else:
        package = _package_of(module, known)
        if node.level - 1 > len(package):
            raise AssertionError(f"{module}: relative import above the package")
        base = package[: len(package) - (node.level - 1)] + (node.module or "").split(".")
        base = [part for part in base if part]
    found = set()
    for alias in node.names:  # from x import y: a submodule y, or a name bound in x
        candidate = ".".join([*base, alias.name])
        found.add(candidate if candidate in known else ".".join(base) or "__init__")
    return found


def runtime_imports(source: str, module: str, known: set[str]) -> set[str]:
    """Every aioqueue module imported at run time, wherever the import statement sits."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_targets(node, module, known))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph() -> dict[str, set[str]]:
    known = set(modules())
    return {
        name: runtime_imports(path.read_text("utf-8"), name, known) - {name}
        for name, path in modules().items()
    }


def test_the_import_scanner_itself() -> None:
    source = """
from __future__ import annotations
import typing
from typing import TYPE_CHECKING
from . import scripts, keys
from .keys import QueueKeys
from ..errors import ConfigError
from .. import periodic
import aioqueue.job
import collections.abc
from aioqueue.errors import ConfigError
if TYPE_CHECKING:
    from ..worker import Worker
if typing.TYPE_CHECKING:
    from ..app import App
else:
    from ..backoff import Fixed
def late():
    from ..worker.runner import run_job
    from aioqueue import __version__
"""
    known = {
        "store", "store.scripts", "store.keys", "job", "errors", "worker", "app", "backoff",
        "worker.runner", "periodic", "__init__",
    }  # fmt: skip
    assert runtime_imports(source, "store.wire", known) == {
        "store.scripts", "store.keys", "errors", "periodic", "job", "backoff", "worker.runner",
        "__init__",
    }  # fmt: skip


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer(module)  # raises for a module nobody placed


def test_the_tree_shows_the_layers() -> None:
    names = set(modules())
    assert {"store.scripts", "store.wire", "store.records", "store.loader"} <= names
    assert {"worker.worker", "worker.inflight", "worker.consumer", "worker.acks"} <= names
    assert all(layer(name) in (CORE, STORE) for name in names if name.startswith("store."))
    assert all(layer(name) == WORKER for name in names if name.startswith("worker."))


def test_dependencies_point_one_way() -> None:
    graph = import_graph()
    assert graph["worker.worker"], "the scanner found no imports in worker/worker.py"
    upward = sorted(
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    )
    assert upward == []


def test_the_producer_side_and_the_worker_never_import_each_other() -> None:
    graph = import_graph()
    crossing = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if {_side(module), _side(target)} == {"producer", "worker"}
    )
    assert crossing == []


def _side(module: str) -> str:
    if module in _PRODUCER:
        return "producer"
    return "worker" if module == "worker" or module.startswith("worker.") else "other"


@pytest.mark.parametrize("module", sorted(name for name in modules() if layer(name) == CORE))
def test_core_modules_import_only_core_modules(module: str) -> None:
    targets = import_graph()[module]
    assert {target for target in targets if layer(target) != CORE} == set()


@pytest.mark.parametrize("module", ["worker.runner", "worker.inflight"])
def test_a_job_runs_without_the_redis_layer(module: str) -> None:
    """The runner and the in-flight job use the typed records, never Redis itself."""
    store = {target for target in import_graph()[module] if layer(target) == STORE}
    assert store == set()


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


def test_only_the_store_sends_lua() -> None:
    offenders = sorted(
        f"{name}: {word}"
        for name, path in modules().items()
        if layer(name) != STORE
        for word in ("evalsha", "script_load", "register_script")
        if word in path.read_text("utf-8").lower()
    )
    assert offenders == []
    assert "evalsha" in (PACKAGE / "store" / "loader.py").read_text("utf-8")


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
    for word in ("KEYS[1]", "ARGV[1]", "Returns"):
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
