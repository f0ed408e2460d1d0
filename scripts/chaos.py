#!/usr/bin/env python3
"""Throw mutated, truncated, oversized and reset requests at every weft role.

Each target is one role in one configuration (serve under each architecture
and event backend, serve with a FastCGI pool (spliced and copied), origin,
reverse and forward proxy with splice, sockmap and uring linked chains, front in relay, handoff
and booster mode). CLIENTS threads open
connections for SECONDS and on each send one to four requests drawn from
templates (GET with ranges and validators, POST and PUT with lengths and
chunks, Expect, CONNECT, absolute targets, OPTIONS *), mutated byte-wise in
four of ten connections, plain garbage, a 1-200 KB header line, or a
request dribbled a few bytes at a time; then half-close, reset, or read the
reply (and maybe reset mid-body).

After each target:
  - every process of it is alive and no log says `panicked`;
  - every reply that came back began with `HTTP/1.`, and none was a 500;
  - a clean request is still answered 200;
  - each process holds at most FD_SLACK descriptors more than before (its
    pools of upstream connections, pipes and sockmaps; the per-worker file
    caches), once timeouts had 3 s to close what the clients left;
  - no process has more child processes than before (an MP pool, a FastCGI
    pool; a zombie counts);
  - SIGTERM stops it within 10 s;
  - HELD connections that asked for a HUGE object and stopped reading (two
    of them half-closed) were cut by the send (or idle) timeout, which the
    targets set to 1 s: each ends within 5 s of the run, short of the
    whole object. (A wake-up counted as progress once held such a client
    for good under epoll-once.)

The proxy-bad-origin targets put a caching reverse proxy in front of
BadOrigin, an upstream that misbehaves on purpose (cut and overrun bodies,
endless chunks, mutated heads, 1xx, stray 304s, slow starts), with clients
that pipeline, ask for ranges and validators, and abort. Each answer must
be its request's, no connection may be closed before its first answer
(uring linked chains once held a head back and lost it with the session),
and afterwards every object the proxy answers with only-if-cached must be
the whole true body.

Exit 1 naming the target and the check that failed; the seed makes a run
repeatable.

  python3 scripts/chaos.py [--weft target/release/weft] [--seconds 3]
        [--clients 3] [--seed 1] [--only SUBSTRING] [--list]

The whole set at the default 3 s takes about two minutes.
"""
import argparse, os, random, re, shutil, signal, socket, struct, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lab.wire import read_chunked  # noqa: E402

# Descriptors a process may hold after a run beyond its count before it:
# pooled upstream connections, spare pipes, the sockmap programs and maps
# (loaded on first use), a file cache's open files per worker.
FD_SLACK = 64

# Connections per target that ask for a HUGE object and stop reading.
HELD = 3
HUGE = 24 << 20

TEMPLATES = [
    b"GET /{p} HTTP/1.1\r\nHost: {h}\r\n\r\n",
    b"GET /{p} HTTP/1.1\r\nHost: {h}\r\nRange: bytes=0-10,20-30,-5\r\n\r\n",
    b"GET /{p} HTTP/1.1\r\nHost: {h}\r\nIf-None-Match: \"x\", W/\"y\"\r\n"
    b"If-Modified-Since: Tue, 01 Jan 2030 00:00:00 GMT\r\nIf-Range: \"z\"\r\nRange: bytes=5-\r\n\r\n",
    b"POST /{p} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /{p} HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n",
    b"PUT /{p} HTTP/1.1\r\nHost: {h}\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"HEAD /{p} HTTP/1.0\r\n\r\n",
    b"GET http://{h}/{p} HTTP/1.1\r\nHost: {h}\r\n\r\n",
    b"CONNECT {h} HTTP/1.1\r\nHost: {h}\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: {h}\r\n\r\n",
    b"GET /{p} HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\nAccept-Encoding: gzip\r\n\r\n",
    b"DELETE /{p} HTTP/1.1\r\nHost: {h}\r\nContent-Length: 0\r\n\r\n",
    b"GET /{p} HTTP/1.1\r\nHost: {h}\r\nCache-Control: no-cache, max-stale, only-if-cached\r\nPragma: no-cache\r\n\r\n",
]

PATHS = [b"", b"a.txt", b"big.bin", b"dir/", b"dir", b"nope", b"%2e%2e/etc/passwd", b"a.txt?x=1",
         b"x" * 300, b"dir/b.html", b"size/1000", b"size/100000", b"index.html", b"..", b"a%00b",
         b"\xff\xfe", b"%61.txt", b"//a.txt", b"stats",
          # The FastCGI application under /app (serve-cgi targets; 404 elsewhere).
         # (Not `loop=1`: a local redirect to itself is rightly a 500.)
         b"app/x?size=100", b"app/x?size=100000&record=1000", b"app/x?echo=1", b"app/x?badhead=1",
         b"app/x?over=7&size=10", b"app/x?crash=1", b"app/x?hang=1", b"app/x?local=/a.txt"]

INSERTS = [b"\r\n", b"\n", b" ", b":", b"\x00", b"\t", b"Content-Length: 99999999999\r\n",
           b"Transfer-Encoding: chunked\r\n", b"Content-Length: 3\r\n", b"ffffffffffffffff\r\n",
           b"-1\r\n", b"Host: a\r\n", b"Transfer-Encoding: gzip, chunked\r\n", b"Connection: close\r\n"]


def mutate(b, rng):
    b = bytearray(b)
    for _ in range(rng.randint(1, 4)):
        if not b:
            break
        i = rng.randrange(len(b))
        op = rng.randint(0, 5)
        if op == 0:
            b[i] = rng.randrange(256)
        elif op == 1:
            del b[i:i + rng.randint(1, 8)]
        elif op == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3:
            b[i:i] = rng.choice(INSERTS)
        elif op == 4:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 40)]
        else:
            del b[i:]
    return bytes(b)


def splice_args(splice):
    """A proxy's body path: `--splice` on, off or sockmap, or "linked": spliced
    by io_uring linked chains with the head in the chain (relay/linked.rs)."""
    if splice == "linked":
        return ["--splice", "on", "--uring-linked", "--uring-linked-head", "true"]
    return ["--splice", splice]


class Tally:
    """What the clients saw, shared by their threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.conns = 0
        self.replies = 0
        self.statuses = {}
        self.bad = []  # replies that did not start as HTTP, or 500s
        self.failed = []  # answers that were not their request's

    def add(self, first, reply):
        with self.lock:
            self.conns += 1
            if not reply:
                return
            self.replies += 1
            m = re.match(rb"HTTP/1\.[01] (\d{3})", reply)
            if not m:
                if len(self.bad) < 5:
                    self.bad.append((first[:80], reply[:80]))
                return
            code = int(m.group(1))
            self.statuses[code] = self.statuses.get(code, 0) + 1
            if code == 500 and len(self.bad) < 5:
                self.bad.append((first[:80], reply[:80]))

    def fail(self, what):
        """A check the client made of an answer failed."""
        with self.lock:
            if len(self.failed) < 5:
                self.failed.append(what)


def read_reply(s, secs, most, rng, reset_share):
    """Read what `s` sends for up to `secs` (or `most` bytes, or its close);
    after each piece, reset the connection with probability `reset_share`
    (a client that gives up mid-body)."""
    reply = b""
    end = time.monotonic() + secs
    while time.monotonic() < end and len(reply) < most:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if not d:
            break
        reply += d
        if rng.random() < reset_share:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            break
    return reply


def one_connection(port, host, rng, tally):
    kind = rng.randint(0, 9)
    reqs = []
    for _ in range(rng.randint(1, 4)):
        t = rng.choice(TEMPLATES).replace(b"{p}", rng.choice(PATHS)).replace(b"{h}", host)
        reqs.append(mutate(t, rng) if kind < 4 else t)
    data = b"".join(reqs)
    if kind == 4:
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000)))
    elif kind == 5:
        data = (b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nX-A: " + b"a" * rng.randint(1, 200_000) + b"\r\n\r\n")
    reply = b""
    s = socket.socket()
    s.settimeout(0.3)
    try:
        s.connect(("127.0.0.1", port))
        if kind == 6:
            step = rng.randint(1, 7)
            for i in range(0, len(data), step):
                s.send(data[i:i + step])
                if i < 60:
                    time.sleep(0.001)
        else:
            s.sendall(data)
        if rng.random() < 0.3:
            s.shutdown(socket.SHUT_WR)
        act = rng.randint(0, 3)
        if act == 0:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        reply = read_reply(s, 0.3, 1 << 20, rng, 0.2 if act == 1 else 0.0)
    except OSError:
        pass
    finally:
        s.close()
        # A reply to garbage sent past its end can be cut by the reset the
        # unread bytes cause; only whole first lines are judged.
        tally.add(data, reply if b"\r\n" in reply[:200] else b"")


OBJECTS = 40  # /obj/0 .. /obj/39 at the misbehaving origin


def object_body(k):
    """The one body /obj/K ever has (so anything cached can be checked)."""
    size = (k * 7919) % 150_001 if k % 5 else k * 3  # some empty and small ones
    return bytes((i * 31 + k) & 0xFF for i in range(size))


class BadOrigin:
    """An upstream that misbehaves on purpose: cut bodies (reset or FIN),
    overruns of its Content-Length, chunks that never end, garbage heads,
    1xx and 304 answers, slow starts. Every body it sends is a prefix (or,
    overrunning, an extension) of the path's one true body, so a response
    the proxy stored can be checked byte for byte afterwards. `/clean`
    always gets a plain 200."""

    def __init__(self, seed, overrun=True):
        self.overrun = overrun
        self.rng = random.Random(f"{seed}/origin")
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self):
        self.stop = True
        self.sock.close()

    def accept_loop(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                seed = self.rng.random()
            threading.Thread(target=self.serve, args=(conn, random.Random(seed)), daemon=True).start()

    def serve(self, conn, rng):
        conn.settimeout(2)
        buf = b""
        try:
            while not self.stop:
                while b"\r\n\r\n" not in buf:
                    d = conn.recv(65536)
                    if not d or len(buf) > 1 << 16:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                need = int(m.group(1)) if m else 0
                while len(buf) < need:
                    d = conn.recv(65536)
                    if not d:
                        return
                    buf += d
                buf = buf[need:]
                parts = head.split(b" ")
                target = parts[1] if len(parts) > 1 else b"/"
                if b"\r\nupgrade: websocket" in head.lower() and rng.random() < 0.5:
                    # Switch protocols: the proxy tunnels what follows (a
                    # few bytes of its own), then the origin closes.
                    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                 b"Connection: Upgrade\r\n\r\n" + bytes(rng.randint(0, 3000)))
                    return
                if not self.answer(conn, rng, target, head.startswith(b"HEAD ")):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def answer(self, conn, rng, target, head_only):
        """Send one response; False: the connection is done."""
        m = re.match(rb"/obj/(\d+)", target)
        if target.startswith(b"/clean") or not m:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: no-store\r\n\r\n"
                         + (b"" if head_only else b"clean"))
            return True
        k = int(m.group(1))
        body = object_body(k)
        n = len(body)
        # Even objects go stale within a second and may stand in for the
        # origin's errors (stale-if-error): revalidations, stale answers
        # and collapsed fills of the same key happen during the run; every
        # fourth is also revalidated in the background while it is served
        # stale (stale-while-revalidate), facing the same faults.
        cc = "max-age=1, stale-if-error=60" if k % 2 == 0 else "max-age=60"
        if k % 4 == 0:
            cc += ", stale-while-revalidate=30"
        fields = f"Cache-Control: {cc}\r\nETag: \"{k}\"\r\nLast-Modified: Tue, 01 Jan 2030 00:00:00 GMT\r\n"
        if rng.random() < 0.15:
            time.sleep(rng.uniform(0.01, 0.3))
        if rng.random() < 0.05:  # the origin fails
            conn.sendall(f"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nETag: \"{k}\"\r\n\r\n".encode()
                         + (b"" if head_only else b"down"))
            return True
        roll = rng.random()
        if head_only:
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{fields}\r\n".encode())
            return True
        if roll < 0.45:  # whole, with a length
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{fields}\r\n".encode() + body)
            return True
        if roll < 0.55:  # whole, chunked, in uneven chunks
            out = [f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{fields}\r\n".encode()]
            i = 0
            while i < n:
                step = rng.randint(1, 40_000)
                out.append(b"%x\r\n" % len(body[i:i + step]) + body[i:i + step] + b"\r\n")
                i += step
            out.append(b"0\r\n\r\n")
            conn.sendall(b"".join(out))
            return True
        if roll < 0.60:  # whole, delimited by the close
            conn.sendall(f"HTTP/1.1 200 OK\r\nConnection: close\r\n{fields}\r\n".encode() + body)
            return False
        if roll < 0.70:  # cut short: a FIN or a reset part way
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n + 10}\r\n{fields}\r\n".encode()
                         + body[:rng.randint(0, n)])
            if rng.random() < 0.5:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if roll < 0.75:  # chunked, never ended
            conn.sendall(f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{fields}\r\n".encode()
                         + b"%x\r\n" % n + body + b"\r\n")
            return False
        if roll < 0.80 and self.overrun:  # more bytes than its length: the excess is not the body
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{fields}\r\n".encode() + body
                         + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nETag: \"999\"\r\n\r\nbad" + bytes(rng.randint(0, 5000)))
            return False
        if roll < 0.80:  # (overruns off) whole, with a length
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{fields}\r\n".encode() + body)
            return True
        if roll < 0.88:  # a head mutated; not storable, since a mutation can
            # make another valid length (and the stored object a true prefix)
            h = mutate(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nCache-Control: no-store\r\n\r\n".encode(), rng)
            conn.sendall(h + body[:rng.randint(0, n)])
            return False
        if roll < 0.94:  # 1xx before the answer
            conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                         + f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n{fields}\r\n".encode() + body)
            return True
        conn.sendall(f"HTTP/1.1 304 Not Modified\r\n{fields}\r\n".encode())
        return True


# A head's framing field, on a line of its own: the reason phrase may say
# anything (BadOrigin's mutations once put "Transfer-Encoding: chunked" in
# a status line, and weft forwarded the phrase as it should).
CHUNKED = re.compile(rb"\r\ntransfer-encoding:[ \t]*(?:[^\r\n]*,[ \t]*)?chunked[ \t]*(?:\r\n|$)")


def answers(reply, asked):
    """Split a pipelined `reply` into the answers to `asked` ((k, head_only,
    ranged) per request, in order) and check each complete one that carries
    BadOrigin's ETag: it must name the object asked for, a 200's body must
    be the start of that object's true body, a 206's the bytes from 10 on.
    Another request's answer, or the tail of an overrun taken for one, is a
    mix-up. Stops at the first incomplete answer. Failures, as text."""
    bad = []
    i = 0
    for k, head_only, ranged in asked:
        while True:
            end = reply.find(b"\r\n\r\n", i)
            if end < 0:
                return bad
            head = reply[i:end]
            i = end + 4
            m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
            if not m:
                return bad + [f"/obj/{k}: not a response head: {head[:60]!r}"]
            status = int(m.group(1))
            if status == 101:
                return bad  # what follows is the new protocol's
            if not 100 <= status < 200:
                break
        lower = head.lower()
        cl = re.search(rb"\r\ncontent-length: *(\d+)", lower)
        if head_only or status in (204, 304):
            body = b""
        elif CHUNKED.search(lower):
            try:
                got = read_chunked(reply, i)
            except ValueError as e:
                return bad + [f"/obj/{k}: {e}"]
            if got is None:
                return bad
            body, i = got
        elif cl:
            n = int(cl.group(1))
            if len(reply) < i + n:
                return bad
            body = reply[i:i + n]
            i += n
        else:
            body = reply[i:]  # to the close: may be cut, so only a prefix is checked
            i = len(reply)
        # BadOrigin names the object in the ETag of every head it does not
        # mutate (mutated ones carry none: their bodies may begin with what
        # a stray blank line cut from the head).
        etag = re.search(rb'\r\netag: *"(\d+)"', lower)
        if not etag:
            continue
        if int(etag.group(1)) != k:
            bad.append(f"/obj/{k}: answered with /obj/{int(etag.group(1))}'s response ({status})")
            continue
        true = object_body(k)
        if status == 200 and not head_only and not true.startswith(body):
            bad.append(f"/obj/{k}: a 200 whose {len(body)}-byte body is not this object's")
        elif status == 206 and ranged and not true[10:].startswith(body):
            bad.append(f"/obj/{k}: a 206 whose {len(body)}-byte body is not this object's bytes from 10")
    return bad


def one_proxied(port, rng, tally):
    """A client of a proxy in front of BadOrigin: mostly well-formed GETs
    for its objects (some pipelined, some with ranges or validators), some
    aborted part way; every complete answer must be its request's."""
    reqs = []
    asked = []
    n = rng.randint(1, 3)
    for i in range(n):
        k = rng.randrange(OBJECTS)
        extra = rng.choice([b"", b"", b"Range: bytes=10-2000\r\n", b"If-None-Match: \"%d\"\r\n" % k,
                            b"Cache-Control: no-cache\r\n", b"Cache-Control: only-if-cached\r\n"])
        if i == n - 1 and rng.random() < 0.05:
            # A WebSocket upgrade, last (after a 101 the rest is a tunnel's).
            extra = b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
        method = b"HEAD" if rng.random() < 0.1 else b"GET"
        reqs.append(method + b" /obj/%d HTTP/1.1\r\nHost: o\r\n" % k + extra)
        asked.append((k, method == b"HEAD", extra.startswith(b"Range")))
    if rng.random() < 0.7:  # the proxy closes after the last answer: no wait for a timeout
        reqs[-1] += b"Connection: close\r\n"
    data = b"\r\n".join(reqs) + b"\r\n"
    reply = b""
    unanswered = False
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(data)
        began = time.monotonic()
        reply = read_reply(s, 0.5, 4 << 20, rng, 0.05)
        # Every request here is well formed: the proxy answers the first
        # (a 502 or 504 when the origin fails before its head), so a close
        # with nothing sent is a lost answer. (A slow origin ends the read
        # by its timeout instead, and is not counted.)
        unanswered = not reply and time.monotonic() - began < 0.4
    except OSError:
        pass
    finally:
        s.close()
        tally.add(data, reply if b"\r\n" in reply[:200] else b"")
        for b in answers(reply, asked):
            tally.fail(b)
        if unanswered:
            tally.fail(f"/obj/{asked[0][0]}: the proxy closed the connection without an answer")


def stored_objects_intact(port):
    """Ask the proxy for every object it may answer alone (only-if-cached):
    each body it has must be the object's whole, true body. Failures, as text."""
    bad = []
    for k in range(OBJECTS):
        try:
            with socket.create_connection(("127.0.0.1", port), 3) as s:
                s.settimeout(3)
                s.sendall(b"GET /obj/%d HTTP/1.1\r\nHost: o\r\nCache-Control: only-if-cached\r\n"
                          b"Connection: close\r\n\r\n" % k)
                out = b""
                while True:
                    d = s.recv(1 << 20)
                    if not d:
                        break
                    out += d
        except OSError as e:
            bad.append(f"/obj/{k}: {e}")
            continue
        head, _, body = out.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 504"):
            continue
        if not head.startswith(b"HTTP/1.1 200"):
            bad.append(f"/obj/{k}: only-if-cached got {head[:40]!r}")
            continue
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if CHUNKED.search(head.lower()):
            bad.append(f"/obj/{k}: a stored object sent chunked")
        elif body != object_body(k) or (m and int(m.group(1)) != len(body)):
            how = "a prefix of" if object_body(k).startswith(body) else "not"
            bad.append(f"/obj/{k}: stored body of {len(body)} bytes is {how} the object ({len(object_body(k))} bytes)")
    return bad


def wait_port(port, secs=10):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def hold(port, request, shut):
    """A client that sends `request`, half-closes if `shut`, and does not
    read: its receive window stays shut at 4 KiB."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(request)
        if shut:
            s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    return s


def was_cut(s, secs):
    """Read what `s` still gets: None if it ends (FIN or reset) within
    `secs`, having got less than the whole object; else what went wrong."""
    got = 0
    end = time.monotonic() + secs
    s.settimeout(0.5)
    try:
        while time.monotonic() < end:
            try:
                d = s.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                d = b""
            if not d:
                return None if got < HUGE else f"the whole {got}-byte answer went to a client that stopped reading"
            got += len(d)
        return f"a client that stopped reading was still held {secs} s after the run ({got} bytes since)"
    finally:
        s.close()


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def children(pid):
    """Child processes of `pid` (zombies included: one not reaped is a leak)."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                n += 1
    return n


def clean_status(port, target, host):
    try:
        with socket.create_connection(("127.0.0.1", port), 3) as s:
            s.settimeout(3)
            s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
            out = b""
            while len(out) < 64:
                d = s.recv(4096)
                if not d:
                    break
                out += d
    except OSError as e:
        return f"no answer ({e})"
    m = re.match(rb"HTTP/1\.1 (\d{3})", out)
    return int(m.group(1)) if m else f"not HTTP: {out[:40]!r}"


class Run:
    def __init__(self, args):
        self.args = args
        self.weft = os.path.abspath(args.weft)
        self.dir = tempfile.mkdtemp(prefix="weft-chaos-")
        self.root = os.path.join(self.dir, "root")
        os.makedirs(os.path.join(self.root, "dir"))
        with open(os.path.join(self.root, "a.txt"), "wb") as f:
            f.write(b"hello world\n" * 10)
        with open(os.path.join(self.root, "big.bin"), "wb") as f:
            f.write(random.Random(args.seed).randbytes(300_000))
        with open(os.path.join(self.root, "huge.bin"), "wb") as f:
            f.truncate(HUGE)  # sparse: the held clients' object
        with open(os.path.join(self.root, "dir", "b.html"), "wb") as f:
            f.write(b"<p>b</p>")
        with open(os.path.join(self.root, "index.html"), "wb") as f:
            f.write(b"<p>i</p>")
        self.logs = []
        self.failures = []

    def start(self, name, argv):
        """Start `weft ARGV --listen 127.0.0.1:0`: the process and the port
        it says it listens on (None if it does not say so within 10 s). Port
        0 and its answer, not a port picked free beforehand: another socket
        can take that before weft binds it."""
        log = os.path.join(self.dir, name + ".log")
        self.logs.append(log)
        with open(log, "wb") as f:
            p = subprocess.Popen([self.weft] + argv + ["--listen", "127.0.0.1:0"], stdout=f, stderr=subprocess.STDOUT)
        end = time.monotonic() + 10
        while time.monotonic() < end and p.poll() is None:
            with open(log, "rb") as f:
                m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", f.read())
            if m:
                return p, int(m.group(1))
            time.sleep(0.05)
        return p, None

    def target(self, name, procs, port, host, check=(b"/a.txt", b"127.0.0.1"), helpers=(),
               client_fn=None, after=None, huge=b"/huge.bin"):
        """Hammer `port` with `client_fn` (default: mutated requests), check
        `procs`, then `after(port)` (more failures, as text); `helpers`
        (upstreams) are stopped after. `huge`: the target of a HUGE object
        for the held clients (None: none)."""
        try:
            if port is None or not wait_port(port):
                self.failures.append(f"{name}: never listened")
                return
            time.sleep(0.2)
            before = {p.pid: fd_count(p.pid) for p in procs}
            kids = {p.pid: children(p.pid) for p in procs}
            held = []
            if huge:
                req = b"GET " + huge + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"
                held = [hold(port, req, i < 2) for i in range(HELD)]
            tally = Tally()
            deadline = time.monotonic() + self.args.seconds

            def client(i):
                rng = random.Random(f"{self.args.seed}/{name}/{i}")
                while time.monotonic() < deadline:
                    if client_fn:
                        client_fn(port, rng, tally)
                    else:
                        one_connection(port, host, rng, tally)

            threads = [threading.Thread(target=client, args=(i,)) for i in range(self.args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fails = []
            # Let timeouts close what the clients left half-open.
            settle = time.monotonic() + 3
            while True:
                grown = {p.pid: fd_count(p.pid) - before[p.pid] for p in procs}
                if all(g <= FD_SLACK for g in grown.values()) or time.monotonic() > settle:
                    break
                time.sleep(0.2)
            for s in held:
                f = was_cut(s, 5)
                if f:
                    fails.append(f)
            for p in procs:
                if p.poll() is not None:
                    fails.append(f"pid {p.pid} exited with {p.returncode}")
                elif grown[p.pid] > FD_SLACK:
                    fails.append(f"pid {p.pid} holds {grown[p.pid]} more descriptors than before")
                elif children(p.pid) > kids[p.pid]:
                    fails.append(f"pid {p.pid} has {children(p.pid)} child processes, {kids[p.pid]} before")
            status = clean_status(port, *check)
            if status != 200:
                fails.append(f"a clean GET {check[0].decode()} got {status}")
            for first, reply in tally.bad:
                fails.append(f"bad reply {reply!r} to {first!r}")
            fails += tally.failed
            if after:
                fails += after(port)
            codes = " ".join(f"{c}:{n}" for c, n in sorted(tally.statuses.items()))
            print(f"  {name}: {tally.conns} connections, {tally.replies} replies ({codes}); "
                  f"descriptors +{max(grown.values())}", flush=True)
            for f in fails:
                self.failures.append(f"{name}: {f}")
        finally:
            for p in list(procs) + list(helpers):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in list(procs) + list(helpers):
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    self.failures.append(f"{name}: pid {p.pid} did not stop within 10 s of SIGTERM")
                    p.kill()
                    p.wait()

    def targets(self):
        """(name, thunk) for every target, in order."""
        out = []
        for ev, archs in [("epoll", ["amped", "sped", "mt", "mp"]), ("tracked", ["amped"]), ("uring", ["amped"]),
                          ("epoll-once", ["amped"])]:
            for arch in archs:
                out.append((f"serve-{arch}-{ev}", lambda ev=ev, arch=arch: self.serve(ev, arch)))
        for mode in ["splice", "copy"]:
            out.append((f"serve-cgi-{mode}", lambda mode=mode: self.serve_cgi(mode)))
        for ev in ["epoll", "tracked", "uring"]:
            out.append((f"origin-{ev}", lambda ev=ev: self.origin(ev)))
            for splice in ["on", "sockmap"] + (["linked"] if ev == "uring" else []):
                out.append((f"proxy-reverse-{splice}-{ev}", lambda ev=ev, s=splice: self.proxy(ev, s, True)))
            out.append((f"proxy-forward-{ev}", lambda ev=ev: self.proxy(ev, "auto", False)))
        for ev, splice, disk in [("epoll", "on", False), ("epoll", "sockmap", False), ("uring", "off", False),
                                 ("tracked", "on", False), ("epoll", "on", True), ("epoll-once", "on", False),
                                 ("uring", "linked", False)]:
            name = f"proxy-bad-origin-{splice}-{ev}" + ("-disk" if disk else "")
            out.append((name, lambda ev=ev, s=splice, d=disk, n=name: self.proxy_bad_origin(n, ev, s, d)))
        for mode in ["relay", "handoff", "booster"]:
            for ev in ["epoll", "epoll-once", "uring"]:
                sfx = "" if ev == "epoll" else f"-{ev}"
                out.append((f"front-{mode}{sfx}", lambda mode=mode, ev=ev: self.front(mode, ev)))
        for mode in ["relay", "booster"]:
            out.append((f"front-{mode}-bad-origin", lambda mode=mode: self.front_bad_origin(mode)))
        return out

    def serve(self, ev, arch):
        extra = ["--object-cache", "16MiB"] if arch == "amped" else []
        name = f"serve-{arch}-{ev}"
        p, port = self.start(name, ["serve", self.root, "--event", ev, "--arch", arch, "--header-timeout", "1s",
                                     "--send-timeout", "1s"] + extra)
        self.target(name, [p], port, b"127.0.0.1")

    def serve_cgi(self, send):
        """A supervised pool of the test FastCGI application at /app, which
        crashes, hangs, overruns its length and sends bad heads on request."""
        app = os.path.join(os.path.dirname(self.weft), "weft-fcgi-app")
        if not os.access(app, os.X_OK):
            self.failures.append(f"serve-cgi-{send}: no {app} (cargo build --release builds it)")
            return
        name = f"serve-cgi-{send}"
        p, port = self.start(name, ["serve", self.root, "--cgi", f"/app={app}",
                              "--cgi-workers", "2", "--cgi-timeout", "1s", "--cgi-send", send,
                              "--header-timeout", "1s", "--send-timeout", "1s"])
        self.target(name, [p], port, b"127.0.0.1")

    def origin(self, ev):
        name = f"origin-{ev}"
        p, port = self.start(name, ["origin", "--event", ev, "--idle-timeout", "1s"])
        self.target(name, [p], port, b"127.0.0.1", check=(b"/size/100", b"127.0.0.1"),
                    huge=f"/size/{HUGE}".encode())

    def proxy(self, ev, splice, reverse):
        name = f"proxy-{'reverse-' + splice if reverse else 'forward'}-{ev}"
        o, op = self.start(name + "-origin", ["origin"])
        if op is None or not wait_port(op):
            self.failures.append(f"{name}: its origin never listened")
            o.kill()
            o.wait()
            return
        argv = ["proxy", "--event", ev, *splice_args(splice),
                "--connect-ports", str(op), "--header-timeout", "1s", "--send-timeout", "1s"]
        if reverse:
            argv += ["--upstream", f"127.0.0.1:{op}"]
        p, pp = self.start(name, argv)
        host = f"127.0.0.1:{op}".encode()
        check = (b"/size/1000", host) if reverse else (f"http://127.0.0.1:{op}/size/10".encode(), host)
        huge = f"/size/{HUGE}" if reverse else f"http://127.0.0.1:{op}/size/{HUGE}"
        self.target(name, [p], pp, host, check=check, helpers=[o], huge=huge.encode())

    def proxy_bad_origin(self, name, ev, splice, disk):
        """A caching reverse proxy in front of BadOrigin; afterwards every
        object it answers from its cache must be whole and true."""
        origin = BadOrigin(self.args.seed)
        argv = ["proxy", "--event", ev, *splice_args(splice), "--collapse", "--cache-status",
                "--upstream", f"127.0.0.1:{origin.port}", "--upstream-timeout", "2s", "--header-timeout", "1s"]
        if disk:
            argv += ["--cache-dir", os.path.join(self.dir, name + "-store")]
        p, pp = self.start(name, argv)
        try:
            self.target(name, [p], pp, b"o", check=(b"/clean", b"o"), client_fn=one_proxied,
                        after=stored_objects_intact, huge=None)
        finally:
            origin.close()

    def front_bad_origin(self, mode):
        """The front-end (relay, or the booster pipelining over two
        connections) before BadOrigin: every complete answer must be its
        request's (the booster's lanes are where a desync would show). The
        booster's origin does not overrun its lengths: on a pipelined
        connection, bytes past a response that parse as one are the next
        response as far as HTTP/1.1 can tell (docs/booster.md)."""
        origin = BadOrigin(self.args.seed, overrun=mode != "booster")
        name = f"front-{mode}-bad-origin"
        argv = ["front", "--mode", mode, "--header-timeout", "1s",
                "--upstream-timeout", "2s"]
        if mode == "booster":
            argv += ["--site", f"*=127.0.0.1:{origin.port}", "--boost", "always"]
        else:
            argv += ["--backend", f"127.0.0.1:{origin.port}"]
        p, fp = self.start(name, argv)
        try:
            self.target(name, [p], fp, b"o", check=(b"/clean", b"o"), client_fn=one_proxied, huge=None)
        finally:
            origin.close()

    def front(self, mode, ev="epoll"):
        sock = [os.path.join(self.dir, f"front-{mode}-handoff-{i}.sock") for i in range(2)]
        backs, ports = [], []
        for i in range(2):
            argv = ["serve", self.root, "--header-timeout", "1s", "--send-timeout", "1s"]
            if mode == "handoff":
                argv += ["--handoff-socket", sock[i]]
            b, port = self.start(f"front-{mode}-backend-{i}", argv)
            backs.append(b)
            ports.append(port)
        if None in ports:
            self.failures.append(f"front-{mode}: a back-end never listened")
            for b in backs:
                b.kill()
                b.wait()
            return
        argv = ["front", "--mode", mode, "--event", ev, "--header-timeout", "1s", "--send-timeout", "1s"]
        if mode == "booster":
            argv += ["--site", f"*=127.0.0.1:{ports[0]}", "--boost", "always"]
        else:
            argv += ["--backend", f"127.0.0.1:{ports[0]}", "--backend", f"127.0.0.1:{ports[1]}", "--policy", "lard"]
            if mode == "handoff":
                argv += ["--handoff", sock[0], "--handoff", sock[1]]
        sfx = "" if ev == "epoll" else f"-{ev}"
        f, fp = self.start(f"front-{mode}{sfx}", argv)
        self.target(f"front-{mode}{sfx}", [f] + backs, fp, b"127.0.0.1")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default="target/release/weft")
    ap.add_argument("--seconds", type=float, default=3.0, help="load per target")
    ap.add_argument("--clients", type=int, default=3, help="client threads per target")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--only", help="run the targets whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the targets and exit")
    args = ap.parse_args()
    if not (0 < args.seconds <= 600) or not (1 <= args.clients <= 64):
        ap.error("--seconds must be in (0, 600] and --clients in [1, 64]")
    if not os.access(args.weft, os.X_OK):
        ap.error(f"--weft: {args.weft} is not an executable")
    run = Run(args)
    todo = [(n, t) for n, t in run.targets() if not args.only or args.only in n]
    if args.list:
        print("\n".join(n for n, _ in todo))
        return 0
    print(f"chaos: {len(todo)} targets x {args.seconds:g} s, {args.clients} clients, seed {args.seed}", flush=True)
    t0 = time.monotonic()
    for _, thunk in todo:
        thunk()
    for log in run.logs:
        with open(log, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if "panicked" in line:
                    run.failures.append(f"{os.path.basename(log)}: {line[:200]}")
    print(f"chaos: {time.monotonic() - t0:.0f} s", flush=True)
    if run.failures:
        print("chaos: FAILED (logs in " + run.dir + ")")
        for f in run.failures:
            print("  " + f)
        return 1
    shutil.rmtree(run.dir, ignore_errors=True)
    print("chaos: every target alive, answering, and within its descriptors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
