"""scripts/herd.py's pieces that need no proxy: a client's request records
when its first byte came, and --size goes with --rate."""

import subprocess
import sys
import time

from .script_module import SCRIPTS, load_script as load


def test_a_request_records_its_first_byte():
    herd, seek = load("herd"), load("seek")
    origin = seek.Origin(files=1, size=300_000, rate=10**9)
    try:
        first = []
        t = time.monotonic()
        got = herd.get(origin.port, "/f0.bin", first)
        assert got.startswith(b"HTTP/1.1 200")
        assert got.endswith(b"\r\n\r\n" + seek.content(0, 300_000))
        assert len(first) == 1 and t <= first[0] <= time.monotonic()
        # Without the list, the same bytes.
        assert herd.get(origin.port, "/f0.bin") == got
    finally:
        origin.close()


def test_size_goes_with_rate():
    for argv in (["--size", "8MiB"], ["--rate", "8MB/s"], ["--size", "8MiB", "--rate", "8MB/s", "--stale"]):
        r = subprocess.run([sys.executable, str(SCRIPTS / "herd.py"), *argv], capture_output=True, text=True)
        assert r.returncode == 2 and "--size and --rate go together" in r.stderr, (argv, r.stderr)


def test_a_chunked_origin_sends_the_same_bytes_and_ignores_ranges():
    herd, seek = load("herd"), load("seek")
    origin = seek.Origin(files=1, size=200_000, rate=10**9, chunked=True)
    try:
        got = herd.get(origin.port, "/f0.bin")
        assert got.partition(b"\r\n\r\n")[0].endswith(b"\r\nTransfer-Encoding: chunked")
        assert herd.body_of(got) == seek.content(0, 200_000)
        # Cut short, it is not whole.
        assert herd.body_of(got[:-5]) is None
    finally:
        origin.close()
    r = subprocess.run([sys.executable, str(SCRIPTS / "herd.py"), "--chunked"], capture_output=True, text=True)
    assert r.returncode == 2 and "--chunked needs --size and --rate" in r.stderr, r.stderr
