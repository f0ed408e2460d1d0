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


def dechunk(body: bytes) -> bytes:
    """The data of a whole chunked body (`Transfer-Encoding: chunked`, no
    trailers). Raises ValueError when it is cut short or badly framed."""
    out, at = [], 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            raise ValueError(f"no chunk size line at byte {at}")
        size = int(body[at:end].split(b";")[0], 16)
        at = end + 2
        if size == 0:
            if body[at:at + 2] != b"\r\n":
                raise ValueError("no blank line after the last chunk")
            return b"".join(out)
        if body[at + size:at + size + 2] != b"\r\n":
            raise ValueError(f"chunk of {size} bytes at {at} cut short")
        out.append(body[at:at + size])
        at += size + 2
