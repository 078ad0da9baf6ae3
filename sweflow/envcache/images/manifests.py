"""Which image, and what it is made of: the metadata of ``docker save`` tars, OCI layouts and
registries, read into a ``SourceImage`` (its config and layer blobs, each with its digests).

REF picks one image from an archive holding several: a docker archive's RepoTags
(``repo:tag``), an OCI layout's ``org.opencontainers.image.ref.name`` (often just the tag) or
``io.containerd.image.name``; ``docker.io/library/`` and ``:latest`` may be left out. Without
REF the archive must hold exactly one image. An image index (several platforms) resolves to
linux on the host's architecture. Every document is checked against the digest that names it.
"""

from __future__ import annotations

import hashlib
import platform
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from sweflow.envcache.images.sources import (
    DIGEST,
    Archive,
    ImageImportError,
    ImageSource,
    LayerBlob,
    SourceImage,
    oci_blob,
)

# the platform an image index resolves to: the OCI name of this machine's architecture
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

_HEX_NAME = re.compile(r"([0-9a-f]{64})(\.json)?")
_INDEX_TYPES = frozenset(
    {
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)
_MANIFEST_TYPES = frozenset(
    {
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    }
)
# what a registry is asked for: an image manifest, or an index of them
MANIFEST_ACCEPT = ", ".join(sorted(_INDEX_TYPES | _MANIFEST_TYPES))
_CONFIG_TYPES = frozenset(
    {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
)
_LAYER_TYPES = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    }
)


# -- docker save ------------------------------------------------------------------------------


def read_docker_save(archive: Archive, ref: str | None) -> SourceImage:
    """The image chosen by ``ref`` from a ``docker save`` archive (legacy or OCI-style)."""
    if not archive.has("manifest.json"):
        raise ImageImportError(f"{archive.where}: no manifest.json: not a `docker save` archive")
    entries = archive.read_json("manifest.json")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ImageImportError(f"{archive.where}: manifest.json is not a list of images")
    entry = _choose(archive, entries, ref, lambda e: e.get("RepoTags") or [])
    config_name = str(entry.get("Config", ""))
    match = _HEX_NAME.fullmatch(PurePosixPath(config_name).name)
    config_digest = f"sha256:{match.group(1)}" if match else None
    config = _config(archive, config_name, config_digest)
    blobs = [str(name) for name in entry.get("Layers") or []]
    diff_ids = _diff_ids(archive, config, len(blobs))
    pairs = zip(blobs, diff_ids, strict=True)
    layers = [LayerBlob(path, diff_id, _blob_digest(path)) for path, diff_id in pairs]
    image_id = config_digest or f"sha256:{hashlib.sha256(archive.read(config_name)).hexdigest()}"
    return SourceImage(config, image_id, layers)


def _blob_digest(path: str) -> str | None:
    """The digest a ``blobs/sha256/<hex>`` name promises (newer docker saves); None otherwise."""
    parts = PurePosixPath(path).parts
    if len(parts) == 3 and parts[:2] == ("blobs", "sha256") and _HEX_NAME.fullmatch(parts[2]):
        return f"sha256:{parts[2]}"
    return None


# -- OCI image layout -------------------------------------------------------------------------


def read_oci(archive: Archive, ref: str | None) -> SourceImage:
    """The image chosen by ``ref`` (then by platform) from an OCI image layout."""
    if not archive.has("oci-layout") or not archive.has("index.json"):
        raise ImageImportError(f"{archive.where}: no oci-layout or index.json: not an OCI layout")
    index = archive.read_json("index.json")
    entries = list_manifests(archive, index, "index.json")
    return image_of(archive, _choose(archive, entries, ref, oci_names))


def image_of(source: ImageSource, desc: dict[str, Any]) -> SourceImage:
    """The image behind the manifest (or index) descriptor ``desc``: config and layer blobs."""
    manifest = _descend(source, desc)
    config_desc = manifest.get("config") or {}
    if config_desc.get("mediaType") not in _CONFIG_TYPES:
        raise ImageImportError(
            f"{source.where}: unsupported media type {config_desc.get('mediaType')!r} of the "
            f"config of {desc.get('digest')}: not a container image"
        )
    config_digest = _checked_digest(source, config_desc)
    config = _config(source, oci_blob(config_digest), config_digest)
    descs = manifest.get("layers") or []
    diff_ids = _diff_ids(source, config, len(descs))
    layers = []
    for layer, diff_id in zip(descs, diff_ids, strict=True):
        if layer.get("mediaType") not in _LAYER_TYPES:
            raise ImageImportError(
                f"{source.where}: layer {layer.get('digest')} has the unsupported media type "
                f"{layer.get('mediaType')!r}"
                + (" (zstandard is not installed)" if _is_zstd(layer) else "")
            )
        digest = _checked_digest(source, layer)
        layers.append(LayerBlob(oci_blob(digest), diff_id, digest))
    return SourceImage(config, config_digest, layers)


def _descend(source: ImageSource, desc: dict[str, Any]) -> dict[str, Any]:
    """The image manifest behind ``desc``, through image indexes (the host's platform)."""
    for _ in range(8):  # indexes nest rarely, and never this deep
        digest = _checked_digest(source, desc)
        doc = source.manifest(digest)
        if desc.get("mediaType") not in _INDEX_TYPES and "manifests" not in doc:
            return doc
        candidates = list_manifests(source, doc, digest)
        chosen = [d for d in candidates if _platform(d) == f"linux/{HOST_ARCH}"]
        if not chosen:
            platforms = ", ".join(_platform(d) for d in candidates) or "none"
            raise ImageImportError(
                f"{source.where}: the index {digest} has no linux/{HOST_ARCH} image; "
                f"platforms: {platforms}"
            )
        desc = chosen[0]
    raise ImageImportError(f"{source.where}: image indexes nest too deep under {desc}")


def list_manifests(source: ImageSource, index: Any, where: str) -> list[dict[str, Any]]:
    """The manifest descriptors an image index (or a layout's index.json) lists."""
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ImageImportError(f"{source.where}: {where} lists no manifests")
    return entries


def oci_names(desc: dict[str, Any]) -> list[str]:
    """The image names an OCI descriptor's annotations give it."""
    notes = desc.get("annotations") or {}
    keys = ("org.opencontainers.image.ref.name", "io.containerd.image.name")
    return [notes[key] for key in keys if key in notes]


def _is_zstd(desc: dict[str, Any]) -> bool:
    return str(desc.get("mediaType")).endswith("+zstd")


def _platform(desc: dict[str, Any]) -> str:
    found = desc.get("platform") or {}
    return f"{found.get('os', '?')}/{found.get('architecture', '?')}"


def _checked_digest(source: ImageSource, desc: dict[str, Any]) -> str:
    digest = desc.get("digest")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise ImageImportError(
            f"{source.where}: unsupported digest {digest!r} (only sha256:<hex> is read)"
        )
    return digest


def archive_names(archive: Archive) -> tuple[str, list[str]]:
    """(import kind, image names) of an archive: a ``docker save``'s RepoTags, an OCI layout's
    annotated names; an archive of neither kind names no image."""
    if archive.has("manifest.json"):  # docker save, older or newer
        entries = archive.read_json("manifest.json")
        return "docker-archive", [
            t for e in entries if isinstance(e, dict) for t in e.get("RepoTags") or []
        ]
    if archive.has("index.json"):
        entries = list_manifests(archive, archive.read_json("index.json"), "index.json")
        return "oci", [n for e in entries for n in oci_names(e)]
    return "docker-archive", []


# -- shared by both formats -------------------------------------------------------------------


def _choose(
    source: ImageSource,
    entries: list[dict[str, Any]],
    ref: str | None,
    names: Callable[[dict[str, Any]], list[str]],
) -> dict[str, Any]:
    """The entry named ``ref``; without ``ref`` the only one. Errors list the names present."""
    present = sorted({name for entry in entries for name in names(entry)})
    if ref is None:
        matches = entries
    else:
        matches = [e for e in entries if any(ref in name_forms(name) for name in names(e))]
    if len(matches) > 1:  # one tag per platform in an OCI index.json
        native = [e for e in matches if _platform(e) == f"linux/{HOST_ARCH}"]
        matches = native if len(native) == 1 else matches
    if len(matches) == 1:
        return matches[0]
    tags = ", ".join(present) or "none"
    if not matches and ref is not None:
        raise ImageImportError(f"{source.where}: no image tagged {ref!r}; tags present: {tags}")
    if not matches:
        raise ImageImportError(f"{source.where}: the archive holds no image")
    raise ImageImportError(
        f"{source.where}: holds {len(matches)} images; name one as PATH:REF (tags: {tags})"
    )


def name_forms(name: str) -> set[str]:
    """The ways a user may write a stored image name: as is, without docker.io's prefixes,
    without ``:latest``."""
    forms = {name}
    forms |= {name.removeprefix(p) for p in ("docker.io/library/", "docker.io/")}
    return forms | {form.removesuffix(":latest") for form in forms}


def _config(source: ImageSource, name: str, digest: str | None) -> dict[str, Any]:
    if not name:
        raise ImageImportError(f"{source.where}: the image names no config")
    config = source.read_json(name, digest)
    if not isinstance(config, dict):
        raise ImageImportError(f"{source.where}: the image config {name} is not an object")
    return config


def _diff_ids(source: ImageSource, config: dict[str, Any], count: int) -> list[str]:
    """The config's uncompressed layer digests, one per layer blob, each a sha256."""
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    if len(diff_ids) != count:
        raise ImageImportError(
            f"{source.where}: the config lists {len(diff_ids)} layer digests for {count} layers"
        )
    bad = [d for d in diff_ids if not isinstance(d, str) or not DIGEST.fullmatch(d)]
    if bad:
        raise ImageImportError(f"{source.where}: unsupported layer digests {bad}")
    return diff_ids
