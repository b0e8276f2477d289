"""Benchmarks: ``python -m benchmarks.quick``.

``python -m benchmarks.delayed [--quick]`` measures delayed jobs: how late their handlers
start after the due time (p50/p99/max, one worker process at concurrency 100, a sparse and
a burst scenario; ``--trace`` splits the lateness into promoter wake-up, promote, take and
dispatch), and what one promoter tick costs with 1,000,000 jobs scheduled (client and
Redis-side µs per ``leasing.promote`` call with nothing or 1,000 due, and memory per job).
"""
