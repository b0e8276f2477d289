"""ARCHITECTURE.md's owner claims for a job in flight, checked in the source: only
``worker/inflight.py`` hands a Settlement to a batcher, and only it writes a held job's
state (the fields of ``RunningJob``)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import aioqueue
from aioqueue.worker.running import RunningJob

PACKAGE = Path(aioqueue.__file__).parent
OWNER = PACKAGE / "worker" / "inflight.py"


def _sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text("utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OWNER
    }


def _is_super_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def test_only_inflight_settles() -> None:
    """A batcher's own ``settle`` may extend its base's (``super().settle``); nobody else
    calls one."""
    offenders = sorted(
        f"{name}:{node.lineno}"
        for name, tree in _sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "settle"
        and not _is_super_call(node.func.value)
    )
    assert offenders == []


def _stored_attributes(node: ast.AST) -> list[ast.Attribute]:
    """The attributes an assignment statement writes (tuple targets included)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    return [
        written
        for target in targets
        for written in ast.walk(target)
        if isinstance(written, ast.Attribute) and isinstance(written.ctx, ast.Store)
    ]


def test_only_inflight_writes_a_running_jobs_state() -> None:
    fields = {field.name for field in dataclasses.fields(RunningJob)}
    offenders = sorted(
        f"{name}:{written.lineno} .{written.attr}"
        for name, tree in _sources().items()
        for node in ast.walk(tree)
        for written in _stored_attributes(node)
        if written.attr in fields
        and not (isinstance(written.value, ast.Name) and written.value.id == "self")
    )
    assert offenders == []
