"""Reading HTTP/1.1 responses off a plain socket, for the experiments and
scripts that speak to a server themselves (idle connections held open, a
viewer's seeks) rather than through `weft load` or wrk.

Only what those callers need: a head, a Content-Length body (none when the
field is absent), keep-alive (bytes after the body are handed back).
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
