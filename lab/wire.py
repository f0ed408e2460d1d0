"""Reading HTTP/1.1 responses off a plain socket, for the experiments and
scripts that speak to a server themselves (idle connections held open, a
viewer's seeks) rather than through `weft load` or wrk.

Only what those callers need: a head, a Content-Length body (none when the
field is absent), keep-alive (bytes after the body are handed back), and
the decoding of a whole chunked body already read.
"""

from __future__ import annotations

import re
import socket

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.I)


def read_response(s: socket.socket, buf: bytes = b"") -> tuple[int, bytes, bytes]:
    """One response from `s`, `buf` holding what was read past the last one:
    (status, body, the bytes read past this response). Raises
    ConnectionError when the peer closes before the response is whole."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        buf += chunk
    head, _, buf = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    m = _CONTENT_LENGTH.search(head)
    length = int(m.group(1)) if m else 0
    while len(buf) < length:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {length} body bytes")
        buf += chunk
    return status, buf[:length], buf[length:]


def read_chunked(buf: bytes, at: int = 0) -> tuple[bytes, int] | None:
    """The chunked body (`Transfer-Encoding: chunked`) that starts at `at`
    in `buf`: its data and the offset just past its trailer section, or
    None when `buf` ends before the body does. Raises ValueError on a bad
    chunk size line or a chunk not followed by its CRLF."""
    out = []
    while True:
        end = buf.find(b"\r\n", at)
        if end < 0:
            return None
        try:
            size = int(buf[at:end].split(b";")[0], 16)
        except ValueError:
            raise ValueError(f"bad chunk size line {buf[at:end][:20]!r}") from None
        at = end + 2
        if size == 0:
            # Trailer fields, if any, then the blank line (end - 2: its CRLF
            # may be the one that ended the size line).
            t = buf.find(b"\r\n\r\n", end)
            return (b"".join(out), t + 4) if t >= 0 else None
        if len(buf) < at + size + 2:
            return None
        if buf[at + size:at + size + 2] != b"\r\n":
            raise ValueError(f"chunk of {size} bytes at {at} not followed by CRLF")
        out.append(buf[at:at + size])
        at += size + 2


def dechunk(body: bytes) -> bytes:
    """The data of a whole chunked body. Raises ValueError when it is cut
    short or badly framed."""
    r = read_chunked(body)
    if r is None:
        raise ValueError("chunked body cut short")
    return r[0]
