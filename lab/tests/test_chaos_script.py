"""scripts/chaos.py's check of a proxy's pipelined answers, without a proxy:
a response is taken for chunked only when a field says so, never because
its reason phrase does."""

from .script_module import load_script

chaos = load_script("chaos")
BODY = chaos.object_body(23)


def test_a_reason_phrase_naming_chunked_does_not_make_a_body_chunked():
    reply = (b"HTTP/1.1 200 OKTransfer-Encoding: chunked\r\nVia: 1.1 weft\r\n\r\n"
             b"Content-L%ngth: 32136\r\nCache-Control: no-store\r\n\r\n" + BODY[:100])
    assert chaos.answers(reply, [(23, False, False)]) == []


def test_a_chunked_answer_is_decoded_and_checked():
    good = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"23\"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (100, BODY[:100])
    assert chaos.answers(good, [(23, False, False)]) == []
    wrong = good.replace(BODY[:100], b"x" * 100)
    assert chaos.answers(wrong, [(23, False, False)]) == ["/obj/23: a 200 whose 100-byte body is not this object's"]
    bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\nnot a size\r\n"
    assert chaos.answers(bad, [(23, False, False)]) == ["/obj/23: bad chunk size line b'not a size'"]


def test_the_framing_field_may_end_the_head():
    assert chaos.CHUNKED.search(b"http/1.1 200 ok\r\ntransfer-encoding: chunked")
    assert not chaos.CHUNKED.search(b"http/1.1 200 ok\r\nx-note: transfer-encoding: chunked")
    assert not chaos.CHUNKED.search(b"http/1.1 200 ok\r\ntransfer-encoding: chunked, gzip")
