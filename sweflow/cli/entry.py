"""The ``sweflow`` console script: Ctrl-C at any moment, even while the CLI is still importing,
ends with exit status 130 and no traceback."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from sweflow.cli.main import app

        app()
    except KeyboardInterrupt:
        sys.exit(130)
