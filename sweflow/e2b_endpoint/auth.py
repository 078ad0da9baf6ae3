"""Who may use the endpoint: one API key, a token per sandbox, a signed link per upload.

What the e2b SDK sends: the API key in ``X-API-KEY`` on the control and template build API;
on a sandbox's envd routes the ``envdAccessToken`` of that sandbox's create (or connect) reply
in ``X-Access-Token``; nothing on the PUT of a template's files, whose URL the endpoint gave
out, so that URL carries an HMAC of the files' hash under the key. Every comparison takes
constant time (:func:`hmac.compare_digest`). One key is one client: whoever holds it may use
every sandbox; a sandbox's token reaches that sandbox's envd only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from sweflow.errors import SweflowError

KEY_ENV = "SWEFLOW_E2B_API_KEY"
MIN_KEY_CHARS = 16


def new_secret() -> str:
    """A fresh key or sandbox token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def key_from_env() -> str | None:
    """The key given in ``$SWEFLOW_E2B_API_KEY`` (never on the command line, where ``ps``
    shows it to every user), or None; a short one is refused."""
    key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        return None
    if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable():
        raise SweflowError(f"{KEY_ENV} must be at least {MIN_KEY_CHARS} printable ASCII characters")
    return key


def write_key_file(path: Path, key: str) -> None:
    """Write ``key`` to ``path``, readable by its owner only (0600): created beside it and
    renamed over it, so a link planted at ``path`` is replaced, never written through."""
    part = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)
    os.rename(part, path)


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time that does not depend on where they differ."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def upload_token(key: str, digest: str) -> str:
    """What the upload link of a template's files ``digest`` carries."""
    return hmac.new(key.encode(), f"template-files:{digest}".encode(), hashlib.sha256).hexdigest()
