"""scripts/seek.py's origin and viewer without a proxy: the origin answers
ranges byte-exact (206 with Content-Range, 200 without a Range) and counts
what it sent; a viewer session checks every chunk it reads."""

import socket

from .script_module import load_script


def load():
    return load_script("seek")


def test_a_session_reads_its_chunks_byte_exact():
    seek = load()
    size = 3 * seek.CHUNK + 1000
    origin = seek.Origin(files=2, size=size, rate=10**9)
    try:
        first = seek.session(origin.port, "/f1.bin", seek.CHUNK, 3, size)
        assert isinstance(first, float), first
        # Two whole chunks, then the last 1000 bytes.
        assert origin.requests == 3
        assert origin.bytes == 2 * seek.CHUNK + 1000
        # Asked for four from the last chunk on: one short request.
        assert isinstance(seek.session(origin.port, "/f0.bin", 3 * seek.CHUNK, 4, size), float)
        assert origin.requests == 4
    finally:
        origin.close()


def test_the_origin_answers_whole_and_missing_files():
    seek = load()
    origin = seek.Origin(files=1, size=5000, rate=10**9)
    try:
        with socket.create_connection(("127.0.0.1", origin.port), timeout=10) as s:
            s.sendall(b"GET /f0.bin HTTP/1.1\r\nHost: h\r\n\r\n")
            status, body, rest = seek.read_response(s, b"")
            assert (status, body, rest) == (200, seek.content(0, 5000), b"")
            s.sendall(b"GET /f1.bin HTTP/1.1\r\nHost: h\r\n\r\n")
            assert seek.read_response(s, b"")[0] == 404
    finally:
        origin.close()


def test_content_repeats_with_period_251():
    seek = load()
    assert seek.content(0, 3) == bytes([0, 1, 2])
    assert seek.content(250, 3) == bytes([250, 0, 1])
    assert seek.content(251 * 7 + 5, 600) == seek.content(5, 600)
