"""`sweflow sandbox serve-e2b` on a shared machine: each attack of issue 54 (item 1), refused.

Every endpoint here is its own process with its own sandbox state directory, so what it opens
is counted exactly. Attacks the SDK would never send go as raw HTTP; the template builds go
through the real e2b SDK, as a client's would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

e2b = pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'sweflow[e2b]')")
import httpx  # noqa: E402
from e2b import Sandbox, SandboxException, Template  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from sweflow.cli import app  # noqa: E402
from sweflow.e2b_endpoint.auth import KEY_ENV  # noqa: E402
from sweflow.e2b_endpoint.launch import (  # noqa: E402
    Endpoint,
    scoped_environ,
    sdk_settings,
    start_endpoint,
    stop_endpoint,
)
from sweflow.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)
VIEW = Path("/run/sweflow/hostroot")  # where older sweflow mounted its view of the host's /
SOME_HASH = hashlib.sha256(b"some files").hexdigest()


@dataclass
class Served:
    endpoint: Endpoint
    state: Path  # its sandboxes' state directories
    templates: Path  # where it keeps what Template.build made (templates/, files/, layers/)

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.endpoint.url,
            headers={"X-API-KEY": key or self.endpoint.key},
            timeout=60,
        )

    def opened(self) -> int:
        return len(os.listdir(self.state))

    def create(self, template: str = "base") -> dict:
        with self.client() as client:
            reply = client.post("/sandboxes", json={"templateID": template, "timeout": 120})
        assert reply.status_code == 201, reply.text
        return reply.json()


@contextlib.contextmanager
def serving(base: Path, root: Path, *extra: str) -> Iterator[Served]:
    state = root / "state"
    state.mkdir()
    with scoped_environ({"SWEFLOW_STATE_DIR": str(state)}):
        started = start_endpoint(base, root / "endpoint.log", extra=extra)
    try:
        yield Served(started, state, root / "templates")
    finally:
        stop_endpoint(started.proc)


@pytest.fixture(scope="module")
def served(bookworm_rootfs, tmp_path_factory) -> Iterator[Served]:
    """An endpoint as `serve-e2b` starts by default, uploads capped at 1 MiB."""
    root = tmp_path_factory.mktemp("e2b-secure")
    with serving(bookworm_rootfs, root, "--max-upload-mb", "1") as endpoint:
        yield endpoint


def _envd(sandbox: dict, token: str | None) -> dict[str, str]:
    headers = {"E2b-Sandbox-Id": sandbox["sandboxID"]}
    return headers | ({"X-Access-Token": token} if token is not None else {})


# -- the key and the tokens -------------------------------------------------------------------
ROUTES = [
    ("GET", "/v2/sandboxes"),
    ("GET", "/sandboxes"),
    ("POST", "/sandboxes"),
    ("POST", "/v2/sandboxes"),
    ("GET", "/sandboxes/{id}"),
    ("DELETE", "/sandboxes/{id}"),
    ("POST", "/sandboxes/{id}/timeout"),
    ("POST", "/sandboxes/{id}/connect"),
    ("POST", "/v2/sandboxes/{id}/connect"),
    ("POST", "/v3/templates"),
    ("GET", "/templates/aliases/base"),
    ("GET", f"/templates/t/files/{SOME_HASH}"),
    ("POST", "/v2/templates/t/builds/b"),
    ("GET", "/templates/t/builds/b/status"),
]


def test_every_control_and_build_route_needs_the_key(served) -> None:
    mine = served.create()
    opened = served.opened()
    body = {"templateID": "base", "timeout": 60, "name": "t"}
    for key in (None, "local", served.endpoint.key[:-1] + "x"):
        headers = {"X-API-KEY": key} if key is not None else {}
        for method, path in ROUTES:
            url = served.endpoint.url + path.format(id=mine["sandboxID"])
            reply = httpx.request(method, url, headers=headers, json=body)
            assert reply.status_code == 401, (key, method, path, reply.text)
    assert served.opened() == opened  # nothing opened, nothing killed
    with served.client() as client:
        assert mine["sandboxID"] in {s["sandboxID"] for s in client.get("/v2/sandboxes").json()}
        assert client.delete(f"/sandboxes/{mine['sandboxID']}").status_code == 204


def test_a_sandbox_token_reaches_that_sandbox_only(served) -> None:
    first, second = served.create(), served.create()
    url = served.endpoint.url

    def download(token: str | None) -> httpx.Response:
        headers = _envd(second, token)
        return httpx.get(f"{url}/files", params={"path": "/etc/hostname"}, headers=headers)

    def process_list(token: str | None) -> httpx.Response:
        headers = _envd(second, token) | {"Content-Type": "application/json"}
        return httpx.post(f"{url}/process.Process/List", content=b"{}", headers=headers)

    assert download(second["envdAccessToken"]).status_code == 200
    assert process_list(second["envdAccessToken"]).status_code == 200
    for token in (None, first["envdAccessToken"], served.endpoint.key):
        assert download(token).status_code == 401
        assert process_list(token).status_code == 401
    with served.client() as client:
        for sandbox in (first, second):
            client.delete(f"/sandboxes/{sandbox['sandboxID']}")


def test_a_given_key_must_be_long_and_a_made_one_is_printed_and_written_0600(
    bookworm_rootfs, tmp_path
) -> None:
    short = CliRunner().invoke(app, ["--dry-run", "sandbox", "serve-e2b"], env={KEY_ENV: "local"})
    assert short.exit_code != 0 and f"{KEY_ENV} must be at least 16" in short.output
    key_file, port = tmp_path / "e2b.key", free_port()
    argv = [sys.executable, "-m", "sweflow.cli", "sandbox", "serve-e2b", "--port", str(port)]
    argv += ["--base", str(bookworm_rootfs), "--templates", str(tmp_path / "templates")]
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV} | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*argv, "--key-file", str(key_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        said = ""
        while "E2B_API_KEY=" not in said and (line := proc.stdout.readline()):
            said += line
        printed = said.rpartition("E2B_API_KEY=")[2].strip()
        assert len(printed) >= 32 and key_file.read_text().strip() == printed
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        url = f"http://127.0.0.1:{port}/v2/sandboxes"
        for _ in range(100):  # until it listens
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url, headers={"X-API-KEY": printed}).status_code == 200:
                    break
            time.sleep(0.1)
        assert httpx.get(url, headers={"X-API-KEY": printed}).status_code == 200
        assert httpx.get(url, headers={"X-API-KEY": printed[:-1]}).status_code == 401
    finally:
        stop_endpoint(proc)


# -- request bodies ---------------------------------------------------------------------------
def test_a_json_route_takes_json_only(served) -> None:
    opened = served.opened()
    with served.client() as client:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            body = b'{"templateID": "base"}'
            reply = client.post("/sandboxes", content=body, headers=headers)
            assert reply.status_code == 415, (content_type, reply.text)
    assert served.opened() == opened


@pytest.mark.parametrize(
    "body",
    [
        {"templateID": "base", "metadata": [1]},
        {"templateID": "base", "metadata": {"run": 1}},
        {"templateID": "base", "envVars": {"A": 1}},
        {"templateID": "base", "envVars": {"NOT A NAME": "x"}},
        {"templateID": "base", "allowInternetAccess": "no"},
        {"templateID": "base", "allow_internet_access": "no"},
        {"templateID": "base", "timeout": "60"},
        {"templateID": "base", "timeout": 1.5},
        {"templateID": "base", "timeout": 0},
        {"templateID": 7},
        [1],
    ],
    ids=lambda body: str(body)[:60],
)
def test_a_bad_create_body_is_a_400_with_nothing_opened(served, body) -> None:
    opened = served.opened()
    with served.client() as client:
        listed = client.get("/v2/sandboxes").json()
        reply = client.post("/sandboxes", json=body)
        assert reply.status_code == 400, reply.text
        assert client.get("/v2/sandboxes").json() == listed
    assert served.opened() == opened


def test_a_bad_timeout_body_is_a_400(served) -> None:
    sandbox = served.create()
    with served.client() as client:
        for body in ({"timeout": "60"}, {"timeout": -1}, {}):
            reply = client.post(f"/sandboxes/{sandbox['sandboxID']}/timeout", json=body)
            assert reply.status_code == 400, (body, reply.text)
        client.delete(f"/sandboxes/{sandbox['sandboxID']}")


# -- templates --------------------------------------------------------------------------------
def test_a_template_is_the_endpoints_own_never_a_host_path(served, tmp_path) -> None:
    opened = served.opened()
    with served.client() as client:
        for template in (str(tmp_path), "/", str(VIEW), "/etc", "host", "layers:/etc", "../etc"):
            reply = client.post("/sandboxes", json={"templateID": template})
            assert reply.status_code == 404, (template, reply.text)
    assert served.opened() == opened


@pytest.fixture(scope="module")
def opted_in(bookworm_rootfs, tmp_path_factory) -> Iterator[Served]:
    """An endpoint that serves the host base and host directories (its opt-in flags)."""
    root = tmp_path_factory.mktemp("e2b-opted-in")
    with serving(bookworm_rootfs, root, "--allow-base", "host", "--allow-host-dirs") as endpoint:
        yield endpoint


def test_the_host_base_serves_only_files_every_user_may_read(
    opted_in, bookworm_rootfs, tmp_path
) -> None:
    mark = secrets.token_hex(8)
    secret, public = Path(f"/var/lib/sweflow-secret-{mark}"), Path(f"/var/lib/sweflow-open-{mark}")
    for path, mode in ((secret, 0o600), (public, 0o644)):
        path.write_text(f"{path.name}\n")
        path.chmod(mode)
    try:
        with sdk_settings(opted_in.endpoint):
            sandbox = Sandbox.create("host", timeout=60)
            try:
                assert sandbox.files.read(str(public)) == f"{public.name}\n"
                # refused by the endpoint, or before it by the kernel: root inside the sandbox
                # (whose overlay the host reads through) is not the host's root
                with pytest.raises(SandboxException, match="every user may read|Permission denied"):
                    sandbox.files.read(str(secret))
                # with a host sandbox open, / is not a template, even with --allow-host-dirs;
                # another host directory is
                with opted_in.client() as client:
                    reply = client.post("/sandboxes", json={"templateID": "/"})
                    assert reply.status_code == 404, reply.text
                (tmp_path / "rootfs").symlink_to(bookworm_rootfs)  # a host path, not the base
                beside = Sandbox.create(str(tmp_path / "rootfs"), timeout=60)
                assert beside.commands.run("echo opened").stdout == "opened\n"
                beside.kill()
            finally:
                sandbox.kill()
    finally:
        secret.unlink()
        public.unlink()


# -- template builds --------------------------------------------------------------------------
def test_a_copy_destination_never_leaves_the_template(served, tmp_path) -> None:
    mark = f"sweflow-copy-{secrets.token_hex(6)}"
    (tmp_path / "payload.txt").write_text("payload\n")
    outside = Path("/opt") / mark
    dest = "../" * 12 + f"opt/{mark}/"
    try:
        with sdk_settings(served.endpoint):
            template = Template(file_context_path=tmp_path).from_template("base")
            Template.build(template.copy("payload.txt", dest), mark)
            assert not outside.exists()
            sandbox = Sandbox.create(mark, timeout=60)
            try:
                assert sandbox.files.read(f"/opt/{mark}/payload.txt") == "payload\n"
            finally:
                sandbox.kill()
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_a_link_a_copy_unpacks_is_followed_inside_its_layer(served, tmp_path) -> None:
    """``a/b/l -> ../..`` lands first; ``c/b/l/MARK`` then goes through it: inside the layer
    that is its /, outside it the endpoint's own folder of layers."""
    mark = f"sweflow-link-{secrets.token_hex(6)}"
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "l").symlink_to("../..")
    (tmp_path / "c" / "b" / "l").mkdir(parents=True)
    (tmp_path / "c" / "b" / "l" / f"{mark}.txt").write_text("through the link\n")
    with sdk_settings(served.endpoint):
        template = Template(file_context_path=tmp_path).from_template("base")
        Template.build(template.copy("*", "/", resolve_symlinks=False), mark)
        sandbox = Sandbox.create(mark, timeout=60)
        try:
            assert sandbox.files.read(f"/{mark}.txt") == "through the link\n"
            assert sandbox.commands.run("readlink /b/l").stdout == "../..\n"
        finally:
            sandbox.kill()
    layers = served.templates / "layers"
    found = list(served.templates.rglob(f"{mark}.txt"))
    assert found and all(path.parent.parent == layers for path in found), found


def test_a_copy_writes_nothing_outside_its_layer_in_whatever_order_it_unpacks(
    served, tmp_path
) -> None:
    """Each of ``p`` and ``q`` holds a link that the other writes through: whichever lands
    first, a write goes through a link (the build may then fail on the other, a link where a
    directory is), and nothing may land outside the layer."""
    mark = f"sweflow-order-{secrets.token_hex(6)}"
    for holder, link, writer in (("p", "lx", "q"), ("q", "ly", "p")):
        (tmp_path / holder / "b").mkdir(parents=True, exist_ok=True)
        (tmp_path / holder / "b" / link).symlink_to("../..")
        (tmp_path / writer / "b" / link).mkdir(parents=True)
        (tmp_path / writer / "b" / link / f"{mark}-{link}.txt").write_text("through\n")
    with sdk_settings(served.endpoint), contextlib.suppress(e2b.BuildException):
        template = Template(file_context_path=tmp_path).from_template("base")
        Template.build(template.copy("*", "/", resolve_symlinks=False), mark)
    layers = served.templates / "layers"
    found = list(served.templates.parent.rglob(f"{mark}-l?.txt"))
    inside = [p for p in found if p.is_relative_to(layers) and len(p.relative_to(layers).parts) > 1]
    assert found and found == inside, found


def _tar(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        member = tarfile.TarInfo(name)
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def _build(client: httpx.Client, name: str, steps: list[dict]) -> dict:
    """Request and start a build of ``steps`` over `base`; its final status."""
    build = client.post("/v3/templates", json={"name": name}).json()["buildID"]
    body = {"fromTemplate": "base", "steps": steps}
    assert client.post(f"/v2/templates/{name}/builds/{build}", json=body).status_code == 202
    for _ in range(600):  # until it ends
        status = client.get(f"/templates/{name}/builds/{build}/status").json()
        if status["status"] != "building":
            return status
        time.sleep(0.1)
    raise AssertionError(f"build {name} never ended")


def test_an_upload_that_is_not_what_its_hash_names_is_refused_and_deleted(served) -> None:
    digest = hashlib.sha256(b"the files a victim would copy").hexdigest()
    with served.client() as client:
        link = client.get(f"/templates/t/files/{digest}").json()
        assert httpx.put(link["url"], content=_tar("evil.txt", b"planted\n")).status_code == 200
        assert client.get(f"/templates/t/files/{digest}").json()["present"]
        step = {"type": "COPY", "args": ["payload.txt", "/opt/"], "filesHash": digest}
        status = _build(client, f"poisoned-{digest[:8]}", [step])
        assert status["status"] == "error", status
        assert "refused and deleted" in status["reason"]["message"]
        assert not client.get(f"/templates/t/files/{digest}").json()["present"]


def test_an_upload_needs_its_link_and_is_capped(served) -> None:
    digest = hashlib.sha256(b"large files").hexdigest()
    with served.client() as client:
        link = client.get(f"/templates/t/files/{digest}").json()["url"]
        other = client.get(f"/templates/t/files/{SOME_HASH}").json()["url"]
        assert httpx.put(link, content=b"\0" * (2 << 20)).status_code == 413  # over 1 MiB
        unsigned = f"{served.endpoint.url}/template-files/{digest}"
        assert httpx.put(unsigned, content=b"x").status_code == 401
        assert httpx.put(unsigned + "?" + other.partition("?")[2], content=b"x").status_code == 401
        assert not client.get(f"/templates/t/files/{digest}").json()["present"]
    assert not [p for p in (served.templates / "files").iterdir() if p.name.startswith(".")]


# -- special files ----------------------------------------------------------------------------
def test_fifos_are_refused_and_creates_and_ctrl_c_still_work(bookworm_rootfs, tmp_path) -> None:
    """A download (or upload) of a FIFO used to block a worker thread for good: six of them
    stopped creates, the reaper and Ctrl-C."""
    with serving(bookworm_rootfs, tmp_path) as served:
        sandbox = served.create()
        with sdk_settings(served.endpoint):
            inside = Sandbox.connect(sandbox["sandboxID"])
            inside.commands.run("mkfifo /tmp/pipe && mv /etc/passwd /etc/passwd.real")
            inside.commands.run("mkfifo /etc/passwd")  # what file listings read owner names from
            assert inside.files.get_info("/tmp/pipe").owner == "0"
        url, headers = served.endpoint.url, _envd(sandbox, sandbox["envdAccessToken"])
        replies: list = []

        def download() -> None:
            try:
                got = httpx.get(f"{url}/files", params={"path": "/tmp/pipe"}, headers=headers)
                replies.append((got.status_code, got.json()["message"]))
            except httpx.TimeoutException as exc:
                replies.append(("timed out", str(exc)))

        threads = [threading.Thread(target=download, daemon=True) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(replies) == 8 and all(
            code == 400 and "not a regular file" in why for code, why in replies
        ), replies
        params = {"path": "/tmp/pipe"}
        upload = httpx.post(f"{url}/files", params=params, content=b"x", headers=headers)
        assert upload.status_code == 400 and "not a regular file" in upload.text
        served.create()  # creates still work
        assert served.opened() == 2
        served.endpoint.proc.send_signal(signal.SIGINT)
        assert served.endpoint.proc.wait(30) is not None  # Ctrl-C still stops it
        assert served.opened() == 0  # having closed every sandbox
