"""Image archives into the layer store: hand-made ``docker save`` tars and OCI layouts (whiteouts,
owners, links, xattrs, dedup, corrupt and unsafe archives), then an image that a real docker
daemon built, saved and ran, whose imported layers a local sandbox must show as ``docker run``
shows the image. Nothing is pulled: images are built locally from the cached bookworm rootfs.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sweflow.envcache.images import importer
from sweflow.envcache.images.importer import import_base, import_image, split_path_ref
from sweflow.envcache.images.manifests import HOST_ARCH
from sweflow.envcache.images.registry import parse_reference, url_scheme
from sweflow.envcache.images.sources import ImageImportError
from sweflow.envcache.instance_spec import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.layertar import OPAQUE_XATTRS

pytestmark = pytest.mark.timeout(600)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="layers keep owners and whiteout devices: importing needs root"
)

Image = tuple[dict, list[bytes]]  # (config, layer tars), as a test writes an archive


# -- archives made by hand --------------------------------------------------------------------


def member(name: str, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    if info.isreg():
        info.size = len(data)
    return info, data


def directory(name: str, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, type=tarfile.DIRTYPE, mode=mode)


def layer_tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def config_for(layers: list[bytes], **settings) -> dict:
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": settings,
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer) for layer in layers]},
    }


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_docker_save(path: Path, tagged: dict[str, Image]) -> Path:
    """A ``docker save`` tar as dockerd 20.10 writes it: ``<id>/layer.tar``, ``<id>.json``."""
    entries = []
    with tarfile.open(path, "w") as tar:
        for tag, (config, layers) in tagged.items():
            raw = json.dumps(config).encode()
            config_name = f"{hashlib.sha256(raw).hexdigest()}.json"
            add_file(tar, config_name, raw)
            names = []
            for layer in layers:
                names.append(f"{hashlib.sha256(layer).hexdigest()}/layer.tar")
                if names[-1] not in tar.getnames():
                    add_file(tar, names[-1], layer)
            entries.append({"Config": config_name, "RepoTags": [tag], "Layers": names})
        add_file(tar, "manifest.json", json.dumps(entries).encode())
    return path


def read_docker_save(path: Path) -> dict[str, Image]:
    """The images of a ``docker save`` tar, by tag (what an OCI layout is written from here)."""
    with tarfile.open(path) as tar:
        read = lambda name: tar.extractfile(name).read()  # noqa: E731
        return {
            entry["RepoTags"][0]: (
                json.loads(read(entry["Config"])),
                [read(name) for name in entry["Layers"]],
            )
            for entry in json.loads(read("manifest.json"))
        }


class OciLayout:
    """An OCI image layout under construction in a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs/sha256").mkdir(parents=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        self.index: list[dict] = []

    def blob(self, data: bytes, media_type: str) -> dict:
        (self.root / "blobs/sha256" / hashlib.sha256(data).hexdigest()).write_bytes(data)
        return {"mediaType": media_type, "digest": sha256(data), "size": len(data)}

    def image(self, image: Image, *, gzip_below: int = 0) -> dict:
        """The manifest descriptor of ``image``; layers smaller than ``gzip_below`` gzipped."""
        config, layers = image
        descs = [
            self.blob(gzip.compress(layer, 1), "application/vnd.oci.image.layer.v1.tar+gzip")
            if len(layer) < gzip_below
            else self.blob(layer, "application/vnd.oci.image.layer.v1.tar")
            for layer in layers
        ]
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": self.blob(
                json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"
            ),
            "layers": descs,
        }
        return self.blob(json.dumps(manifest).encode(), manifest["mediaType"])

    def platforms(self, by_arch: dict[str, dict]) -> dict:
        """An image index over the manifests ``by_arch``."""
        kind = "application/vnd.oci.image.index.v1+json"
        manifests = [
            {**desc, "platform": {"os": "linux", "architecture": arch}}
            for arch, desc in by_arch.items()
        ]
        index = {"schemaVersion": 2, "mediaType": kind, "manifests": manifests}
        return self.blob(json.dumps(index).encode(), kind)

    def tag(self, desc: dict, name: str) -> None:
        self.index.append({**desc, "annotations": {"org.opencontainers.image.ref.name": name}})
        (self.root / "index.json").write_text(
            json.dumps({"schemaVersion": 2, "manifests": self.index})
        )


def tar_dir(root: Path, out: Path) -> Path:
    with tarfile.open(out, "w") as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, str(path.relative_to(root)), recursive=False)
    return out


# -- the layers of the hand-made image --------------------------------------------------------

BINARY = b"\xffbin\x01"
LOWER = layer_tar(
    directory("app"),
    member("app/keep.txt", b"keep\n"),
    member("app/gone.txt", b"gone\n"),
    directory("app/cache"),
    member("app/cache/old", b"old\n"),
    member("app/tool", b"#!/bin/sh\n", mode=0o4755),
    member("app/owned", b"mine\n", mode=0o640, uid=1000, gid=1001),
    member("app/link", type=tarfile.SYMTYPE, linkname="keep.txt"),
    member("app/hard", type=tarfile.LNKTYPE, linkname="app/keep.txt"),
    member(
        "app/attr",
        b"x",
        pax_headers={
            "SCHILY.xattr.user.note": BINARY.decode("utf-8", "surrogateescape"),
            "SCHILY.xattr.trusted.overlay.redirect": "/etc",  # must never reach the layer
            "SCHILY.xattr.user.overlay.opaque": "y",
        },
    ),
    member("app/pipe", type=tarfile.FIFOTYPE),
    member("app/disk", type=tarfile.BLKTYPE, devmajor=8, devminor=0),  # never a device node
    directory("ro", 0o555),
    member("ro/inside", b"written before its directory became read-only\n"),
)
UPPER = layer_tar(
    directory("app"),
    member("app/.wh.gone.txt"),
    member("app/cache/.wh..wh..opq"),
    member("app/cache/new", b"new\n"),
    member("app/.wh..wh.plnk"),  # aufs bookkeeping: ignored
    member("implicit/parent/file", b"no directory entries above me\n"),
)
OTHER_UPPER = layer_tar(member("other.txt", b"another image on the same lower layer\n"))
SETTINGS = {
    "Env": ["PATH=/opt/conda/bin:/usr/bin:/bin", "EMPTY=", "EQ=a=b"],
    "WorkingDir": "/app",
    "User": "1000:1001",
    "Entrypoint": ["/bin/sh", "-c"],
    "Cmd": ["echo hi"],
}
IMAGE: Image = (config_for([LOWER, UPPER], **SETTINGS), [LOWER, UPPER])
OTHER: Image = (config_for([LOWER, OTHER_UPPER]), [LOWER, OTHER_UPPER])


@pytest.fixture
def store(tmp_path: Path) -> LayerStore:
    return LayerStore(tmp_path / "store")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return write_docker_save(tmp_path / "two.tar", {"demo:1": IMAGE, "other:latest": OTHER})


@pytest.fixture
def extractions(monkeypatch) -> list[str]:
    """The layer blobs each import extracts (a spy on the extraction itself)."""
    seen: list[str] = []
    real = importer.extract_checked

    def spy(archive, blob, upper):
        seen.append(blob.diff_id)
        return real(archive, blob, upper)

    monkeypatch.setattr(importer, "extract_checked", spy)
    return seen


def is_whiteout(path: Path) -> bool:
    info = os.lstat(path)
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


# -- hand-made archives -----------------------------------------------------------------------


@needs_root
def test_layers_keep_files_and_whiteouts_become_overlayfs_ones(store, archive):
    image = import_image(store, f"docker-archive:{archive}:demo:1")

    assert image.image_id == sha256(json.dumps(IMAGE[0]).encode())
    assert [layer.kind for layer in image.layers] == ["image", "image"]
    assert image.env == {"PATH": "/opt/conda/bin:/usr/bin:/bin", "EMPTY": "", "EQ": "a=b"}
    assert (image.workdir, image.user) == ("/app", "1000:1001")
    assert (image.entrypoint, image.cmd) == (["/bin/sh", "-c"], ["echo hi"])
    lower, upper = (layer.path for layer in image.layers)
    app = lower / "app"
    assert (app / "keep.txt").read_text() == "keep\n"
    assert stat.S_IMODE(os.stat(app / "tool").st_mode) == 0o4755
    owned = os.stat(app / "owned")
    assert (stat.S_IMODE(owned.st_mode), owned.st_uid, owned.st_gid) == (0o640, 1000, 1001)
    assert os.readlink(app / "link") == "keep.txt"
    assert os.stat(app / "hard").st_ino == os.stat(app / "keep.txt").st_ino
    assert os.listxattr(app / "attr") == ["user.note"]
    assert os.getxattr(app / "attr", "user.note") == BINARY
    assert stat.S_ISFIFO(os.lstat(app / "pipe").st_mode)
    assert not os.path.lexists(app / "disk")
    assert stat.S_IMODE(os.stat(lower / "ro").st_mode) == 0o555
    assert (lower / "ro/inside").is_file()

    assert is_whiteout(upper / "app/gone.txt")
    for name in OPAQUE_XATTRS:
        assert os.getxattr(upper / "app/cache", name) == b"y"
    assert (upper / "app/cache/new").read_text() == "new\n"
    assert stat.S_IMODE(os.stat(upper / "implicit/parent").st_mode) == 0o755
    assert not [p for p in upper.rglob("*") if p.name.startswith(".wh.")]
    assert list(store.tmp.iterdir()) == []


@needs_root
def test_a_sandbox_sees_the_image_through_its_layers(store, archive, bookworm_rootfs):
    image = import_image(store, f"docker-archive:{archive}:demo:1")
    spec = SandboxSpec(
        layers=[bookworm_rootfs, *(layer.path for layer in image.layers)],
        env=image.env,
        workdir=image.workdir,
    )
    with open_sandbox(spec) as sb:
        result = sb.exec(
            "set -e; pwd; test ! -e gone.txt; ls -A cache; cat link;"
            " stat -c '%a %u:%g' owned tool; test -p pipe; echo $PATH"
        )
    assert result.ok, result.output
    assert result.output.split("\n")[:6] == [
        "/app",
        "new",  # the opaque directory hides the lower layer's old
        "keep",
        "640 1000:1001",
        "4755 0:0",
        "/opt/conda/bin:/usr/bin:/bin",
    ]


@needs_root
def test_layers_are_extracted_once_per_store(store, archive, extractions):
    demo = import_image(store, f"docker-archive:{archive}:demo:1")
    other = import_image(store, f"docker-archive:{archive}:other")  # ":latest" left out
    again = import_image(store, f"docker-archive:{archive}:demo:1")

    assert extractions == [sha256(LOWER), sha256(UPPER), sha256(OTHER_UPPER)]
    assert (demo.extracted, other.extracted, again.extracted) == (2, 1, 0)
    assert other.layers[0].digest == demo.layers[0].digest
    assert [layer.digest for layer in again.layers] == [layer.digest for layer in demo.layers]
    ref = store.root / "refs" / f"image-layer-{sha256(LOWER).removeprefix('sha256:')}"
    assert ref.read_text() == demo.layers[0].digest


@needs_root
def test_an_oci_layout_gives_the_same_layers(tmp_path, archive, extractions):
    """An index of two platforms (the host's chosen), gzipped layers, the layout as a tar: the same
    store digests as the docker archive, in a store of its own."""
    layout = OciLayout(tmp_path / "layout")
    foreign = layout.image(OTHER)
    native = layout.image(IMAGE, gzip_below=1 << 30)
    layout.tag(layout.platforms({"s390x": foreign, HOST_ARCH: native}), "demo:1")
    layout.tag(layout.image(OTHER), "other:2")
    packed = tar_dir(layout.root, tmp_path / "layout.tar")

    from_docker = import_image(LayerStore(tmp_path / "a"), f"docker-archive:{archive}:demo:1")
    from_dir = import_image(LayerStore(tmp_path / "b"), f"oci:{layout.root}:demo:1")
    from_tar = import_image(LayerStore(tmp_path / "c"), f"oci:{packed}:demo:1")

    digests = [layer.digest for layer in from_docker.layers]
    assert [layer.digest for layer in from_dir.layers] == digests
    assert [layer.digest for layer in from_tar.layers] == digests
    assert from_tar.env == from_docker.env and len(extractions) == 6


@needs_root
def test_corrupted_blob_is_refused_and_leaves_nothing(store, tmp_path):
    bad = bytearray(LOWER)
    bad[bad.index(b"keep\n")] ^= 0x20  # content, not a header: the tar still reads
    path = write_docker_save(tmp_path / "bad.tar", {"demo:1": (IMAGE[0], [bytes(bad), UPPER])})

    with pytest.raises(ImageImportError) as caught:
        import_image(store, f"docker-archive:{path}")

    blob = f"{hashlib.sha256(bad).hexdigest()}/layer.tar"
    assert str(path) in str(caught.value) and blob in str(caught.value)
    assert "digest mismatch" in str(caught.value)
    assert list(store.tmp.iterdir()) == [] and list(store.layers.iterdir()) == []
    assert not [p for p in (store.root / "refs").iterdir() if not p.name.endswith(".lock")]


BROKEN_GZIP = {
    # the same tar compressed otherwise: the content is right, the blob is not the one named
    "recompressed": (lambda blob: gzip.compress(UPPER, 9), "digest mismatch: sha256:"),
    "trailer zeroed": (lambda blob: blob[:-8] + bytes(8), "not a readable layer tar"),
}


@needs_root
@pytest.mark.parametrize("case", sorted(BROKEN_GZIP))
def test_corrupted_gzip_blob_in_an_oci_layout(store, tmp_path, case):
    layout = OciLayout(tmp_path / "layout")
    desc = layout.image(IMAGE, gzip_below=1 << 30)
    layout.tag(desc, "demo:1")
    manifest = json.loads((layout.root / "blobs/sha256" / desc["digest"][7:]).read_bytes())
    blob = layout.root / "blobs/sha256" / manifest["layers"][1]["digest"][7:]
    change, error = BROKEN_GZIP[case]
    blob.write_bytes(change(blob.read_bytes()))

    with pytest.raises(ImageImportError) as caught:
        import_image(store, f"oci:{layout.root}")
    assert str(caught.value).startswith(f"{layout.root}: layer blobs/sha256/{blob.name}: {error}")
    assert list(store.tmp.iterdir()) == []


def test_missing_tag_lists_the_tags(store, archive):
    with pytest.raises(ImageImportError) as caught:
        import_image(store, f"docker-archive:{archive}:demo:2")
    assert str(caught.value) == (
        f"{archive}: no image tagged 'demo:2'; tags present: demo:1, other:latest"
    )
    with pytest.raises(ImageImportError, match="holds 2 images; name one as PATH:REF"):
        import_image(store, f"docker-archive:{archive}")


def test_missing_blob_not_an_archive_and_wrong_format(store, tmp_path, archive):
    gone = LayerStore(tmp_path / "s")
    path = tmp_path / "missing.tar"
    with tarfile.open(archive) as src, tarfile.open(path, "w") as dst:
        for info in src.getmembers():
            if info.name != f"{hashlib.sha256(UPPER).hexdigest()}/layer.tar":
                dst.addfile(info, src.extractfile(info))
    with pytest.raises(ImageImportError, match=f"{path}: layer blobs missing: .*/layer.tar"):
        import_image(gone, f"docker-archive:{path}:demo:1")
    assert list(gone.layers.iterdir()) == []  # nothing extracted before the check

    text = tmp_path / "notes.txt"
    text.write_text("not a tar\n")
    with pytest.raises(ImageImportError, match="not an image archive"):
        import_image(store, f"docker-archive:{text}")
    with pytest.raises(ImageImportError, match="no oci-layout or index.json"):
        import_image(store, f"oci:{archive}")
    with pytest.raises(ImageImportError, match="no manifest.json"):
        import_image(store, f"docker-archive:{tmp_path / 's'}")


def test_unsupported_layer_media_type(store, tmp_path):
    layout = OciLayout(tmp_path / "layout")
    config = layout.blob(json.dumps(IMAGE[0]).encode(), "application/vnd.oci.image.config.v1+json")
    zstd = layout.blob(UPPER, "application/vnd.oci.image.layer.v1.tar+zstd")
    manifest = {"schemaVersion": 2, "config": config, "layers": [zstd, zstd]}
    layout.tag(
        layout.blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"),
        "z",
    )
    with pytest.raises(ImageImportError, match=r"unsupported media type .*\+zstd'"):
        import_image(store, f"oci:{layout.root}")


UNSAFE = {
    "climbing": [member("../evil", b"x")],
    "climbing inside": [directory("a"), member("a/../../evil", b"x")],
    "absolute": [member("/evil", b"x")],
    "through a symlink": [
        member("lib", type=tarfile.SYMTYPE, linkname="{outside}"),
        member("lib/evil", b"x"),
    ],
    "whiteout through a symlink": [
        member("lib", type=tarfile.SYMTYPE, linkname="{outside}"),
        member("lib/.wh.evil"),
    ],
    "hard link out": [member("evil", type=tarfile.LNKTYPE, linkname="../../outside/target")],
    "whiteout of the parent": [directory("a"), member("a/.wh...")],
}


@needs_root
@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_members_are_refused(store, tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("host file\n")
    members = []
    for info, data in UNSAFE[case]:
        info.linkname = info.linkname.replace("{outside}", str(outside))
        members.append((info, data))
    bad = layer_tar(*members)
    path = write_docker_save(tmp_path / "bad.tar", {"bad:1": (config_for([bad]), [bad])})

    with pytest.raises(ImageImportError, match=f"{path}: layer .*unsafe|{path}: layer .*hard link"):
        import_image(store, f"docker-archive:{path}")
    assert sorted(p.name for p in outside.iterdir()) == ["target"]
    assert not (tmp_path / "evil").exists() and not Path("/evil").exists()
    assert list(store.tmp.iterdir()) == [] and list(store.layers.iterdir()) == []


def test_names(tmp_path, store):
    archive = tmp_path / "a:b.tar"
    archive.write_bytes(b"")
    assert split_path_ref(f"{archive}") == (archive, None)
    assert split_path_ref(f"{archive}:repo:tag") == (archive, "repo:tag")
    assert split_path_ref(f"{tmp_path}:x") == (tmp_path, "x")
    with pytest.raises(ImageImportError, match="no image archive at"):
        split_path_ref(str(tmp_path / "nope.tar:x"))
    digest = "sha256:" + "ab" * 32
    assert parse_reference("python:3.11", "") == (
        "registry-1.docker.io",
        "library/python",
        "3.11",
    )
    assert parse_reference(f"ghcr.io/a/b-c@{digest}", "") == ("ghcr.io", "a/b-c", digest)
    assert parse_reference("localhost:5000/x", "") == ("localhost:5000", "x", "latest")
    assert [url_scheme(h) for h in ("localhost:5000", "[::1]:80", "127.0.0.2", "ghcr.io")] == [
        "http",
        "http",
        "http",
        "https",
    ]
    with pytest.raises(ImageImportError, match="not a registry reference"):
        parse_reference("Upper/Case", "registry:Upper/Case")
    for other in ("host", "debian:bookworm", "docker:python:3.11", str(tmp_path)):
        assert import_base(store, other) is None


# -- a registry on the loopback address -------------------------------------------------------

TOKEN = "anonymous-pull-token"


class RegistryHandler(BaseHTTPRequestHandler):
    """The registry v2 API over an OCI layout: manifests and blobs behind an anonymous Bearer
    token, blobs redirected elsewhere (as registries send them to a CDN), tags/list."""

    layout: Path
    repo: str
    seen: list[str]

    def do_HEAD(self) -> None:
        self.serve(body=False)

    def do_GET(self) -> None:
        self.serve(body=True)

    def serve(self, body: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.seen.append(f"{self.command} {url.path}")
        v2 = f"/v2/{self.repo}/"
        if url.path == "/token":
            query = urllib.parse.parse_qs(url.query)
            assert query == {"service": ["test"], "scope": [f"repository:{self.repo}:pull"]}
            return self.reply(200, json.dumps({"token": TOKEN}).encode(), body=body)
        if url.path.startswith("/cdn/"):
            return self.reply(200, self.blob(url.path.removeprefix("/cdn/")), body=body)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            host = f"http://{self.headers['Host']}"
            challenge = f'Bearer realm="{host}/token",service="test",scope="x"'
            return self.reply(401, b"{}", {"WWW-Authenticate": challenge}, body=body)
        if url.path == v2 + "tags/list":
            tags = [
                entry["annotations"]["org.opencontainers.image.ref.name"] for entry in self.index()
            ]
            return self.reply(
                200, json.dumps({"name": self.repo, "tags": tags}).encode(), body=body
            )
        kind, _, ref = url.path.removeprefix(v2).partition("/")
        if kind == "blobs":
            return self.reply(307, b"", {"Location": f"/cdn/{ref[7:]}"}, body=body)
        tagged = [e["digest"] for e in self.index() if e["annotations"][REF_NAME] == ref]
        digest = tagged[0] if tagged else ref
        if kind != "manifests" or not (self.layout / "blobs/sha256" / digest[7:]).is_file():
            return self.reply(404, b'{"errors": []}', body=body)
        data = self.blob(digest[7:])
        self.reply(200, data, {"Content-Type": json.loads(data)["mediaType"]}, body=body)

    def index(self) -> list[dict]:
        return json.loads((self.layout / "index.json").read_text())["manifests"]

    def blob(self, hexdigest: str) -> bytes:
        return (self.layout / "blobs/sha256" / hexdigest).read_bytes()

    def reply(self, code: int, data: bytes, headers: dict | None = None, *, body: bool) -> None:
        self.send_response(code)
        for key, value in {"Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


REF_NAME = "org.opencontainers.image.ref.name"


@pytest.fixture
def registry(monkeypatch):
    """``registry(layout, repo)``: the ``HOST:PORT`` of a loopback registry serving ``layout``
    as ``repo``, and the list of requests it saw."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # loopback only, whatever the environment says
    servers = []

    def start(layout: Path, repo: str) -> tuple[str, list[str]]:
        seen: list[str] = []
        handler = type(
            "Handler", (RegistryHandler,), {"layout": layout, "repo": repo, "seen": seen}
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@needs_root
def test_a_registry_gives_the_same_layers(tmp_path, archive, registry, extractions):
    layout = OciLayout(tmp_path / "layout")
    native = layout.image(IMAGE, gzip_below=1 << 30)
    layout.tag(layout.platforms({"s390x": layout.image(OTHER), HOST_ARCH: native}), "1")
    layout.tag(layout.image(OTHER), "2")
    host, seen = registry(layout.root, "team/demo")
    store = LayerStore(tmp_path / "store")

    pulled = import_image(store, f"registry:{host}/team/demo:1")
    by_digest = import_image(store, f"registry:{host}/team/demo@{native['digest']}")
    from_docker = import_image(LayerStore(tmp_path / "s"), f"docker-archive:{archive}:demo:1")

    digests = [layer.digest for layer in from_docker.layers]
    assert [layer.digest for layer in pulled.layers] == digests
    assert [layer.digest for layer in by_digest.layers] == digests and by_digest.extracted == 0
    assert pulled.env == from_docker.env and pulled.image_id == from_docker.image_id
    assert seen.count("GET /token") == 2  # one per import: tokens are not kept across imports
    # a config per import, the two layers once: the second import downloads no layer
    assert sum(request.startswith("GET /cdn/") for request in seen) == 4
    assert len(extractions) == 4
    with pytest.raises(ImageImportError) as caught:
        import_image(store, f"registry:{host}/team/demo:3")
    assert str(caught.value) == (
        f"registry:{host}/team/demo:3: no image tagged '3'; tags present: 1, 2"
    )


# -- an image built, saved and run by a real docker daemon ------------------------------------

DOCKERFILE = """FROM {base}
RUN echo hello > /added.txt && mkdir -p /opt/tree && echo keep > /opt/tree/keep \\
    && echo gone > /opt/tree/gone && ln -s keep /opt/tree/link && chown 1000:1000 /opt/tree/keep
RUN rm /etc/debian_version /opt/tree/gone
RUN rm -rf /usr/share/doc/git && mkdir /usr/share/doc/git && echo mine > /usr/share/doc/git/only
ENV SWEFLOW_IMAGE=multi
WORKDIR /opt/tree
"""
# every regular file's digest, then every path with its type, mode, owner and link target;
# the paths docker's own init layer adds at run time are left out
LISTING = r"""set -e
cd /
find / -xdev -type f ! -path /.dockerenv ! -path '/etc/host*' ! -path /etc/resolv.conf \
    ! -path '/tmp*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
find / -xdev ! -path / ! -path /.dockerenv ! -path '/etc/host*' ! -path /etc/resolv.conf \
    ! -path /etc/mtab ! -path '/dev*' ! -path '/proc*' ! -path '/sys*' ! -path '/tmp*' \
    -printf '%p %y %m %U:%G %l\n' | LC_ALL=C sort
"""


def docker(*args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["docker", *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode(errors="replace")


@pytest.fixture(scope="module")
def built_image(dockerd, bookworm_rootfs: Path, tmp_path_factory) -> tuple[str, Path]:
    """A four-layer image (the bookworm rootfs, then RUNs that add, delete and replace) built
    by the daemon, and its ``docker save`` archive."""
    marker = (bookworm_rootfs / ".sweflow-rootfs.json").read_bytes()
    base = f"sweflow-test-bookworm:{hashlib.sha256(marker).hexdigest()[:12]}"
    if not docker("images", "-q", base).strip():
        rootfs = subprocess.run(["tar", "-C", str(bookworm_rootfs), "-c", "."], capture_output=True)
        docker("import", "-", base, stdin=rootfs.stdout)
    context = tmp_path_factory.mktemp("context")
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    tag = "sweflow-test-image-import:multi"
    docker("build", "--network", "none", "-q", "-t", tag, str(context))
    archive = context / "multi.tar"
    docker("save", "-o", str(archive), tag)
    return tag, archive


@needs_root
@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_built_image_runs_locally_with_the_same_files(built_image, tmp_path, extractions):
    tag, archive = built_image
    store = LayerStore(tmp_path / "store")
    image = import_image(store, f"docker-archive:{archive}:{tag}")
    assert len(image.layers) == 4 and image.extracted == 4
    replaced, deleted = image.layers[3].path, image.layers[2].path
    assert os.getxattr(replaced / "usr/share/doc/git", "trusted.overlay.opaque") == b"y"
    assert is_whiteout(deleted / "etc/debian_version") and is_whiteout(deleted / "opt/tree/gone")

    spec = SandboxSpec(
        layers=[layer.path for layer in image.layers], env=image.env, workdir=image.workdir
    )
    with open_sandbox(spec) as sb:
        sb.write("/tmp/listing.sh", LISTING)
        listed = sb.exec("sh /tmp/listing.sh > /tmp/listing", timeout=300)
        local = sb.read("/tmp/listing").decode(errors="replace")
        context = sb.exec("pwd; echo $SWEFLOW_IMAGE; ls -A /usr/share/doc/git; cat link")
    assert listed.ok, listed.output
    # --init=false: the private dockerd's --init would bind docker-init over the empty
    # /usr/sbin/docker-init its legacy builder committed in the first RUN's layer
    in_docker = docker("run", "--rm", "--init=false", "--network", "none", tag, "sh", "-c", LISTING)
    assert local == in_docker and len(in_docker.splitlines()) > 2 * 5000
    assert "/opt/tree/gone" not in in_docker and "/etc/debian_version" not in in_docker
    assert "/added.txt f 644 0:0" in in_docker
    assert "/usr/share/doc/git/only f 644 0:0" in in_docker
    assert "/opt/tree/keep f 644 1000:1000" in in_docker
    assert context.output.split() == ["/opt/tree", "multi", "only", "keep"]

    again = import_image(store, f"docker-archive:{archive}")
    assert again.extracted == 0 and len(extractions) == 4
    assert [layer.digest for layer in again.layers] == [layer.digest for layer in image.layers]

    layout = OciLayout(tmp_path / "layout")
    layout.tag(layout.image(read_docker_save(archive)[tag], gzip_below=1 << 20), tag)
    from_oci = import_image(LayerStore(tmp_path / "oci-store"), f"oci:{layout.root}")
    assert [layer.digest for layer in from_oci.layers] == [layer.digest for layer in image.layers]
    assert (
        from_oci.env
        == image.env
        == {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SWEFLOW_IMAGE": "multi",
        }
    )


# -- an image as the base of a build ------------------------------------------------------------


@pytest.mark.slow
def test_an_instance_built_on_an_image_archive_validates(
    tmp_path: Path, bookworm_rootfs: Path, wheelhouse: Path
) -> None:
    """`base: docker-archive:...`: the image's layers are the base, the environment and the
    instance are built on them, and the gold patch validates as on a Debian base."""
    from sweflow.envcache.builder import BuildOptions, EnvBuilder
    from sweflow.envcache.validate import validate_one
    from sweflow.harness.specs import load_specs
    from sweflow.instances import load_instances

    data = Path(__file__).parents[1] / "data" / "envcache"
    rootfs = tar_dir(bookworm_rootfs, tmp_path / "rootfs.tar").read_bytes()
    settings = {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]}
    image = write_docker_save(
        tmp_path / "image.tar", {"sweflow/bookworm:1": (config_for([rootfs], **settings), [rootfs])}
    )
    del rootfs
    options = BuildOptions(
        store=tmp_path / "store",
        repo_mirror=data,
        wheelhouse=wheelhouse,
        base=f"docker-archive:{image}:sweflow/bookworm:1",
    )
    builder = EnvBuilder(load_specs(data / "specs.yaml"), options)
    instance = load_instances(data / "instances.jsonl").raise_for_errors()[0]
    (built,) = builder.build([instance])
    assert built.status == "built", built.error
    manifest = builder.store.read_manifest(instance.instance_id)
    assert [layer.kind for layer in manifest.layers] == ["image", "env", "instance"]
    assert manifest.meta["env"]["LANG"] == "C.UTF-8"  # the image's settings carry over
    assert manifest.meta["env"]["PATH"].startswith("/opt/sweflow/venv/bin:/usr/local/bin")
    validation = validate_one(builder.prepare_validation(instance, built), tmp_path / "v", 1, 600)
    assert validation.outcome == "valid", validation.reason


def _saved_image_of_a_built_row(tmp_path: Path, wheelhouse: Path):
    """A row of the envcache data built from its spec, then saved as the image a registry would
    serve for it (its layers, settings and /testbed): (specs, the row naming the image, the
    folder of saved images, the builder of the spec-built store)."""
    from sweflow.envcache.builder import BuildOptions, EnvBuilder
    from sweflow.harness.specs import load_specs
    from sweflow.instances import load_instances
    from sweflow.sandbox.layertar import write_layer_tar

    data = Path(__file__).parents[1] / "data" / "envcache"
    specs = load_specs(data / "specs.yaml")
    instance = load_instances(data / "instances.jsonl").raise_for_errors()[1]
    built = EnvBuilder(
        specs, BuildOptions(store=tmp_path / "built", repo_mirror=data, wheelhouse=wheelhouse)
    )
    assert built.build([instance])[0].status == "built"
    manifest = built.store.read_manifest(instance.instance_id)
    layers = []
    for layer in manifest.layers:
        with open(tmp_path / "layer.tar", "wb") as out:
            write_layer_tar(built.store.layer_path(layer.digest), out)
        layers.append((tmp_path / "layer.tar").read_bytes())
    settings = {
        "Env": [f"{k}={v}" for k, v in manifest.meta["env"].items()],
        "WorkingDir": "/testbed",
    }
    tag = "swebench/sweb.eval.x86_64.more-itertools:v1"
    images = tmp_path / "images"
    images.mkdir()
    write_docker_save(images / "row.tar", {tag: (config_for(layers, **settings), layers)})
    return specs, instance.model_copy(update={"image": tag}), images, built


@pytest.mark.slow
def test_a_row_with_an_image_runs_on_that_image_unchanged(
    tmp_path: Path, bookworm_rootfs: Path, wheelhouse: Path
) -> None:
    """`--images FOLDER`: a row naming an image gets that image's layers as they are (no build),
    the eval script enters the environment the image holds, and the gold patch validates."""
    from sweflow.envcache.builder import VENV_ACTIVATE, BuildOptions, EnvBuilder
    from sweflow.envcache.validate import validate_one

    specs, row, images, _ = _saved_image_of_a_built_row(tmp_path, wheelhouse)
    store = tmp_path / "from-image"
    runner = EnvBuilder(specs, BuildOptions(store=store, images=str(images)))  # no repo, no pip
    (result,) = runner.build([row])
    assert result.status == "built", result.error
    on_image = runner.store.read_manifest(row.instance_id)
    assert [layer.kind for layer in on_image.layers] == ["image"] * 3
    assert on_image.meta["activate"] == VENV_ACTIVATE and on_image.meta["workdir"] == "/testbed"
    validation = validate_one(runner.prepare_validation(row, result), tmp_path / "v", 1, 600)
    assert validation.outcome == "valid", validation.reason
    missing = row.model_copy(update={"instance_id": "other-1", "image": "nobody/else:1"})
    (error,) = runner.build([missing])
    assert error.status == "error" and "no image 'nobody/else:1' in" in error.error
    assert row.image in error.error  # what the folder does hold


@pytest.mark.slow
def test_an_image_of_the_repository_gets_the_rows_setup_patch_committed(
    tmp_path: Path, bookworm_rootfs: Path, wheelhouse: Path
) -> None:
    """SWE-smith's images hold the repository, not the instance: a row's setup patch (its bug)
    is committed on the image's checkout in a layer of its own, by the image's git, with
    sweflow's fixed author and date; and a row stored from its spec is built again when it is
    asked for on its image, not taken for it."""
    from sweflow.envcache.builder import BuildOptions, EnvBuilder
    from sweflow.envcache.repos import EXPORT_MTIME
    from sweflow.sandbox import open_sandbox

    specs, row, images, built = _saved_image_of_a_built_row(tmp_path, wheelhouse)
    bugged = row.model_copy(update={"instance_id": "bugged-1", "setup_patch": row.patch})
    runner = EnvBuilder(specs, BuildOptions(store=tmp_path / "from-image", images=str(images)))
    (result,) = runner.build([bugged])
    assert result.status == "built", result.error
    manifest = runner.store.read_manifest(bugged.instance_id)
    assert [layer.kind for layer in manifest.layers] == ["image"] * 3 + ["instance"]
    spec = instance_sandbox_spec(runner.store, bugged.instance_id)
    with open_sandbox(spec) as sandbox:
        head = sandbox.exec("git log -1 --format='%an %at %s' && git status --porcelain")
        applied = sandbox.exec(f"git apply --reverse --check - <<'EOF'\n{row.patch}\nEOF")
    assert head.ok and head.output.strip() == f"sweflow {EXPORT_MTIME} setup patch", head.output
    assert applied.ok, applied.output  # the patch is in the tree: it reverses cleanly
    not_applied = bugged.model_copy(update={"instance_id": "bugged-2", "setup_patch": "x\n"})
    (failed,) = runner.build([not_applied])
    assert failed.status == "error" and "bugged-2: setup patch step exited" in failed.error

    assert built.stored_layers(row) is not None  # stored from its spec, fresh as such
    on_image = EnvBuilder(specs, BuildOptions(store=built.store.root, images=str(images)))
    assert on_image.stored_layers(row) is None  # asked for on its image: built again
    (again,) = on_image.build([row])
    assert again.status == "built", again.error
    kinds = [layer.kind for layer in built.store.read_manifest(row.instance_id).layers]
    assert kinds == ["image"] * 3
