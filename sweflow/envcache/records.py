"""What the store writes down: a layer as a manifest names it, an instance's manifest, a layer's
sidecar record, a lease on a layer stack. Their JSON is the store's on-disk format, read back by
every process (and node) that uses the store, so the types live apart from the operations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

LayerKind = Literal["base", "python", "env", "instance", "image"]


class Layer(BaseModel):
    """One layer of an instance's stack, as its manifest records it."""

    digest: str
    kind: LayerKind
    size_bytes: int
    path: Path | None = Field(
        None,
        exclude=True,
        description="where to use it now (set by commit, import_dir, get_layer; not stored)",
    )


class Manifest(BaseModel):
    """An instance's layers, lowest first, and what the builder wants to remember about it."""

    instance_id: str
    layers: list[Layer]
    meta: dict[str, Any] = Field(default_factory=dict)
    created: str


class LayerInfo(BaseModel):
    """The sidecar ``layers/<digest>.json``: computed once, at commit or import."""

    digest: str
    kind: LayerKind
    size_bytes: int
    entries: int
    digest_s: float
    source: str | None = None  # an imported layer's directory (``layers/<digest>`` links to it)
    created: str


class LeaseRecord(BaseModel):
    """A lease file ``leases/<instance>.<stack>.lease``: what gc keeps while it is live."""

    instance_id: str
    layers: list[str]  # digests, lowest first


def load_manifest(path: Path) -> Manifest | None:
    """The manifest in the file ``path``, or None if there is none (or an unreadable one)."""
    try:
        return Manifest.model_validate_json(path.read_text())
    except (FileNotFoundError, ValidationError):
        return None
