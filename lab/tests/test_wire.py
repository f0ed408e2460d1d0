import socket

import pytest

from lab.wire import dechunk, read_chunked, read_response


def test_keep_alive_responses_and_what_follows_them():
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(5)
        b.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
                  b"HTTP/1.1 404 Not Found\r\ncontent-length:  3\r\n\r\nno")
        status, body, rest = read_response(a)
        assert (status, body) == (200, b"hello")
        # The next response, begun in what was read past the first, its
        # body's last byte still to come.
        b.sendall(b"tHTTP/1.1 204")
        status, body, rest = read_response(a, rest)
        assert (status, body) == (404, b"not")
        assert rest == b"HTTP/1.1 204"


def test_a_response_without_length_has_no_body_and_a_short_one_is_an_error():
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(5)
        b.sendall(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
        assert read_response(a) == (304, b"", b"")
        b.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionError, match="3 of 10"):
            read_response(a)


def test_a_chunked_body_is_decoded_and_a_cut_one_is_an_error():
    assert dechunk(b"5\r\nhello\r\n1;x=y\r\n!\r\n0\r\n\r\n") == b"hello!"
    assert dechunk(b"0\r\n\r\n") == b""
    for cut in (b"5\r\nhello\r\n", b"5\r\nhel", b"5\r\nhello\r\n0\r\n"):
        with pytest.raises(ValueError):
            dechunk(cut)


def test_a_chunked_body_in_a_stream_ends_after_its_trailers():
    wire = b"xx3\r\nabc\r\n0\r\nT: 1\r\n\r\nHTTP/1.1 200"
    assert read_chunked(wire, 2) == (b"abc", wire.index(b"HTTP"))
    assert read_chunked(b"3\r\nabc\r\n0\r\n\r\n") == (b"abc", 13)
    # Incomplete: None, whatever is missing.
    for cut in (b"3\r\nab", b"3\r\nabc\r\n0\r\n", b"3\r\nabc\r\n0\r\nT: 1\r\n"):
        assert read_chunked(cut) is None, cut
    with pytest.raises(ValueError):
        read_chunked(b"zz\r\n")
