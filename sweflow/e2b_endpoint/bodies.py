"""The endpoint's JSON request bodies: read capped, JSON only, validated before any work.

A body must come as ``application/json`` (a browser's ``text/plain`` POST is refused, 415), at
most ``MAX_JSON_BYTES``, and match its model strictly: a timeout is a positive JSON integer,
metadata and environment variables are string to string, internet access is a JSON boolean.
Fields the SDK sends that the endpoint does not use are ignored.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from sweflow.errors import SweflowError

MAX_JSON_BYTES = 1 << 20
M = TypeVar("M", bound=BaseModel)


class BadRequest(SweflowError):
    """A request refused before any work: ``status`` says how (400, 413, 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class CreateBody(_Body):
    """``POST /sandboxes``: E2B's NewSandbox (the SDK sends ``allow_internet_access``)."""

    template: str = Field(alias="templateID", min_length=1, max_length=4096)
    timeout: int | None = Field(None, gt=0)
    metadata: dict[str, str] | None = None
    env_vars: dict[str, str] | None = Field(None, alias="envVars")
    allow_internet_access: bool | None = None
    allow_internet_access_camel: bool | None = Field(None, alias="allowInternetAccess")

    @field_validator("env_vars")
    @classmethod
    def _env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, text in (value or {}).items():
            if not name.isidentifier() or "\0" in text:
                raise ValueError(f"{name!r}: a variable needs a name like A_B and no NUL byte")
        return value

    @property
    def network(self) -> bool | None:
        if self.allow_internet_access is not None:
            return self.allow_internet_access
        return self.allow_internet_access_camel


class TimeoutBody(_Body):
    """``POST /sandboxes/{id}/timeout``."""

    timeout: int = Field(gt=0)


class ConnectBody(_Body):
    """``POST /sandboxes/{id}/connect``."""

    timeout: int | None = Field(None, gt=0)


class BuildRequestBody(_Body):
    """``POST /v3/templates``: the name and resources of a template to build."""

    name: str = Field(min_length=1, max_length=256)
    cpu_count: int | None = Field(None, alias="cpuCount", gt=0)
    memory_mb: int | None = Field(None, alias="memoryMB", gt=0)


class Step(_Body):
    type: str
    args: list[str] = Field(default_factory=list)
    files_hash: str | None = Field(None, alias="filesHash")


class BuildStartBody(_Body):
    """``POST /v2/templates/{id}/builds/{build}``: what to build from and the steps."""

    from_template: str | None = Field(None, alias="fromTemplate")
    from_image: str | None = Field(None, alias="fromImage")
    steps: list[Step] | None = None


def _is_json(content_type: str) -> bool:
    return content_type.partition(";")[0].strip().lower() == "application/json"


async def read_capped(request: Request, limit: int) -> bytes:
    """The whole body, refused (413) past ``limit`` bytes without reading the rest; later
    ``request.body()`` and ``request.form()`` parse it from here."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes is over the {limit} allowed")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the {limit} bytes allowed")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # noqa: SLF001 - starlette's own cache of the read body
    return body


async def parse(request: Request, model: type[M]) -> M:
    """The request's body as ``model``; BadRequest when it is not JSON or does not match."""
    content_type = request.headers.get("content-type")
    body = await read_capped(request, MAX_JSON_BYTES)
    if content_type is None and not body:
        body = b"{}"
    elif not _is_json(content_type or ""):
        raise BadRequest(415, f"request body must be application/json, not {content_type!r}")
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        raise BadRequest(400, describe(exc)) from None


def describe(exc: ValidationError) -> str:
    """One line naming the first bad field and what is wrong with it."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{where}: {first['msg']} (got {first.get('input')!r:.80})"
