"""YAML config files validated into pydantic models, with errors that name the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from sweflow.errors import SweflowError

M = TypeVar("M", bound=BaseModel)


def describe(exc: ValidationError) -> str:
    """``field.sub: message; ...`` for every error of a validation."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def read_yaml_mapping(path: Path, what: str, error: type[SweflowError]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{what} {path}: expected a mapping at the top")
    return data


def validate_model(
    model: type[M], data: dict[str, Any], source: str, error: type[SweflowError]
) -> M:
    try:
        return model(**data)
    except ValidationError as exc:
        raise error(f"{source}: {describe(exc)}") from None
