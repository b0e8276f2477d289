"""aioqueue.web: a dashboard to see and steer queues from a browser.

Server-rendered (Starlette and Jinja2), with inline SVG charts and a few lines of plain
JavaScript for the live refresh: nothing to build, nothing fetched from elsewhere. Needs
the ``web`` extra (``pip install 'aioqueue[web]'``)::

    from starlette.routing import Mount
    from aioqueue.web import create_dashboard

    routes = [Mount("/queues", create_dashboard(app, actions=True, authorize=is_admin))]

or alone: ``await aioqueue.web.serve(app, port=8080)`` (``aioqueue dashboard``).
"""

from __future__ import annotations

try:
    from .dashboard import create_dashboard
    from .guard import Authorize
    from .standalone import serve
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
    if exc.name in ("starlette", "jinja2", "uvicorn"):
        raise ModuleNotFoundError(
            f"aioqueue.web needs {exc.name}: pip install 'aioqueue[web]'", name=exc.name
        ) from exc
    raise

__all__ = ["Authorize", "create_dashboard", "serve"]
