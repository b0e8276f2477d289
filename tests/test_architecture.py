"""ARCHITECTURE.md stays true: every path it names exists, and its owner claims hold.

The claims checked here are the ones a change can break without noticing: who formats
key names and that no module outgrows the budget (who sends Lua: test_layering.py; who
settles a job and writes its state: tests/worker/test_ownership.py).
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

import aioqueue

PACKAGE = Path(aioqueue.__file__).parent
ROOT = PACKAGE.parent
DOC = (ROOT / "ARCHITECTURE.md").read_text("utf-8")
MAX_MODULE_LINES = 400

_PATH = re.compile(r"`([\w./]+\.(?:py|lua|md)|[\w]+/)(?::[\w.]+)?`")


def named_paths() -> list[str]:
    """The file and folder paths the page names in backticks (``store/keys.py``)."""
    return sorted({match.group(1) for match in _PATH.finditer(DOC)})


def _exists(name: str) -> bool:
    """A path resolves from the repository, the package, or the package's Lua folder."""
    bases = (ROOT, PACKAGE, PACKAGE / "store", PACKAGE / "store" / "lua")
    return any((base / name).exists() for base in bases)


def test_the_page_names_paths() -> None:
    assert len(named_paths()) > 40, "the path pattern found too few names"


@pytest.mark.parametrize("name", named_paths())
def test_every_path_it_names_exists(name: str) -> None:
    assert _exists(name), f"ARCHITECTURE.md names {name}, which does not exist"


def _modules() -> dict[str, Path]:
    return {str(path.relative_to(PACKAGE)): path for path in sorted(PACKAGE.rglob("*.py"))}


def _formats_a_key(node: ast.JoinedStr) -> bool:
    """An f-string that builds a key: a ``prefix`` (or a queue's ``base``) followed by a
    colon, or a hash tag's braces."""
    parts = node.values
    for before, after in itertools.pairwise(parts):
        if (
            isinstance(before, ast.FormattedValue)
            and isinstance(after, ast.Constant)
            and str(after.value).startswith(":")
            and re.search(r"(prefix|base)\b", ast.unparse(before.value))
        ):
            return True
    return any(isinstance(part, ast.Constant) and "{" in str(part.value) for part in parts)


def test_only_keys_py_formats_key_names() -> None:
    offenders = sorted(
        f"{name}:{node.lineno}"
        for name, path in _modules().items()
        if name != "core/keys.py"
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.JoinedStr) and _formats_a_key(node)
    )
    assert offenders == []


def test_the_key_check_finds_key_formatting() -> None:
    tree = ast.parse('f"{self.prefix}:job:{job_id}"; f"{p}:{{{queue}}}"; f"{name}: {count}"')
    found = [node for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)]
    assert [_formats_a_key(node) for node in found] == [True, True, False]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_outgrows_the_budget(name: str) -> None:
    lines = len((PACKAGE / name).read_text("utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines"
