"""Container images into the layer store, from archives or a registry, without a docker daemon.

The prebuilt SWE-bench, SWE-Gym and SWE-smith images are stacks of layer tars. Each image layer
becomes one store layer (kind ``image``), so a local sandbox on those layers sees the same bits
as ``docker run`` of the image, and images that share layers share them in the store.

Image names (``import_image``, and ``import_base`` for a builder's ``base``)::

    docker-archive:PATH[:REF]   a ``docker save`` tar (manifest.json, configs, layer tars)
    oci:PATH[:REF]              an OCI image layout: a directory, or a tar of one
    registry:[HOST[:PORT]/]REPO[:TAG|@sha256:HEX]   a registry's v2 HTTP API, anonymously

PATH is the longest prefix of the text after the first colon that names an existing file or
directory; what follows it (after one more colon) is REF, so ``docker-archive:/x/img.tar:swe:v1``
reads ``/x/img.tar`` and chooses ``swe:v1`` (``manifests`` says how REF picks an image).

Reading is elsewhere in this package (``sources``, ``manifests``, ``registry``), and so is
unpacking one layer (``layers``). Here: the names, and the store's side. The ``diff_id`` ->
store digest mapping is kept in ``<store>/refs/image-layer-<hex>``, so a layer is extracted once
per store however many images, or imports, contain it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sweflow.envcache.images.layers import extract_checked
from sweflow.envcache.images.manifests import (
    archive_names,
    image_of,
    name_forms,
    read_docker_save,
    read_oci,
)
from sweflow.envcache.images.registry import RegistrySource
from sweflow.envcache.images.sources import (
    Archive,
    ImageImportError,
    ImageSource,
    LayerBlob,
    SourceImage,
)
from sweflow.envcache.records import Layer
from sweflow.envcache.store import LayerStore
from sweflow.envcache.storefiles import flocked
from sweflow.instances import Instance
from sweflow.progress import Progress

PREFIXES = ("docker-archive:", "oci:", "registry:")
REF_PREFIX = "image-layer-"  # <store>/refs/image-layer-<diff_id hex> holds the store digest


@dataclass(frozen=True)
class ImportedImage:
    """An image's layers in the store, lowest first, and what its config says a process gets."""

    source: str  # the name it was imported from
    image_id: str  # sha256:<digest of the config>, docker's image id
    layers: list[Layer]
    env: dict[str, str]
    workdir: str  # "/" when the image sets none, as docker does
    user: str  # "" means root
    entrypoint: list[str]
    cmd: list[str]
    extracted: int  # layers extracted by this import; the others were already in the store


def import_base(
    store: LayerStore, name: str, *, progress: Progress | None = None
) -> ImportedImage | None:
    """``import_image`` for a base name that is an image (archive or registry reference); None
    for any other name
    (``host``, ``debian:SUITE``, ``docker:IMAGE``, a directory: ``rootfs.resolve_base``'s)."""
    if not name.startswith(PREFIXES):
        return None
    return import_image(store, name, progress=progress)


def import_image(
    store: LayerStore, name: str, *, progress: Progress | None = None
) -> ImportedImage:
    """Import the image ``name`` (see the module docstring) into ``store``, layer by layer."""
    kind, _, rest = name.partition(":")
    if f"{kind}:" not in PREFIXES or not rest:
        raise ImageImportError(
            f"not an image name: {name!r}; expected docker-archive:PATH[:REF], oci:PATH[:REF] "
            "or registry:[HOST/]REPO[:TAG|@DIGEST]"
        )
    if kind == "registry":
        with RegistrySource.open(rest) as registry:
            return _import(store, registry, image_of(registry, registry.top()), name, progress)
    path, ref = split_path_ref(rest)
    with Archive.open(path) as archive:
        image = read_oci(archive, ref) if kind == "oci" else read_docker_save(archive, ref)
        return _import(store, archive, image, name, progress)


def split_path_ref(text: str) -> tuple[Path, str | None]:
    """``PATH[:REF]`` -> (PATH, REF): PATH is the longest prefix naming something that exists."""
    cuts = [len(text)] + [i for i in range(len(text) - 1, 0, -1) if text[i] == ":"]
    for cut in cuts:
        if os.path.lexists(text[:cut]):
            return Path(text[:cut]), text[cut + 1 :] or None
    raise ImageImportError(f"no image archive at {text!r} (nor at any prefix of it before a ':')")


def _import(
    store: LayerStore, source: ImageSource, image: SourceImage, name: str, progress: Progress | None
) -> ImportedImage:
    missing = [blob.path for blob in image.layers if not source.has(blob.path)]
    if missing:  # before any extraction: an incomplete archive leaves nothing behind
        raise ImageImportError(f"{source.where}: layer blobs missing: {', '.join(missing)}")
    if image.layers and os.geteuid() != 0:
        raise ImageImportError(
            f"{source.where}: importing image layers needs root (owners, whiteout devices)"
        )
    refs = store.root / "refs"
    refs.mkdir(exist_ok=True)
    layers, extracted = [], 0
    for number, blob in enumerate(image.layers, 1):
        layer, fresh = _import_layer(store, source, blob, refs)
        layers.append(layer)
        extracted += fresh
        if progress is not None:
            done = "extracted" if fresh else "already in the store"
            progress(f"{name}: layer {number}/{len(image.layers)} {blob.diff_id[:19]} {done}")
    settings = image.config.get("config") or {}
    pairs = (item.partition("=") for item in settings.get("Env") or [])
    env = {key: value for key, _, value in pairs}
    return ImportedImage(
        source=name,
        image_id=image.image_id,
        layers=layers,
        env=env,
        workdir=settings.get("WorkingDir") or "/",
        user=settings.get("User") or "",
        entrypoint=list(settings.get("Entrypoint") or []),
        cmd=list(settings.get("Cmd") or []),
        extracted=extracted,
    )


def _import_layer(
    store: LayerStore, source: ImageSource, blob: LayerBlob, refs: Path
) -> tuple[Layer, bool]:
    """The store layer of ``blob``: the one its ref names, or extracted and committed now.

    The ref's flock makes concurrent imports of one layer extract it once."""
    ref = refs / (REF_PREFIX + blob.diff_id.removeprefix("sha256:"))
    with flocked(ref.with_name(ref.name + ".lock")):
        if ref.is_file():
            known = store.get_layer(ref.read_text().strip())
            if known is not None:
                return known, False
        with store.fresh_upper() as upper:
            extract_checked(source, blob, upper)
            layer = store.commit(upper, "image")
        ref.write_text(layer.digest)
    return layer, True


# -- finding an image by its name -------------------------------------------------------------

_names_cache: dict[tuple[str, int], tuple[str, list[str]]] = {}


def find_image(source: str, ref: str) -> str:
    """The import name (for ``import_image``) of the image ``ref`` in ``source``: a folder of
    image archives (``docker save`` tars and OCI layouts, as directories or tars: the one whose
    tags name ``ref``) or ``registry:HOST[:PORT]`` (``ref`` pulled from that registry)."""
    if source.startswith("registry:"):
        return f"{source.rstrip('/')}/{ref}"
    folder = Path(source)
    if not folder.is_dir():
        raise ImageImportError(
            f"images: {source} is neither a folder of archives nor registry:HOST"
        )
    seen: list[str] = []
    for path in sorted(folder.iterdir()):
        if not (path.is_dir() or path.name.endswith((".tar", ".tar.gz", ".tgz"))):
            continue
        kind, names = _archive_names(path)
        if any(ref in name_forms(name) for name in names):
            return f"{kind}:{path}:{ref}"
        seen += names
    raise ImageImportError(
        f"no image {ref!r} in {folder} ({len(seen)} images there: "
        + (", ".join(sorted(seen)[:10]) or "none")
        + ("..." if len(seen) > 10 else "")
        + ")"
    )


def unreachable_image(instance: Instance, images: str, exc: Exception) -> str:
    """Why ``instance``'s image cannot be had, and the ways round it."""
    return (
        f"{instance.instance_id}: image {instance.image} cannot be had from {images} ({exc}); "
        "ways round: a registry or mirror that serves it to anonymous pulls "
        "(--images registry:HOST[:PORT]), a folder of saved images "
        "(docker save / skopeo copy, --images DIR), or the row's container-free recipe "
        "(no --images; SWE-bench, SWE-Gym, SWE-smith and SWE-rebench rows have one, R2E-Gym "
        "rows for the repositories sweflow/data/r2egym_recipes.yaml has)"
    )


def _archive_names(path: Path) -> tuple[str, list[str]]:
    """(import kind, image names) of one archive, read once per modification time."""
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _names_cache:
        with Archive.open(path) as archive:
            _names_cache[key] = archive_names(archive)
    return _names_cache[key]
