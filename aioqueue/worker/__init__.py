"""The runtime: a Worker and the components it runs (see ``worker.py`` for the list)."""

from .worker import Worker

__all__ = ["Worker"]
