"""The public surface: ``aioqueue.__all__`` is explicit, sorted and complete; types ship."""

from __future__ import annotations

import ast
import inspect
import tomllib
from importlib.resources import files
from pathlib import Path

import aioqueue

PACKAGE = Path(aioqueue.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def names_imported_by_init() -> set[str]:
    """Names that ``aioqueue/__init__.py`` binds with ``from .module import name``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text("utf-8"))
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }


def test_all_is_sorted() -> None:
    assert aioqueue.__all__ == sorted(aioqueue.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(aioqueue.__all__) == len(set(aioqueue.__all__))


def test_every_name_in_all_exists() -> None:
    missing = [name for name in aioqueue.__all__ if not hasattr(aioqueue, name)]
    assert missing == []


def test_every_public_class_and_function_is_listed() -> None:
    imported = names_imported_by_init()
    assert len(imported) >= 10, "the AST walk found too few imports"
    public = {
        name
        for name in imported
        if not name.startswith("_")
        and (inspect.isclass(obj := getattr(aioqueue, name)) or inspect.isfunction(obj))
    }
    assert public <= set(aioqueue.__all__), (
        f"not in __all__: {sorted(public - set(aioqueue.__all__))}"
    )


def test_nothing_public_is_bound_without_being_listed() -> None:
    """Catches names bound in ``__init__`` some other way than the import statements."""
    unlisted = sorted(
        name
        for name, obj in vars(aioqueue).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__.startswith("aioqueue")
        and name not in aioqueue.__all__
    )
    assert unlisted == []


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from aioqueue import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(aioqueue.__all__)


def test_py_typed_ships_in_the_package() -> None:
    assert files("aioqueue").joinpath("py.typed").is_file()
    packages = tomllib.loads(PYPROJECT.read_text("utf-8"))["tool"]["hatch"]["build"]["targets"][
        "wheel"
    ]["packages"]
    assert "aioqueue" in packages, "the wheel must include the package directory with py.typed"


def test_lua_scripts_ship_in_the_package() -> None:
    lua = files("aioqueue").joinpath("store", "lua")
    assert lua.joinpath("take.lua").is_file()
