"""Registries by name (sandbox backends, executors, RL backends, pipeline stages): one loader
and one check for them all, and the config field that names an entry.

A registry is a table of built-in names to ``module:Attr``; anywhere a name is asked for, a
dotted path (``mypackage.mod:Attr`` or ``mypackage.mod.Attr``) names an entry outside the table,
as mini-swe-agent does with its environments. The module is imported only when the entry is
loaded. The config field is checked by the same check, whose message the config error keeps,
and shown in the config form (the Prefect UI) with the choices as they are when the form is
made, so that a registration made later shows too."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from sweflow.errors import ConfigError, SweflowError

Builtins = Mapping[str, str]  # name -> "module:Attr"


def choices_help(builtins: Builtins) -> str:
    """One line for option help and errors: the built-in names and the dotted-path form."""
    return f"{' | '.join(builtins)}, or a dotted path module:Attr"


def import_path(name: str, builtins: Builtins) -> tuple[str, str]:
    """The module and attribute a built-in name or a dotted path points at."""
    path = builtins.get(name, name)
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    return module, attr


def check_named(
    kind: str, name: str, builtins: Builtins, error: type[SweflowError] = ConfigError
) -> str:
    """``name`` if it is built in or reads as a dotted path; imports nothing. Else ``error``
    naming the kind, the name and the choices."""
    if name in builtins:
        return name
    module, attr = import_path(name, builtins)
    if not module or not attr.isidentifier():
        raise error(f"unknown {kind} {name!r}; choose one of {choices_help(builtins)}")
    return name


def load_named(
    kind: str, name: str, builtins: Builtins, error: type[SweflowError] = ConfigError
) -> Any:
    """What the built-in ``name`` or the dotted path ``name`` points at, its module imported
    now; ``error`` names the kind and the name when it cannot be."""
    module, attr = import_path(check_named(kind, name, builtins, error), builtins)
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise error(f"{kind} {name!r} cannot be imported: {exc}") from exc


def registered_name(check: Callable[[str], str], choices: Callable[[], dict[str, Any]]) -> Any:
    """The type of a ``str`` field that ``check`` accepts (it raises a SweflowError naming the
    choices); ``choices()`` gives the form's schema keys (``enum`` or ``examples``...)."""

    def validate(name: str) -> str:
        try:
            return check(name)
        except SweflowError as exc:
            raise ValueError(str(exc)) from None

    return Annotated[
        str,
        AfterValidator(validate),
        Field(json_schema_extra=lambda schema: schema.update(choices())),
    ]
