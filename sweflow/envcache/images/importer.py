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
reads ``/x/img.tar`` and chooses ``swe:v1``. REF picks one image from an archive holding several:
a docker archive's RepoTags (``repo:tag``), an OCI layout's ``org.opencontainers.image.ref.name``
(often just the tag) or ``io.containerd.image.name``; ``docker.io/library/`` and ``:latest`` may
be left out. Without REF the archive must hold exactly one image. A registry reference follows
docker's defaults (no HOST: Docker Hub, ``library/`` for a one-part REPO, tag ``latest``) and is
read over https, or http for a registry on a loopback address. An image index (several
platforms) resolves to linux on the host's architecture.

Layers are read as they are stored (tar, or gzip-compressed; zstd is refused: ``zstandard`` is
not a dependency) and their sha256 checked while they stream: the blob's digest when the archive
names it, and always the uncompressed digest (``diff_id``) the image config lists. A layer is
extracted into a fresh upper with the checks of ``sweflow.sandbox.tarfiles`` (no absolute names,
no ``..``, nothing written through a symlink), owners, modes, symlinks, hard links within the
layer and allowed xattrs kept, device nodes left out (a sandbox brings its own /dev), and OCI
whiteouts turned into overlayfs ones: ``.wh.NAME`` becomes a character device 0/0 named NAME,
``.wh..wh..opq`` the opaque xattr of its directory, as ``user.overlay.opaque`` (the local
sandbox mounts with ``userxattr`` inside its user namespace) and ``trusted.overlay.opaque`` (a
mount without it). The ``diff_id`` -> store digest mapping is kept in
``<store>/refs/image-layer-<hex>``, so a layer is extracted once per store however many images,
or imports, contain it.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import ipaddress
import json
import os
import platform
import re
import stat
import tarfile
import urllib.parse
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from sweflow.envcache.records import Layer
from sweflow.envcache.store import LayerStore
from sweflow.envcache.storefiles import flocked
from sweflow.errors import SweflowError
from sweflow.sandbox.tarfiles import (
    ChunkReader,
    UnsafeArchiveError,
    check_no_symlink_parents,
    make_parents,
    make_room,
    member_path,
    set_dir_attrs,
)

if TYPE_CHECKING:
    import httpx

Progress = Callable[[str], None]

PREFIXES = ("docker-archive:", "oci:", "registry:")
REF_PREFIX = "image-layer-"  # <store>/refs/image-layer-<diff_id hex> holds the store digest
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
# the platform an image index resolves to: the OCI name of this machine's architecture
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_HEX_NAME = re.compile(r"([0-9a-f]{64})(\.json)?")
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_XATTR_PAX = "SCHILY.xattr."
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 20
_HTTP_TIMEOUT_S = 60.0
_REPOSITORY = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)

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
_MANIFEST_ACCEPT = ", ".join(sorted(_INDEX_TYPES | _MANIFEST_TYPES))
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


class ImageImportError(SweflowError):
    """An image cannot be imported (the message names the archive or reference, and why)."""


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


@dataclass(frozen=True)
class _LayerBlob:
    path: str  # its name in the archive (``blobs/sha256/<hex>`` in a layout or registry)
    diff_id: str  # sha256:<hex> of the uncompressed layer tar, from the config
    digest: str | None  # sha256:<hex> of the blob as stored, when the archive names it


@dataclass(frozen=True)
class _Image:
    config: dict[str, Any]
    image_id: str
    layers: list[_LayerBlob]


# -- public API -------------------------------------------------------------------------------


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
        with _Registry.open(rest) as registry:
            return _import(store, registry, _image_of(registry, registry.top()), name, progress)
    path, ref = split_path_ref(rest)
    with _Archive.open(path) as archive:
        image = _read_oci(archive, ref) if kind == "oci" else _read_docker_save(archive, ref)
        return _import(store, archive, image, name, progress)


def split_path_ref(text: str) -> tuple[Path, str | None]:
    """``PATH[:REF]`` -> (PATH, REF): PATH is the longest prefix naming something that exists."""
    cuts = [len(text)] + [i for i in range(len(text) - 1, 0, -1) if text[i] == ":"]
    for cut in cuts:
        if os.path.lexists(text[:cut]):
            return Path(text[:cut]), text[cut + 1 :] or None
    raise ImageImportError(f"no image archive at {text!r} (nor at any prefix of it before a ':')")


# -- archives ---------------------------------------------------------------------------------


class _Source:
    """Where an image's files come from, by name (``blobs/sha256/<hex>`` for content)."""

    where: str  # for messages: the archive's path, the registry reference

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def open_blob(self, name: str) -> AbstractContextManager[IO[bytes]]:
        raise NotImplementedError

    def read(self, name: str, digest: str | None = None) -> bytes:
        """The whole file ``name`` (a small JSON document), checked against ``digest``."""
        with self.open_blob(name) as f:
            data = f.read()
        if digest is not None and f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
            raise ImageImportError(f"{self.where}: {name} does not match its digest {digest}")
        return data

    def read_json(self, name: str, digest: str | None = None) -> Any:
        return _json(self.where, name, self.read(name, digest))

    def manifest(self, digest: str) -> Any:
        """The manifest or index ``digest``, checked."""
        return self.read_json(_oci_blob(digest), digest)


def _json(where: str, name: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImageImportError(f"{where}: {name} is not valid JSON: {exc}") from exc


class _Archive(_Source):
    """The named files of an image archive, a tar read in place or a directory."""

    def __init__(self, path: Path, tar: tarfile.TarFile | None) -> None:
        self.path = path
        self.where = str(path)
        self._tar = tar
        self._members: dict[str, tarfile.TarInfo] = {}
        for member in tar.getmembers() if tar is not None else []:
            name = _clean(member.name)
            if name is not None and not member.isdir():
                self._members[name] = member

    @classmethod
    @contextmanager
    def open(cls, path: Path) -> Iterator[_Archive]:
        if path.is_dir():
            yield cls(path.resolve(), None)
            return
        try:
            tar = tarfile.open(path, "r:*")
        except (OSError, tarfile.TarError) as exc:
            raise ImageImportError(
                f"{path}: not an image archive (a tar or a directory): {exc}"
            ) from exc
        with tar:
            yield cls(path, tar)

    def has(self, name: str) -> bool:
        if self._tar is not None:
            return self._norm(name) in self._members
        return self._file(name).is_file()

    @contextmanager
    def open_blob(self, name: str) -> Iterator[IO[bytes]]:
        if not self.has(name):
            raise ImageImportError(f"{self.where}: blob {name} is missing from the archive")
        if self._tar is None:
            with self._file(name).open("rb") as f:
                yield f
            return
        f = self._tar.extractfile(self._members[self._norm(name)])
        if f is None:
            raise ImageImportError(f"{self.where}: {name} is not a file in the archive")
        with f:
            yield f

    def _file(self, name: str) -> Path:
        """``name`` under the directory; never a path that leaves it (through ``..`` or links)."""
        path = Path(os.path.realpath(self.path / self._norm(name)))
        if not path.is_relative_to(self.path):
            raise ImageImportError(f"{self.where}: {name} points outside the image layout")
        return path

    def _norm(self, name: str) -> str:
        """A name a manifest gave, checked: never absolute, never climbing."""
        clean = _clean(name)
        if clean is None:
            raise ImageImportError(f"{self.where}: unsafe file name {name!r} in a manifest")
        return clean


def _clean(name: str) -> str | None:
    """``name`` relative to the archive's top (``./`` dropped); None if absolute or climbing."""
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or not parts:
        return None
    return "/".join(parts)


# -- docker save ------------------------------------------------------------------------------


def _read_docker_save(archive: _Archive, ref: str | None) -> _Image:
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
    layers = [_LayerBlob(path, diff_id, _blob_digest(path)) for path, diff_id in pairs]
    image_id = config_digest or f"sha256:{hashlib.sha256(archive.read(config_name)).hexdigest()}"
    return _Image(config, image_id, layers)


def _blob_digest(path: str) -> str | None:
    """The digest a ``blobs/sha256/<hex>`` name promises (newer docker saves); None otherwise."""
    parts = PurePosixPath(path).parts
    if len(parts) == 3 and parts[:2] == ("blobs", "sha256") and _HEX_NAME.fullmatch(parts[2]):
        return f"sha256:{parts[2]}"
    return None


# -- OCI image layout -------------------------------------------------------------------------


def _read_oci(archive: _Archive, ref: str | None) -> _Image:
    """The image chosen by ``ref`` (then by platform) from an OCI image layout."""
    if not archive.has("oci-layout") or not archive.has("index.json"):
        raise ImageImportError(f"{archive.where}: no oci-layout or index.json: not an OCI layout")
    index = archive.read_json("index.json")
    entries = _manifests(archive, index, "index.json")
    return _image_of(archive, _choose(archive, entries, ref, _oci_names))


def _image_of(source: _Source, desc: dict[str, Any]) -> _Image:
    """The image behind the manifest (or index) descriptor ``desc``: config and layer blobs."""
    manifest = _descend(source, desc)
    config_desc = manifest.get("config") or {}
    if config_desc.get("mediaType") not in _CONFIG_TYPES:
        raise ImageImportError(
            f"{source.where}: unsupported media type {config_desc.get('mediaType')!r} of the "
            f"config of {desc.get('digest')}: not a container image"
        )
    config_digest = _checked_digest(source, config_desc)
    config = _config(source, _oci_blob(config_digest), config_digest)
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
        layers.append(_LayerBlob(_oci_blob(digest), diff_id, digest))
    return _Image(config, config_digest, layers)


def _descend(source: _Source, desc: dict[str, Any]) -> dict[str, Any]:
    """The image manifest behind ``desc``, through image indexes (the host's platform)."""
    for _ in range(8):  # indexes nest rarely, and never this deep
        digest = _checked_digest(source, desc)
        doc = source.manifest(digest)
        if desc.get("mediaType") not in _INDEX_TYPES and "manifests" not in doc:
            return doc
        candidates = _manifests(source, doc, digest)
        chosen = [d for d in candidates if _platform(d) == f"linux/{HOST_ARCH}"]
        if not chosen:
            platforms = ", ".join(_platform(d) for d in candidates) or "none"
            raise ImageImportError(
                f"{source.where}: the index {digest} has no linux/{HOST_ARCH} image; "
                f"platforms: {platforms}"
            )
        desc = chosen[0]
    raise ImageImportError(f"{source.where}: image indexes nest too deep under {desc}")


def _manifests(source: _Source, index: Any, where: str) -> list[dict[str, Any]]:
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ImageImportError(f"{source.where}: {where} lists no manifests")
    return entries


def _oci_names(desc: dict[str, Any]) -> list[str]:
    notes = desc.get("annotations") or {}
    keys = ("org.opencontainers.image.ref.name", "io.containerd.image.name")
    return [notes[key] for key in keys if key in notes]


def _is_zstd(desc: dict[str, Any]) -> bool:
    return str(desc.get("mediaType")).endswith("+zstd")


def _platform(desc: dict[str, Any]) -> str:
    found = desc.get("platform") or {}
    return f"{found.get('os', '?')}/{found.get('architecture', '?')}"


def _checked_digest(source: _Source, desc: dict[str, Any]) -> str:
    digest = desc.get("digest")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ImageImportError(
            f"{source.where}: unsupported digest {digest!r} (only sha256:<hex> is read)"
        )
    return digest


def _oci_blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


# -- registry (v2 HTTP API) -------------------------------------------------------------------


class _Registry(_Source):
    """A repository read over the registry v2 HTTP API, anonymously: a 401 with a Bearer
    challenge is answered with a token from the challenge's realm (Docker Hub's, ghcr.io's flow).
    Blobs stream and are checked like an archive's."""

    def __init__(self, reference: str, client: httpx.Client) -> None:
        self.where = f"registry:{reference}"
        host, self.repo, self.reference = _parse_reference(reference, self.where)
        self.base = f"{_scheme(host)}://{host}/v2/{self.repo}"
        self._client = client
        self._token: str | None = None
        self._manifests: dict[str, bytes] = {}  # by digest: each one fetched once

    @classmethod
    @contextmanager
    def open(cls, reference: str) -> Iterator[_Registry]:
        import httpx  # only registry references need it

        with httpx.Client(follow_redirects=True, timeout=_HTTP_TIMEOUT_S) as client:
            try:
                yield cls(reference, client)
            except httpx.HTTPError as exc:
                raise ImageImportError(f"registry:{reference}: {exc}") from exc

    def top(self) -> dict[str, Any]:
        """The descriptor of the manifest that the reference's tag (or digest) names."""
        with self._send("GET", f"{self.base}/manifests/{self.reference}", _MANIFEST_ACCEPT) as got:
            if got.status_code == 404:
                raise ImageImportError(
                    f"{self.where}: no image tagged {self.reference!r}; "
                    f"tags present: {self._tags()}"
                )
            data = self._ok(got, f"manifest {self.reference}").read()
            media_type = got.headers.get("content-type", "").partition(";")[0]
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        if _DIGEST.fullmatch(self.reference) and digest != self.reference:
            raise ImageImportError(f"{self.where}: the manifest does not match its digest")
        self._manifests[digest] = data
        return {"digest": digest, "mediaType": media_type}

    def manifest(self, digest: str) -> Any:
        if digest not in self._manifests:
            with self._send("GET", f"{self.base}/manifests/{digest}", _MANIFEST_ACCEPT) as got:
                self._manifests[digest] = self._ok(got, f"manifest {digest}").read()
        data = self._manifests[digest]
        if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
            raise ImageImportError(f"{self.where}: manifest {digest} does not match its digest")
        return _json(self.where, f"manifest {digest}", data)

    def has(self, name: str) -> bool:
        with self._send("HEAD", self._blob_url(name)) as got:
            return got.status_code == 200

    @contextmanager
    def open_blob(self, name: str) -> Iterator[IO[bytes]]:
        with self._send("GET", self._blob_url(name)) as got:
            self._ok(got, f"blob {name}")
            yield io.BufferedReader(ChunkReader(got.iter_raw(_CHUNK)), _CHUNK)

    def _blob_url(self, name: str) -> str:
        return f"{self.base}/blobs/sha256:{name.removeprefix('blobs/sha256/')}"

    @contextmanager
    def _send(self, method: str, url: str, accept: str | None = None) -> Iterator[httpx.Response]:
        """The streamed response to ``method url``, with the pull token once a 401 asked for one."""
        response = self._attempt(method, url, accept)
        if response.status_code == 401 and self._token is None:
            challenge = response.headers.get("www-authenticate", "")
            response.close()
            self._token = self._bearer_token(challenge)
            response = self._attempt(method, url, accept)
        try:
            yield response
        finally:
            response.close()

    def _attempt(self, method: str, url: str, accept: str | None) -> httpx.Response:
        headers = {"Accept": accept} if accept else {}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        request = self._client.build_request(method, url, headers=headers)
        return self._client.send(request, stream=True)

    def _bearer_token(self, challenge: str) -> str:
        scheme, _, params = challenge.partition(" ")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            raise ImageImportError(
                f"{self.where}: the registry wants credentials ({challenge or 'no challenge'}); "
                "only anonymous pulls are supported"
            )
        query = {"service": fields.get("service"), "scope": f"repository:{self.repo}:pull"}
        got = self._client.get(fields["realm"], params={k: v for k, v in query.items() if v})
        body = _json(self.where, "token", self._ok(got, "token").read())
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ImageImportError(f"{self.where}: the token service answered no token")
        return token

    def _tags(self) -> str:
        with self._send("GET", f"{self.base}/tags/list") as got:
            if got.status_code != 200:
                return f"unknown (tags/list: HTTP {got.status_code})"
            body = _json(self.where, "tags/list", got.read())
        tags = body.get("tags") if isinstance(body, dict) else None
        return ", ".join(sorted(map(str, tags or []))) or "none"

    def _ok(self, response: httpx.Response, what: str) -> httpx.Response:
        if response.status_code >= 400:
            text = response.read().decode(errors="replace")[:300]
            raise ImageImportError(f"{self.where}: {what}: HTTP {response.status_code} {text}")
        return response


def _parse_reference(reference: str, where: str) -> tuple[str, str, str]:
    """``[HOST[:PORT]/]REPO[:TAG|@DIGEST]`` -> (host, repository, tag or digest), with docker's
    defaults: no host means Docker Hub (its API is registry-1.docker.io), where a one-part
    repository is ``library/REPO``; no tag means ``latest``."""
    name, _, digest = reference.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "registry-1.docker.io", name
    repo, tag = path.rsplit(":", 1) if ":" in path.rpartition("/")[2] else (path, "latest")
    if host == "registry-1.docker.io" and "/" not in repo:
        repo = f"library/{repo}"
    if not _REPOSITORY.fullmatch(repo) or (digest and not _DIGEST.fullmatch(digest)):
        raise ImageImportError(f"{where}: not a registry reference [HOST/]REPO[:TAG|@DIGEST]")
    return host, repo, digest or tag


def _scheme(host: str) -> str:
    """http for a registry on this machine (docker allows that too), https for any other."""
    hostname = urllib.parse.urlsplit(f"//{host}").hostname or ""
    try:
        loopback = ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        loopback = hostname == "localhost"
    return "http" if loopback else "https"


# -- shared by both formats -------------------------------------------------------------------


def _choose(
    source: _Source,
    entries: list[dict[str, Any]],
    ref: str | None,
    names: Callable[[dict[str, Any]], list[str]],
) -> dict[str, Any]:
    """The entry named ``ref``; without ``ref`` the only one. Errors list the names present."""
    present = sorted({name for entry in entries for name in names(entry)})
    if ref is None:
        matches = entries
    else:
        matches = [e for e in entries if any(ref in _forms(name) for name in names(e))]
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


def _forms(name: str) -> set[str]:
    """The ways a user may write a stored image name: as is, without docker.io's prefixes,
    without ``:latest``."""
    forms = {name}
    forms |= {name.removeprefix(p) for p in ("docker.io/library/", "docker.io/")}
    return forms | {form.removesuffix(":latest") for form in forms}


def _config(source: _Source, name: str, digest: str | None) -> dict[str, Any]:
    if not name:
        raise ImageImportError(f"{source.where}: the image names no config")
    config = source.read_json(name, digest)
    if not isinstance(config, dict):
        raise ImageImportError(f"{source.where}: the image config {name} is not an object")
    return config


def _diff_ids(source: _Source, config: dict[str, Any], count: int) -> list[str]:
    """The config's uncompressed layer digests, one per layer blob, each a sha256."""
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    if len(diff_ids) != count:
        raise ImageImportError(
            f"{source.where}: the config lists {len(diff_ids)} layer digests for {count} layers"
        )
    bad = [d for d in diff_ids if not isinstance(d, str) or not _DIGEST.fullmatch(d)]
    if bad:
        raise ImageImportError(f"{source.where}: unsupported layer digests {bad}")
    return diff_ids


# -- layers into the store --------------------------------------------------------------------


def _import(
    store: LayerStore, source: _Source, image: _Image, name: str, progress: Progress | None
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
    store: LayerStore, source: _Source, blob: _LayerBlob, refs: Path
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
            _extract_checked(source, blob, upper)
            layer = store.commit(upper, "image")
        ref.write_text(layer.digest)
    return layer, True


def _extract_checked(source: _Source, blob: _LayerBlob, upper: Path) -> None:
    """Extract ``blob`` into ``upper``, checking its digests as it streams."""
    where = f"{source.where}: layer {blob.path}"
    with source.open_blob(blob.path) as raw:
        stored = _Hashing(raw)
        packed = io.BufferedReader(stored, _CHUNK)
        plain = _Hashing(_decompressed(packed, where))
        stream = io.BufferedReader(plain, _CHUNK)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                _extract_layer(tar, upper)
            while stream.read(_CHUNK) or packed.read(_CHUNK):  # the tar's padding, the gzip end
                pass
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise ImageImportError(f"{where}: not a readable layer tar: {exc}") from exc
        except UnsafeArchiveError as exc:
            raise ImageImportError(f"{where}: {exc}") from exc
    if blob.digest is not None and stored.digest() != blob.digest:
        raise ImageImportError(f"{where}: digest mismatch: {stored.digest()}, not {blob.digest}")
    if plain.digest() != blob.diff_id:
        raise ImageImportError(
            f"{where}: uncompressed digest mismatch: {plain.digest()}, not {blob.diff_id}"
        )


def _decompressed(packed: io.BufferedReader, where: str) -> IO[bytes]:
    """The layer tar inside ``packed``, by its magic number (media types are not trusted to
    say it: docker archives carry none)."""
    magic = packed.peek(4)[:4]
    if magic.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=packed, mode="rb")
    if magic == _ZSTD_MAGIC:
        raise ImageImportError(f"{where}: zstd-compressed, and zstandard is not installed")
    return packed


class _Hashing(io.RawIOBase):
    """A readable stream that hashes what passes through it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self._sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        self._sha.update(data)
        return len(data)

    def digest(self) -> str:
        return f"sha256:{self._sha.hexdigest()}"


# -- one layer tar ----------------------------------------------------------------------------


def _extract_layer(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack an image layer ``tar`` (a stream) into the empty upper ``dest``, whiteouts as
    overlayfs's; unsafe members raise UnsafeArchiveError."""
    dest = Path(os.path.realpath(dest))
    dirs: list[tuple[tarfile.TarInfo, Path]] = []
    skipped: set[Path] = set()  # device nodes
    for member in tar:
        path = member_path(dest, member.name)
        make_parents(dest, path)
        if path.name.startswith(_WHITEOUT):
            _whiteout(path)
        elif path == dest:
            if not member.isdir():
                raise UnsafeArchiveError(
                    f"unsafe archive member {member.name!r}: replaces the root"
                )
        elif member.ischr() or member.isblk():
            make_room(path, keep_dir=False)
            skipped.add(path)
        elif member.islnk():
            _hard_link(dest, member, path, skipped)
        else:
            make_room(path, keep_dir=member.isdir())
            tar.extract(
                member,
                dest,
                set_attrs=not member.isdir(),
                numeric_owner=True,
                filter=tarfile.fully_trusted_filter,
            )
            _set_xattrs(member, path)
            if member.isdir():
                dirs.append((member, path))
    set_dir_attrs(tar, dirs)


def _whiteout(path: Path) -> None:
    """An OCI whiteout entry as overlayfs's: the opaque xattr, or a 0/0 character device."""
    if path.name == _OPAQUE:
        for name in OPAQUE_XATTRS:  # trusted.*: overlayfs as root; user.*: with userxattr
            os.setxattr(path.parent, name, b"y", follow_symlinks=False)
        return
    hidden = path.name.removeprefix(_WHITEOUT)
    if hidden.startswith(_WHITEOUT):  # aufs bookkeeping (.wh..wh.plnk): not content
        return
    if hidden in ("", ".", ".."):
        raise UnsafeArchiveError(f"unsafe whiteout {path}")
    target = path.with_name(hidden)
    make_room(target, keep_dir=False)
    os.mknod(target, stat.S_IFCHR, os.makedev(0, 0))  # mode 0, as overlayfs makes them


def _hard_link(dest: Path, member: tarfile.TarInfo, path: Path, skipped: set[Path]) -> None:
    source = member_path(dest, member.linkname)
    check_no_symlink_parents(dest, source)
    if source in skipped:
        return
    if not os.path.lexists(source) or (source.is_dir() and not source.is_symlink()):
        raise UnsafeArchiveError(
            f"hard link {member.name} -> {member.linkname}: no such file in layer"
        )
    make_room(path, keep_dir=False)
    os.link(source, path, follow_symlinks=False)


def _set_xattrs(member: tarfile.TarInfo, path: Path) -> None:
    """Apply the member's ``SCHILY.xattr.*`` records that are content: ``user.*`` (but not
    ``user.overlay.*``) and file capabilities. Overlay metadata (``trusted.*``, a redirect or
    metacopy could reach another layer's files) and host policy (SELinux labels) stay out."""
    for key, value in member.pax_headers.items():
        name = key.removeprefix(_XATTR_PAX)
        if name == key or not _content_xattr(name):
            continue
        try:
            raw = value.encode("utf-8", "surrogateescape")  # tarfile decoded it so
            os.setxattr(path, name, raw, follow_symlinks=False)
        except OSError as exc:  # user.* on a symlink, or a filesystem without xattrs
            if exc.errno not in (errno.EPERM, errno.ENOTSUP):
                raise


def _content_xattr(name: str) -> bool:
    if name == "security.capability":
        return True
    return name.startswith("user.") and not name.startswith("user.overlay.")


__all__ = [
    "PREFIXES",
    "ImageImportError",
    "ImportedImage",
    "import_base",
    "import_image",
    "split_path_ref",
]


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
        if any(ref in _forms(name) for name in names):
            return f"{kind}:{path}:{ref}"
        seen += names
    raise ImageImportError(
        f"no image {ref!r} in {folder} ({len(seen)} images there: "
        + (", ".join(sorted(seen)[:10]) or "none")
        + ("..." if len(seen) > 10 else "")
        + ")"
    )


def _archive_names(path: Path) -> tuple[str, list[str]]:
    """(import kind, image names) of one archive, read once per modification time."""
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _names_cache:
        with _Archive.open(path) as archive:
            if archive.has("manifest.json"):  # docker save, older or newer
                entries = archive.read_json("manifest.json")
                names = [t for e in entries if isinstance(e, dict) for t in e.get("RepoTags") or []]
                _names_cache[key] = ("docker-archive", names)
            elif archive.has("index.json"):
                index = archive.read_json("index.json")
                entries = _manifests(archive, index, "index.json")
                _names_cache[key] = ("oci", [n for e in entries for n in _oci_names(e)])
            else:
                _names_cache[key] = ("docker-archive", [])
    return _names_cache[key]
