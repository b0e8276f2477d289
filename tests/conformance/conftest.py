"""The clients of the conformance suite: Python always; Go and Node when their toolchains
are here (they skip with the reason otherwise, unless AIOQUEUE_REQUIRE_CLIENTS=1, as in CI,
where a missing one fails)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conformance import runners

OTHER_PROCESSES = ("go", "node")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Go and Node clients run in processes of their own, which cannot reach memory://:
    they run on the real backend only (the Python client runs on both)."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_memory = params.get("redis_backend") == "memory"
        (dropped if on_memory and params.get("runner") in OTHER_PROCESSES else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _unavailable(reason: str | None) -> None:
    if reason is None:
        return
    if runners.required():
        pytest.fail(f"{reason}, and {runners.REQUIRE_ENV}=1 requires it")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def go_runner(tmp_path_factory: pytest.TempPathFactory) -> runners.Runner:
    _unavailable(runners.go_missing())
    try:
        binary = runners.build_go(tmp_path_factory.mktemp("go"))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"the Go client does not build: {exc}")
    return runners.process_runner([str(binary)], runners.GO_MODULE)


@pytest.fixture(scope="session")
def node_runner() -> runners.Runner:
    _unavailable(runners.node_missing())
    script = Path("conformance") / "runner.js"
    return runners.process_runner(["node", str(script)], runners.NODE_PACKAGE)


@pytest.fixture
def runner(request: pytest.FixtureRequest) -> runners.Runner:
    client = request.param
    if client == "python":
        return runners.run_python
    runner: runners.Runner = request.getfixturevalue(f"{client}_runner")
    return runner
