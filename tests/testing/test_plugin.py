"""The pytest plugin, as a project's own suite meets it: a test file run by a pytest of its
own (the plugin loaded by its entry point, pytest-asyncio in its default strict mode)."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aioqueue.testing import plugin

USER_TESTS = """
import pytest

import aioqueue
from aioqueue.testing import drain

pytestmark = pytest.mark.asyncio
SEEN = []

app = aioqueue.App()  # a project's own App, its URL from its settings


@app.task
async def greet(name: str) -> str:
    return f"hello {name}"


async def test_a_fresh_app_runs_what_it_enqueued(aioqueue_app, aioqueue_url):
    @aioqueue_app.task
    async def add(a: int, b: int) -> int:
        return a + b

    job = await add.enqueue(1, 2)
    assert (await drain(aioqueue_app))[job].ok
    assert await job.result() == 3
    SEEN.append(aioqueue_url)


async def test_each_test_starts_empty(aioqueue_app, aioqueue_url):
    assert SEEN and aioqueue_url not in SEEN
    assert (await aioqueue_app.queue().counts()).complete == 0


async def test_an_app_of_ones_own_is_isolated(aioqueue_isolate, aioqueue_url):
    assert aioqueue_isolate(app) is app and app.redis_url == aioqueue_url
    job = await greet.enqueue("ada")
    await drain(app)
    assert await job.result() == "hello ada"


def test_the_isolated_app_is_back_on_its_own_url():
    assert app.redis_url is None


@pytest.mark.aioqueue_redis("real")
async def test_a_marked_test_runs_on_a_real_server(aioqueue_url):
    assert aioqueue_url.startswith("redis://127.0.0.1:")
"""


def run_pytest(directory: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": "", **env},
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["memory", "real"])
def test_a_projects_tests_use_the_fixtures(tmp_path: Path, backend: str) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    done = run_pytest(tmp_path, f"--aioqueue-redis={backend}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


def test_without_pytest_asyncio_a_fixture_says_what_it_needs(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pytest_asyncio.py").write_text("raise ImportError('not installed')\n")
    (tmp_path / "test_user.py").write_text("def test_it(aioqueue_app):\n    pass\n")
    done = run_pytest(tmp_path, "-p", "no:asyncio", PYTHONPATH=str(shadow))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "aioqueue's fixtures need pytest-asyncio: pip install 'aioqueue[testing]'" in (
        done.stdout
    )


def test_a_bad_backend_name_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        "import pytest\n\n@pytest.mark.aioqueue_redis('redis')\n"
        "def test_it(aioqueue_url):\n    pass\n"
    )
    done = run_pytest(tmp_path)
    assert "aioqueue_redis: 'redis' is not one of memory, real" in done.stdout + done.stderr


def test_the_plugin_is_loaded_and_leaves_other_suites_alone(
    pytestconfig: pytest.Config,
) -> None:
    """In every pytest run once installed: nothing runs unless asked for (no autouse
    fixture, no FLUSHALL), and its fixtures' names cannot shadow a suite's own."""
    assert pytestconfig.pluginmanager.get_plugin("aioqueue") is plugin
    tree = ast.parse(inspect.getsource(plugin))
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.keyword)
                and node.arg == "autouse"]  # fmt: skip
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and node.attr.lower() == "flushall"]  # fmt: skip
    fixtures = [
        name for name, value in vars(plugin).items()
        if type(value).__name__ == "FixtureFunctionDefinition"  # (pytest 8.4 and later)
        or hasattr(value, "_pytestfixturefunction")  # (before)
    ]  # fmt: skip
    assert fixtures and all(name.startswith("aioqueue_") for name in fixtures)
