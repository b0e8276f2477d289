"""Dependencies inside aioqueue point one way, and the folders are the layers.

    core <- store <- client | worker <- app <- web <- ops <- testing <- __init__, __main__

A module's layer is its folder (``aioqueue/<folder>/...``; ``app.py``, ``__init__.py`` and
``__main__.py`` at the top are layers of their own). A module may import modules of its
own folder or of a lower layer, never a higher one; ``client`` and ``worker`` are siblings
that never import each other. ``web`` (the dashboard, an ASGI app) sits below ``ops`` (the
command line, which serves it); ``testing`` (the kit and its pytest plugin, which may start
a server with ``ops``) sits above them all but the package's face. Every
import counts: under ``if TYPE_CHECKING:`` or inside a function as much as at the top, so
a type hint cannot hide a dependency. Only the store talks Lua to Redis.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import aioqueue

PACKAGE = Path(aioqueue.__file__).parent

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("store",),
    ("client", "worker"),
    ("app",),
    ("web",),
    ("ops",),
    ("testing",),
    ("__init__", "__main__"),
)
"""The layers, lowest first; the folders of one layer never import each other (the order
is ARCHITECTURE.md's diagram, checked by test_the_diagram_names_the_layers_in_order)."""

RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}


def folder(module: str) -> str:
    """The layer folder of a dotted module name ("store.scripts" -> "store")."""
    return module.split(".")[0]


def modules() -> dict[str, Path]:
    """Every module by dotted name under aioqueue ("store.keys"; a package is "store")."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_package(module: str) -> bool:
    return module != "__init__" and (PACKAGE / module.replace(".", "/") / "__init__.py").exists()


def _package_of(module: str) -> list[str]:
    """The package a module's relative imports start from, as a list of parts."""
    parts = [] if module == "__init__" else module.split(".")
    return parts if _is_package(module) else parts[:-1]


def _targets(node: ast.Import | ast.ImportFrom, module: str, known: set[str]) -> set[str]:
    """The aioqueue modules one import statement depends on (``__init__`` for the package)."""
    if isinstance(node, ast.Import):
        return {
            alias.name.removeprefix("aioqueue.") if "." in alias.name else "__init__"
            for alias in node.names
            if alias.name == "aioqueue" or alias.name.startswith("aioqueue.")
        }
    if node.level == 0:
        base_name = node.module or ""
        if base_name != "aioqueue" and not base_name.startswith("aioqueue."):
            return set()
        base = base_name.split(".")[1:]
    else:
        package = _package_of(module)
        if node.level - 1 > len(package):
            raise AssertionError(f"{module}: relative import above the package")
        base = package[: len(package) - (node.level - 1)] + (node.module or "").split(".")
        base = [part for part in base if part]
    found = set()
    for alias in node.names:  # from x import y: a submodule y, or a name bound in x
        candidate = ".".join([*base, alias.name])
        found.add(candidate if candidate in known else ".".join(base) or "__init__")
    return found


def imports_of(source: str, module: str, known: set[str]) -> set[str]:
    """Every aioqueue module that ``source`` imports, wherever the statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_targets(node, module, known))
    return found - {module}


def import_graph() -> dict[str, set[str]]:
    known = set(modules())
    return {
        name: imports_of(path.read_text("utf-8"), name, known) for name, path in modules().items()
    }


def test_the_import_scanner_itself() -> None:
    source = """
from __future__ import annotations
import typing
from typing import TYPE_CHECKING
from . import scripts, routing
from ..core.keys import QueueKeys
from ..core import errors
import aioqueue.client.job
import collections.abc
from aioqueue.core.errors import ConfigError
if TYPE_CHECKING:
    from ..worker import Worker
def late():
    from ..worker.runner import run_job
    from aioqueue import __version__
"""
    known = {
        "store", "store.scripts", "store.routing", "store.wire", "core", "core.keys",
        "core.errors", "client.job", "worker", "worker.runner", "__init__",
    }  # fmt: skip
    assert imports_of(source, "store.wire", known) == {
        "store.scripts", "store.routing", "core.keys", "core.errors", "client.job", "worker",
        "worker.runner", "__init__",
    }  # fmt: skip


def test_the_folders_are_the_layers() -> None:
    """Every module sits in a layer folder; every folder (and top-level file) is a layer."""
    tops = {folder(name) for name in modules()}
    assert tops == set(RANK), f"unplaced: {sorted(tops - set(RANK))}, gone: {set(RANK) - tops}"
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "app.py"]


def test_dependencies_point_down() -> None:
    graph = import_graph()
    assert graph["worker.worker"], "the scanner found no imports in worker/worker.py"
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if RANK[folder(target)] > RANK[folder(module)]
    )
    assert upward == []


def test_folders_of_one_layer_never_import_each_other() -> None:
    graph = import_graph()
    crossing = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if folder(module) != folder(target) and RANK[folder(module)] == RANK[folder(target)]
    )
    assert crossing == []


def test_no_import_cycles() -> None:
    """No cycle between modules, type-only imports included (a cycle of type hints is a
    knot in the design all the same)."""
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


@pytest.mark.parametrize("module", ["worker.runner", "worker.inflight"])
def test_a_job_runs_without_the_redis_layer(module: str) -> None:
    """The runner and the in-flight job use the typed records, never Redis itself."""
    assert {target for target in import_graph()[module] if folder(target) == "store"} == set()


def test_only_the_store_sends_lua() -> None:
    offenders = sorted(
        f"{name}: {word}"
        for name, path in modules().items()
        if folder(name) != "store"
        for word in ("evalsha", "script_load", "register_script")
        if word in path.read_text("utf-8").lower()
    )
    assert offenders == []
    assert "evalsha" in (PACKAGE / "store" / "loader.py").read_text("utf-8")


def _diagram_row(line: str) -> tuple[str, ...]:
    """The layer folders a row of the diagram names: its chunks (split by 2+ spaces) made
    only of paths ("ops/", "app.py", "__init__.py __main__.py"), not its description."""
    found = []
    for chunk in re.split(r"\s{2,}", line.strip()):
        tokens = chunk.split()
        if tokens and all(re.fullmatch(r"[\w]+(/|\.py)", token) for token in tokens):
            found += [token.removesuffix("/").removesuffix(".py") for token in tokens]
    return tuple(found)


def test_the_diagram_names_the_layers_in_order() -> None:
    """ARCHITECTURE.md's layer diagram lists the layer folders top to bottom, the reverse
    of LAYERS, folders of one layer on one row."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text("utf-8")
    diagram = text.split("## Layers", 1)[1].split("```", 2)[1]
    rows = [row for line in diagram.splitlines() if (row := _diagram_row(line))]
    assert [set(row) for row in reversed(rows)] == [set(layer) for layer in LAYERS]
