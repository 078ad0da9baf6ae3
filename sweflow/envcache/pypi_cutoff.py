"""A loopback package index that hides what was uploaded after a date, so that a build resolves
the packages its spec leaves unpinned as pip would have on that date.

Spec tables pin some packages; the rest float to today's releases, and an old repository's
suite meets dependencies newer than the harness ever saw (docutils 0.22, July 2025, dropped
``docutils.utils.roman``, which sphinx 3.x-4.x import: their rows fail in a fresh build while
the harness's images, built a year earlier, pass). A spec's ``pypi_cutoff`` points the build's
pip (``PIP_INDEX_URL``) at this index: each project page is the upstream index's JSON page
(PEP 691, whose files carry their ``upload-time``, PEP 700) without the files uploaded after
the cutoff, served as a PEP 503 HTML page that pip of any age reads. Files download from where
upstream says. One server per process (a daemon thread) serves every cutoff: the date is the
first part of the path.
"""

from __future__ import annotations

import html
import json
import os
import ssl
import threading
import urllib.error
import urllib.request
from datetime import UTC, date, datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = "https://pypi.org/simple/"
JSON_PAGE = "application/vnd.pypi.simple.v1+json"
CA_VARIABLES = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
TIMEOUT_S = 60


def host_ca_file() -> str | None:
    """The CA bundle the host's pip settings name (a TLS-re-signing proxy's), if any."""
    return next(
        (os.environ[v] for v in CA_VARIABLES if os.path.isfile(os.environ.get(v, ""))), None
    )


def kept_files(page: dict, cutoff: date) -> list[dict]:
    """The files of a PEP 691 project page uploaded before ``cutoff`` (a file without an
    ``upload-time`` stays: the upstream index does not say, so it is not hidden)."""
    end = datetime.combine(cutoff, datetime.min.time(), tzinfo=UTC)
    kept = []
    for file in page.get("files", []):
        stamp = file.get("upload-time")
        if stamp is None or datetime.fromisoformat(stamp.replace("Z", "+00:00")) < end:
            kept.append(file)
    return kept


def html_page(project: str, files: list[dict]) -> str:
    """A PEP 503 page of ``files`` (with their hashes, Requires-Python and yanked marks)."""
    links = []
    for file in files:
        url = file["url"]
        if sha := file.get("hashes", {}).get("sha256"):
            url = f"{url}#sha256={sha}"
        attrs = f'href="{html.escape(url)}"'
        if requires := file.get("requires-python"):
            attrs += f' data-requires-python="{html.escape(requires)}"'
        if yanked := file.get("yanked"):
            reason = yanked if isinstance(yanked, str) else ""
            attrs += f' data-yanked="{html.escape(reason)}"'
        links.append(f"<a {attrs}>{html.escape(file['filename'])}</a><br/>")
    body = "\n".join(links)
    head = f"<head><title>{html.escape(project)}</title></head>"
    return f"<!DOCTYPE html>\n<html>{head}<body>\n{body}\n</body></html>\n"


class CutoffIndex:
    """The server: ``url(cutoff)`` is the index URL a build's pip is given."""

    def __init__(self, upstream: str = UPSTREAM) -> None:
        self.upstream = upstream.rstrip("/") + "/"
        self._pages: dict[str, dict | None] = {}
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context(cafile=host_ca_file())
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="pypi-cutoff", daemon=True).start()

    def url(self, cutoff: date) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{cutoff.isoformat()}/simple/"

    def page(self, project: str) -> dict | None:
        """The upstream JSON page of ``project`` (None: upstream has no such project), fetched
        once per process."""
        with self._lock:
            if project in self._pages:
                return self._pages[project]
        request = urllib.request.Request(
            self.upstream + f"{project}/", headers={"Accept": JSON_PAGE}
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self._tls) as reply:
                page = json.load(reply)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            page = None
        with self._lock:
            self._pages[project] = page
        return page

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # /<cutoff>/simple/<project>/
                parts = [p for p in self.path.split("?")[0].split("/") if p]
                if len(parts) != 3 or parts[1] != "simple":
                    self._reply(404, "not a project page: /<YYYY-MM-DD>/simple/<project>/")
                    return
                try:
                    cutoff = date.fromisoformat(parts[0])
                    page = index.page(parts[2])
                except ValueError:
                    self._reply(404, f"not a date: {parts[0]}")
                    return
                except (OSError, json.JSONDecodeError) as exc:
                    self._reply(502, f"{index.upstream}{parts[2]}/: {exc}")
                    return
                if page is None:
                    self._reply(404, f"no project {parts[2]} at {index.upstream}")
                    return
                self._reply(200, html_page(parts[2], kept_files(page, cutoff)), "text/html")

            def _reply(self, code: int, text: str, kind: str = "text/plain") -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args) -> None:  # pip's log says what it fetched
                pass

        return Handler


@cache
def shared_index(upstream: str) -> CutoffIndex:
    """This process's index of ``upstream`` (started on first use; its thread ends with the
    process)."""
    return CutoffIndex(upstream)


def pip_env(cutoff: date) -> dict[str, str]:
    """The settings that make pip in a build sandbox (which shares this host's network) resolve
    as of ``cutoff`` through this process's index of PyPI (or of ``SWEFLOW_PYPI_UPSTREAM``, a
    PEP 691 index)."""
    index = shared_index(os.environ.get("SWEFLOW_PYPI_UPSTREAM") or UPSTREAM)
    return {"PIP_INDEX_URL": index.url(cutoff), "PIP_TRUSTED_HOST": "127.0.0.1"}
