"""Lazy package exports (PEP 562): ``from sweflow.agent import Batch`` imports only what it needs.

A package's ``__init__`` lists ``{name: "module"}`` and gets a module ``__getattr__`` that
imports the defining module on first access, so importing a light part of a package (a config
model) does not pull in its heavy parts (the openai client, swebench, datasets).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` serving ``exports`` ({name: submodule})."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
