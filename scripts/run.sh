#!/usr/bin/env bash
# The main job on a fresh machine: install aioqueue, then run the quickstart app, whose
# worker processes real tasks. With no AIOQUEUE_REDIS_URL it starts an embedded server.
EXTRAS=embedded
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python -m examples.quickstart "$@"
