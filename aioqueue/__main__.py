"""``python -m aioqueue``: the same as the ``aioqueue`` command."""

import sys

from .ops.cli import main

sys.exit(main())
