"""YAML config files validated into pydantic models, with errors that name the file and field."""

from __future__ import annotations

import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from sweflow.errors import SweflowError
from sweflow.paths import name_problem

M = TypeVar("M", bound=BaseModel)


def _one_folder_name(value: str) -> str:
    if (problem := name_problem(value)) is not None:
        raise ValueError(problem)
    return value


# A field whose value names a folder or a file (an instance id, a run id): one path component.
FolderName = Annotated[str, AfterValidator(_one_folder_name)]


class ConfigModel(BaseModel):
    """A record of settings as people write them (YAML, ``key=value`` overrides, the Prefect
    UI's form): unknown keys are refused, every number is finite, and true or false is never
    read as a number. ``learning_rate: inf`` trained nothing and printed as JSON's invalid
    ``Infinity``; ``max_open: true`` became 1."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _numeric(field.annotation):
            raise ValueError("expected a number, not true or false")
        return value


def _numeric(annotation: Any) -> bool:
    """Whether a field of this type takes numbers and no bool (``int``, ``float | None``)."""
    if annotation in (int, float):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _numeric(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = get_args(annotation)
        return bool not in args and any(_numeric(arg) for arg in args)
    return False


def describe(exc: ValidationError) -> str:
    """``field.sub: message; ...`` for every error of a validation (a check of the whole
    model has no field: its message alone)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
        for e in exc.errors()
    )


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


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], error: type[SweflowError]
) -> dict[str, Any]:
    """Set each ``a.b.c=value`` of ``overrides`` in ``data`` (in place; the value is YAML, so
    ``12`` is a number, ``[a, b]`` a list and ``null`` None); returns ``data``."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise error(f"override {item!r}: expected dotted.key=value (e.g. agent.max_steps=12)")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise error(f"override {item!r}: the value is not valid YAML: {exc}") from None
        target = data
        for i, part in enumerate(parts[:-1]):
            node = target.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(parts[: i + 1])
                raise error(f"override {item!r}: {where} is not a section")
            target = node
        target[parts[-1]] = value
    return data
