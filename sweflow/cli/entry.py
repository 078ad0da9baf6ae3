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
    except Exception as error:
        if _is_disguised_interrupt(error):
            _interrupted(128 + signal.SIGTERM if _terminated else 130)
        raise


def _is_disguised_interrupt(error: BaseException | None) -> bool:
    """Whether ``error`` is a Ctrl-C that compiled code caught and re-raised as its own error:
    pydantic-core, interrupted while it builds a model's schema (any lazy import defines models),
    raises a SchemaError whose message ends in the wrapped ``KeyboardInterrupt:``, with no cause."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return True
        if str(error).rstrip().endswith("KeyboardInterrupt:"):
            return True
        error = error.__cause__ or error.__context__
    return False


def _interrupted(status: int) -> None:
    """Exit now: the command has wound down (its sandboxes closed), and the interpreter's last
    garbage collection would walk every object a trainer loaded for seconds; the OS frees them."""
    gc.freeze()
    sys.exit(status)
