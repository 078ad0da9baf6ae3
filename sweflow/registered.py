"""A config field that names an entry of a registry (sandbox backends, executors, RL backends):
checked by the registry's own check, whose message the config error keeps, and shown in the
config form (the Prefect UI) with the choices as they are when the form is made, so that a
registration made later shows too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from sweflow.errors import SweflowError


def registered_name(check: Callable[[str], str], choices: Callable[[], dict[str, Any]]) -> Any:
    """The type of a ``str`` field that ``check`` accepts (it raises a SweflowError naming the
    choices); ``choices()`` gives the form's schema keys (``enum`` or ``examples``...)."""

    def validate(name: str) -> str:
        try:
            return check(name)
        except SweflowError as exc:
            raise ValueError(str(exc)) from None

    return Annotated[str, AfterValidator(validate),
                     Field(json_schema_extra=lambda schema: schema.update(choices()))]  # fmt: skip
