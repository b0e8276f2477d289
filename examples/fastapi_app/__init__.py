"""A FastAPI service that enqueues reports and a worker that builds them, as two processes.

- ``tasks.py``: the ``aioqueue.App`` and its task; both processes import it.
- ``resources.py``: dependency providers both sides use (FastAPI's ``Depends`` in the
  API, aioqueue's in the task).
- ``web.py``: the enqueue-only API (``uvicorn examples.fastapi_app.web:api``).
- the worker: ``aioqueue worker examples.fastapi_app.tasks:app``.
- ``python -m examples.fastapi_app``: both at once, for a try on one machine.
- ``examples/deploy/``: the two as deployed (Docker, Compose, systemd, Kubernetes).
"""
