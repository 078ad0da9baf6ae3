"""The container's attach stream back to the shell protocol's byte stream.

Without a tty, docker frames stdout and stderr with 8-byte headers (:class:`Demux` removes them;
standard error is merged into standard output inside the container, so order is exact), and the
container's supervisor marks each exit of the shell (:class:`ExitScanner` takes those marks out
before the shell protocol's own end-of-command marker is looked for).
"""

from __future__ import annotations

import re


class Demux:
    """Docker's multiplexed stream (8-byte frame headers) back to one byte stream."""

    def __init__(self) -> None:
        self._header = b""
        self._left = 0

    def feed(self, data: bytes) -> bytes:
        out = []
        pos = 0
        while pos < len(data):
            if self._left:
                take = data[pos : pos + self._left]
                out.append(take)
                self._left -= len(take)
                pos += len(take)
                continue
            need = 8 - len(self._header)
            self._header += data[pos : pos + need]
            pos += need
            if len(self._header) == 8:
                self._left = int.from_bytes(self._header[4:8], "big")
                self._header = b""
        return b"".join(out)


class ExitScanner:
    """Takes the supervisor's "the shell exited" marker out of the stream before MarkerScanner."""

    def __init__(self, nonce: str) -> None:
        self.prefix = b"\x1bSWX" + nonce.encode() + b":"
        self._marker = re.compile(re.escape(self.prefix) + rb"(-?\d+)\x00")
        self._pending = b""

    def feed(self, chunk: bytes) -> tuple[bytes, int | None, bytes]:
        """(bytes before the exit marker, its code or None, bytes after it)."""
        buf = self._pending + chunk
        self._pending = b""
        match = self._marker.search(buf)
        if match:
            return buf[: match.start()], int(match.group(1)), buf[match.end() :]
        keep = self._partial_start(buf)
        self._pending = buf[keep:]
        return buf[:keep], None, b""

    def _partial_start(self, buf: bytes) -> int:
        """Where an unfinished exit marker may begin at the end of ``buf`` (len(buf) if nowhere)."""
        start = buf.rfind(b"\x1b", max(0, len(buf) - len(self.prefix) - 24))
        if start == -1:
            return len(buf)
        tail = buf[start:]
        n = min(len(tail), len(self.prefix))
        if tail[:n] != self.prefix[:n]:
            return len(buf)
        if len(tail) > len(self.prefix) and not re.fullmatch(rb"-?\d*", tail[len(self.prefix) :]):
            return len(buf)
        return start
