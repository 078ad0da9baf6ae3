"""Where an image's files come from: an archive read in place (a tar, or a directory), by name.

Every reader asks an ``ImageSource`` for named files (``manifest.json``,
``blobs/sha256/<hex>``) and checks what it reads against the digest that names it; a registry
(``registry.RegistrySource``) is one more ``ImageSource``. An archive is never unpacked: a
member is streamed when it is read, and a name a manifest gives is refused if absolute,
climbing, or (in a directory) a link out of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sweflow.errors import SweflowError

DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
CHUNK = 1 << 20  # bytes per read of a blob


class ImageImportError(SweflowError):
    """An image cannot be imported (the message names the archive or reference, and why)."""


@dataclass(frozen=True)
class LayerBlob:
    path: str  # its name in the archive (``blobs/sha256/<hex>`` in a layout or registry)
    diff_id: str  # sha256:<hex> of the uncompressed layer tar, from the config
    digest: str | None  # sha256:<hex> of the blob as stored, when the archive names it


@dataclass(frozen=True)
class SourceImage:
    """An image as its source describes it: the config and the layer blobs, lowest first."""

    config: dict[str, Any]
    image_id: str
    layers: list[LayerBlob]


class ImageSource:
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
        return parse_json(self.where, name, self.read(name, digest))

    def manifest(self, digest: str) -> Any:
        """The manifest or index ``digest``, checked."""
        return self.read_json(oci_blob(digest), digest)


def parse_json(where: str, name: str, data: bytes) -> Any:
    """``data`` as JSON, or an ImageImportError naming ``where`` and ``name``."""
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImageImportError(f"{where}: {name} is not valid JSON: {exc}") from exc


class Archive(ImageSource):
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
    def open(cls, path: Path) -> Iterator[Archive]:
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


def oci_blob(digest: str) -> str:
    """The file name of the blob ``digest`` in an OCI layout (and, by that name, a registry)."""
    return "blobs/sha256/" + digest.removeprefix("sha256:")
