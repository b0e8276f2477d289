"""The command line (``ops/``) and the dashboard (``web/``) reach Redis through the public
Queue and App API only (ARCHITECTURE.md, "Who owns what"): neither imports the Redis layer,
so a change there cannot break them, and whatever they show a user can read too."""

from __future__ import annotations

from tests.test_layering import folder, import_graph

ALLOWED_STORE_IMPORTS: dict[str, set[str]] = {}
"""The store modules each ops/ or web/ module may import: none. (A launcher that had to
would be listed here, by module, with its reason.)"""


def test_ops_and_web_never_import_the_redis_layer() -> None:
    graph = import_graph()
    checked = [module for module in graph if folder(module) in ("ops", "web")]
    assert "ops.commands" in checked and "web.views" in checked
    found = {
        module: {target for target in graph[module] if folder(target) == "store"}
        for module in checked
    }
    assert {module: targets for module, targets in found.items() if targets} == (
        ALLOWED_STORE_IMPORTS
    )
