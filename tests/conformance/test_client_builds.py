"""Each client's own checks, in the suite: Go (gofmt, vet, its unit tests, offline from
vendor/) and Node (its unit tests, and tsc over the JSDoc types). They skip without the
toolchain, unless AIOQUEUE_REQUIRE_CLIENTS=1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conformance import runners

OFFLINE = runners.go_env()


def _require(reason: str | None) -> None:
    if reason is None:
        return
    if runners.required():
        pytest.fail(f"{reason}, and {runners.REQUIRE_ENV}=1 requires it")
    pytest.skip(reason)


def _run(command: list[str], cwd: os.PathLike[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.mark.timeout(300)
def test_go_client_is_formatted_vetted_and_tested() -> None:
    _require(runners.go_missing())
    unformatted = _run(["gofmt", "-l", ".", "cmd"], runners.GO_MODULE)
    assert [f for f in unformatted.split() if not f.startswith("vendor/")] == [], unformatted
    _run(["go", "vet", "./..."], runners.GO_MODULE, OFFLINE)
    _run(["go", "test", "./..."], runners.GO_MODULE, OFFLINE)


@pytest.mark.timeout(300)
def test_node_client_is_typed_and_tested(tmp_path: Path) -> None:
    _require(runners.node_missing())
    _run(["node", "--test", "test/"], runners.NODE_PACKAGE)
    tsc = ["node", "node_modules/typescript/bin/tsc"]
    _run([*tsc, "-p", "."], runners.NODE_PACKAGE)
    _run([*tsc, "-p", "tsconfig.types.json", "--outDir", str(tmp_path)], runners.NODE_PACKAGE)
    assert "enqueueMany(calls: Call[]): Promise<Job[]>" in (tmp_path / "client.d.ts").read_text()
