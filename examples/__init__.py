"""Runnable aioqueue examples: ``python -m examples.quickstart``, ``python -m examples.webapp``."""
