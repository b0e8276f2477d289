"""The Redis layer's own shape: each package's docstring names each of its modules, and no
module is long."""

from __future__ import annotations

import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

from aioqueue import store
from aioqueue.store import scripts

STORE = Path(store.__file__).parent


@pytest.mark.parametrize("package", [store, scripts], ids=lambda package: package.__name__)
def test_the_docstring_lists_every_module(package: ModuleType) -> None:
    """One line each, starting with the module's name (a package's with a slash)."""
    listed = {line.split()[0] for line in (package.__doc__ or "").splitlines() if line.strip()}
    for module in pkgutil.iter_modules(package.__path__):
        assert (module.name + "/" if module.ispkg else module.name) in listed, module.name


@pytest.mark.parametrize("module", sorted(STORE.rglob("*.py")), ids=lambda path: path.name)
def test_no_module_is_long(module: Path) -> None:
    assert len(module.read_text("utf-8").splitlines()) <= 400
