"""An image's files from a registry's v2 HTTP API, anonymously, with no docker daemon.

A reference ``registry:[HOST[:PORT]/]REPO[:TAG|@sha256:HEX]`` follows docker's defaults (no
HOST: Docker Hub, ``library/`` for a one-part REPO, tag ``latest``) and is read over https, or
http for a registry on a loopback address. A 401 with a Bearer challenge is answered with a
pull token. Blobs stream, checked by digest as an archive's are; ``httpx`` is imported only
when a registry is read.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from sweflow.envcache.images.manifests import MANIFEST_ACCEPT
from sweflow.envcache.images.sources import CHUNK, DIGEST, ImageImportError, ImageSource, parse_json
from sweflow.sandbox.tarfiles import ChunkReader

if TYPE_CHECKING:
    import httpx

_HTTP_TIMEOUT_S = 60.0
_REPOSITORY = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)


class RegistrySource(ImageSource):
    """A repository read over the registry v2 HTTP API, anonymously: a 401 with a Bearer
    challenge is answered with a token from the challenge's realm (Docker Hub's, ghcr.io's flow).
    Blobs stream and are checked like an archive's."""

    def __init__(self, reference: str, client: httpx.Client) -> None:
        self.where = f"registry:{reference}"
        host, self.repo, self.reference = parse_reference(reference, self.where)
        self.base = f"{url_scheme(host)}://{host}/v2/{self.repo}"
        self._client = client
        self._token: str | None = None
        self._manifests: dict[str, bytes] = {}  # by digest: each one fetched once

    @classmethod
    @contextmanager
    def open(cls, reference: str) -> Iterator[RegistrySource]:
        import httpx  # only registry references need it

        with httpx.Client(follow_redirects=True, timeout=_HTTP_TIMEOUT_S) as client:
            try:
                yield cls(reference, client)
            except httpx.HTTPError as exc:
                raise ImageImportError(f"registry:{reference}: {exc}") from exc

    def top(self) -> dict[str, Any]:
        """The descriptor of the manifest that the reference's tag (or digest) names."""
        with self._send("GET", f"{self.base}/manifests/{self.reference}", MANIFEST_ACCEPT) as got:
            if got.status_code == 404:
                raise ImageImportError(
                    f"{self.where}: no image tagged {self.reference!r}; "
                    f"tags present: {self._tags()}"
                )
            data = self._ok(got, f"manifest {self.reference}").read()
            media_type = got.headers.get("content-type", "").partition(";")[0]
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        if DIGEST.fullmatch(self.reference) and digest != self.reference:
            raise ImageImportError(f"{self.where}: the manifest does not match its digest")
        self._manifests[digest] = data
        return {"digest": digest, "mediaType": media_type}

    def manifest(self, digest: str) -> Any:
        if digest not in self._manifests:
            with self._send("GET", f"{self.base}/manifests/{digest}", MANIFEST_ACCEPT) as got:
                self._manifests[digest] = self._ok(got, f"manifest {digest}").read()
        data = self._manifests[digest]
        if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
            raise ImageImportError(f"{self.where}: manifest {digest} does not match its digest")
        return parse_json(self.where, f"manifest {digest}", data)

    def has(self, name: str) -> bool:
        with self._send("HEAD", self._blob_url(name)) as got:
            return got.status_code == 200

    @contextmanager
    def open_blob(self, name: str) -> Iterator[IO[bytes]]:
        with self._send("GET", self._blob_url(name)) as got:
            self._ok(got, f"blob {name}")
            yield io.BufferedReader(ChunkReader(got.iter_raw(CHUNK)), CHUNK)

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
        body = parse_json(self.where, "token", self._ok(got, "token").read())
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ImageImportError(f"{self.where}: the token service answered no token")
        return token

    def _tags(self) -> str:
        with self._send("GET", f"{self.base}/tags/list") as got:
            if got.status_code != 200:
                return f"unknown (tags/list: HTTP {got.status_code})"
            body = parse_json(self.where, "tags/list", got.read())
        tags = body.get("tags") if isinstance(body, dict) else None
        return ", ".join(sorted(map(str, tags or []))) or "none"

    def _ok(self, response: httpx.Response, what: str) -> httpx.Response:
        if response.status_code >= 400:
            text = response.read().decode(errors="replace")[:300]
            raise ImageImportError(f"{self.where}: {what}: HTTP {response.status_code} {text}")
        return response


def parse_reference(reference: str, where: str) -> tuple[str, str, str]:
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
    if not _REPOSITORY.fullmatch(repo) or (digest and not DIGEST.fullmatch(digest)):
        raise ImageImportError(f"{where}: not a registry reference [HOST/]REPO[:TAG|@DIGEST]")
    return host, repo, digest or tag


def url_scheme(host: str) -> str:
    """http for a registry on this machine (docker allows that too), https for any other."""
    hostname = urllib.parse.urlsplit(f"//{host}").hostname or ""
    try:
        loopback = ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        loopback = hostname == "localhost"
    return "http" if loopback else "https"
