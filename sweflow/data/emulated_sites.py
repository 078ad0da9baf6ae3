"""What the emulated internet's servers run (WSGI): a host with a recorded site serves its files,
every other emulated host answers as httpbin.org does.

A recorded site is a folder ``sites/<host>/`` beside this file: ``/a/b.html`` is the file
``a/b.html``, a path ending in ``/`` its ``index.html``; any other path is a 404, as the real
host answers a page that does not exist (a suite's "broken link" and "image not found" cases).
The pages hold what the suites check of the real ones (status, anchors, a fetchable image), not
their whole text. Python 3.6 syntax: it runs on the suite's interpreter.
"""

import mimetypes
import os

from httpbin import app as httpbin

SITES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sites")
NOT_FOUND = b"<!DOCTYPE html><html><head><title>404 Not Found</title></head><body></body></html>"


def app(environ, start_response):
    host = environ.get("HTTP_HOST", "").split(":")[0].lower()
    root = os.path.join(SITES, host)
    if not host or not os.path.isdir(root):
        return httpbin(environ, start_response)
    path = environ.get("PATH_INFO") or "/"
    if path.endswith("/"):
        path += "index.html"
    target = os.path.normpath(os.path.join(root, path.lstrip("/")))
    if target.startswith(root + os.sep) and os.path.isfile(target):
        status = "200 OK"
        with open(target, "rb") as f:
            body = f.read()
        kind = mimetypes.guess_type(target)[0] or "application/octet-stream"
    else:
        status, body, kind = "404 Not Found", NOT_FOUND, "text/html"
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]
