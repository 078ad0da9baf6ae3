"""The container's attach stream back to the shell protocol's byte stream.

Without a tty, docker frames stdout and stderr with 8-byte headers; :class:`Demux` removes them
(standard error is merged into standard output inside the container, so order is exact).
"""

from __future__ import annotations


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
