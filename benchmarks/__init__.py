"""Benchmarks: ``python -m benchmarks.quick``."""
