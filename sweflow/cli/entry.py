"""The ``sweflow`` console script: Ctrl-C at any moment, even while the CLI is still importing,
ends with exit status 130 and no traceback; SIGTERM (a process manager stopping the command:
Prefect cancelling a flow run, Slurm, ``kill``) winds down the same way, closing every sandbox,
and exits with 143."""

from __future__ import annotations

import gc
import signal
import sys

_terminated = False


def _terminate(_signum: int, _frame: object) -> None:
    """Raise where Ctrl-C's KeyboardInterrupt would be, so SIGTERM takes the same path."""
    global _terminated
    _terminated = True
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        from sweflow.cli.main import app

        app()
    except KeyboardInterrupt:
        _interrupted(130)
    except SystemExit as done:  # typer turns the interrupt into exit status 130 itself
        if _terminated:
            _interrupted(128 + signal.SIGTERM)
        if done.code == 130:
            _interrupted(130)
        raise done


def _interrupted(status: int) -> None:
    """Exit now: the command has wound down (its sandboxes closed), and the interpreter's last
    garbage collection would walk every object a trainer loaded for seconds; the OS frees them."""
    gc.freeze()
    sys.exit(status)
