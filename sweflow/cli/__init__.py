"""The ``sweflow`` command line (``app``, the typer application, is imported on first use, so
that the console script's own entry point starts before it)."""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from sweflow.cli.main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
