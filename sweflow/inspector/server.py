"""The inspector served on loopback: the page, made anew from the folder on each load.

Only 127.0.0.1 is listened on (the runs hold a task's code and a model's outputs; nothing else
on the network should read them). ``serve`` returns when interrupted (Ctrl-C): the loop polls
for shutdown every ``POLL_S``, so it stops well within a second.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable
from pathlib import Path

from sweflow.inspector.page import page_data, render

HOST = "127.0.0.1"
POLL_S = 0.2


class InspectorServer(http.server.ThreadingHTTPServer):
    """Serves ``/`` (the page) and ``/index.html``; anything else is a 404."""

    daemon_threads = True

    def __init__(self, folder: Path, port: int = 0, eval_roots: list[Path] | None = None) -> None:
        self.folder = Path(folder)
        self.eval_roots = list(eval_roots or [])
        self.lock = threading.Lock()  # one page built at a time: a reload storm stays cheap
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def page(self) -> bytes:
        with self.lock:
            return render(page_data(self.folder, self.eval_roots)).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: InspectorServer

    def do_GET(self) -> None:
        if self.path.split("?")[0] not in ("/", "/index.html"):
            self.send_error(404, "the inspector serves one page: /")
            return
        try:
            body = self.server.page()
        except Exception as exc:  # a run file went bad meanwhile: say so on the page
            self.send_error(500, f"cannot read the runs: {exc}")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a page load is not news on the terminal."""


def serve(server: InspectorServer, ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``ready`` is told the URL first."""
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever(poll_interval=POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
