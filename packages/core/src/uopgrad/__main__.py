"""`python -m uopgrad ...`: the `uopgrad` command (uopgrad/cli.py)."""

import sys

from uopgrad.cli import main

__all__: list[str] = []

sys.exit(main())
