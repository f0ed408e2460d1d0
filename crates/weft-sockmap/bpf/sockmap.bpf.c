// SPDX-License-Identifier: GPL-2.0 OR MIT
// weft's in-kernel forwarding (`weft proxy --splice sockmap`): an sk_skb
// stream-verdict program, attached to `socks`, that redirects every byte a
// tunnel socket receives to the send side of its peer. The kernel queues a
// redirected skb on the destination's psock and a workqueue item sends it.
//
// Keys are socket cookies (SO_COOKIE). `peers[source]` names the
// destination: its index in `targets` (a sockmap without programs, which
// every tunnel socket joins before it joins `socks`, so a redirect never
// finds its target missing), its cookie, and the bytes redirected so far
// from the source (weft's counters and idle timer read them).
//
// End of stream. The psock replaces sk_data_ready (and sk_write_space), not
// sk_state_change, so weft sees a source's FIN as EPOLLRDHUP on the source.
// It may half-close the destination only once the psock worker has sent
// every redirected byte, and nothing in the kernel tells user space that.
// While the other direction is open weft polls TCP_INFO for it (the marker
// below breaks the destination's psock, and a broken psock drops what its
// own verdict passes up). Once both have ended, weft sends a marker: an 8-byte datagram (the source's cookie) to its
// own UDP socket, which is in `socks` too. The program cuts it to zero bytes
// and redirects it to the destination like the source's bytes: it joins the
// same psock queue behind them. When the worker reaches it, "sending" zero
// bytes counts as a broken pipe (sk_psock_backlog: ret 0 -> EPIPE), so the
// destination gets sk_err = EPIPE and wakes weft with EPOLLERR, whatever
// interest it is registered with. That error, read with SO_ERROR, means:
// everything before the marker has been sent. (The psock then refuses
// further redirects to that socket; none can come, its source has ended.)
// weft checks at load time that the kernel behaves so (Forwarder::load).
//
// A bound on what a tunnel may pin. A redirected skb is charged to no
// socket while it waits on the destination's psock (see below), so a client
// that stops reading would let the upstream fill kernel memory without end.
// weft gives each tunnel source a grant (`grants`): redirect while `bytes`
// stays under `budget`. Past it the verdict passes the source's skbs up
// instead (`passing`, sticky): they wait on the source's psock, charged to
// its receive buffer, so the source's window closes, and the program posts
// {token, source cookie} to the `done` ring. weft waits until the
// destination has been written every redirected byte (TCP_INFO), reads the
// passed bytes (read() takes them from the psock), writes them
// itself, and grants again: a new budget and `resume_at`, the passed bytes
// it has taken. The verdict redirects again only when `passed` equals
// `resume_at`, so no skb overtakes one weft has not yet taken; if more were
// passed meanwhile it goes on passing, and weft (which checks `passed` after
// a TCP_INFO on the source, which waits out a verdict in progress) reads on.
// So that a destination that keeps up never sees a takeover, the grant also
// names `notify_at`: when `bytes` crosses it the program posts the same
// note, and weft, finding the destination has sent most of what was
// redirected to it, raises the budget before it is reached.
// A source without a grant is never bounded (the self-tests, bodies' markers).
//
// Stamps. This kernel's code allows passed skbs to be delivered out of order
// (an unlocked empty-queue test in sk_psock_verdict_apply against the psock
// worker, which takes an skb off the queue before it delivers it; not seen
// in the tests, whose wrong streams were weft's own hand-back), and
// redirecting them to the source's own receive side instead, which keeps the
// order, moves tcp copied_seq twice and hangs the socket (docs/proxy.md, "Why
// the takeover corrupted"). So each passed skb carries its place: the verdict
// numbers it (`stamped`, the skb's sequence number), records {stream offset,
// length, its first bytes} in `stamps` under {cookie, seq % STAMP_SLOTS}, and
// overwrites those first bytes (up to four) with the sequence number, little
// endian. The skb's length is unchanged, so tcp copied_seq stays right. weft
// reads the passed bytes skb by skb: it names each from its first bytes,
// puts the recorded bytes back, and writes the skbs in stream order
// (weft-sockmap's stamp.rs). An skb that cannot be stamped (its slot still
// holds an skb weft has not read, the map is full, a helper failed) is passed
// as it is and sets `broken`: weft, which reads `peers` after the bytes,
// ends the tunnel with a reset rather than guess.
//
// Response bodies (a non-cacheable response of known length). The upstream
// socket joins `bodies`, whose verdict (`weft_body_verdict`) redirects each
// skb to the client while `spans[upstream]` says body bytes remain. When
// the last byte has been redirected it posts the span's token to the `done`
// ring buffer, which wakes weft (it polls the ring). weft takes the upstream
// out of `bodies`, queues the marker (above) behind the last skb, and takes
// the client back at its EPIPE. Bytes past the body (an upstream that broke
// its framing) are dropped and counted in `excess`; weft then closes that
// connection. An skb that holds the body's end and bytes past it cannot be
// cut here (bpf_skb_change_tail fails on such skbs), so it is passed up
// whole (`passed`: its body bytes), which wakes weft (EPOLLIN): weft reads
// the body's tail from it and writes it after the marker. A bare FIN is
// dropped as for tunnels: weft sees it on the socket.
//
// Like a tunnel's, a body socket has a verdict and no stream parser: the
// kernel hands the verdict whole skbs (tcp_read_skb), so weft drains the
// socket to EAGAIN before the join (a half-read skb would be redirected
// whole). A redirected skb is charged to no socket while it waits on the
// client's psock (tcp_read_skb orphans it and tcp copied_seq moves on), so
// nothing closes the upstream's receive window for a slow client: weft
// bounds what that can pin by giving the kernel only bodies up to a size.
// It cannot take a socket back while its bytes still flow: an skb whose
// data_ready began before the psock left is dropped (sk_psock_verdict_recv
// finds no psock), so each body stays in the map to its end. (A stream
// parser would cut messages anywhere, but its skb clones are uncharged too,
// and bytes it passes up break tcp copied_seq on this kernel.)
//
// Built by crates/weft-sockmap/build.rs:
//   clang -O2 -g -target bpf -mcpu=v3 -c bpf/sockmap.bpf.c
#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

typedef unsigned int u32;
typedef unsigned long long u64;

static u64 (*bpf_get_socket_cookie)(void *ctx) = (void *)BPF_FUNC_get_socket_cookie;
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_sk_redirect_map)(struct __sk_buff *skb, void *map, u32 key, u64 flags) =
	(void *)BPF_FUNC_sk_redirect_map;
static long (*bpf_skb_change_tail)(void *skb, u32 len, u64 flags) = (void *)BPF_FUNC_skb_change_tail;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) =
	(void *)BPF_FUNC_ringbuf_output;
static long (*bpf_skb_load_bytes)(const void *skb, u32 offset, void *to, u32 len) =
	(void *)BPF_FUNC_skb_load_bytes;
static long (*bpf_skb_store_bytes)(void *skb, u32 offset, const void *from, u32 len, u64 flags) =
	(void *)BPF_FUNC_skb_store_bytes;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) =
	(void *)BPF_FUNC_map_update_elem;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_delete_elem;

struct peer {
	u32 index;
	u32 passing; /* 1 while the source's skbs are passed up (see above) */
	u64 cookie;
	/* Bytes redirected from this source, for weft's counters (here, not
	 * in a map of their own, so a join and a leave update one map, each
	 * in one batched call, and the verdict looks up one entry per skb). */
	u64 bytes;
	u64 passed; /* bytes passed up to weft past the grant's budget */
	u64 token;  /* weft's name for the tunnel, posted to `done` */
	u64 stamped; /* passed skbs stamped: the next one's sequence number */
	u64 tiny;    /* of those, shorter than a whole stamp (four bytes) */
	u64 broken;  /* a passed skb went up without its stamp */
};

/* Slots per source in `stamps`: at most this many passed skbs weft has not
 * read yet (a takeover clamps the source's window to 64 KiB, so a few). */
#define STAMP_SLOTS 65536

struct stamp_key {
	u64 cookie;
	u64 slot; /* seq % STAMP_SLOTS */
};

/* What a stamp covers; weft deletes it once it has read the skb. */
struct stamp {
	u64 offset; /* the skb's first byte among the source's passed bytes */
	u32 seq;
	u32 len;
	u32 first; /* the bytes the stamp overwrote (the first min(len, 4)) */
	u32 pad;
};

/* weft's grant for a tunnel source, by its cookie (see above). Written only
 * by weft; a missing entry means no bound. */
struct grant {
	u64 budget;    /* redirect while `bytes` is under this */
	u64 resume_at; /* passed bytes weft has taken and written */
	u64 notify_at; /* post a note when `bytes` crosses this */
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u32);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u32);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, struct peer);
} peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, u32);
} injectors SEC(".maps");

/* Written only from user space, so not preallocated: a worker that carries
 * few tunnels does not hold 65,536 elements for them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u64);
	__type(value, struct grant);
} grants SEC(".maps");

/* Passed skbs weft has not read yet, by source and slot (see above). Written
 * by the verdict, deleted by weft. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stamp_key);
	__type(value, struct stamp);
} stamps SEC(".maps");

/* The upstream socket of each response body forwarded in the kernel. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u32);
} bodies SEC(".maps");

/* One body's progress, keyed by its upstream socket's cookie. Written by
 * weft before the socket joins `bodies`, then only by the verdict (one
 * socket's skbs are judged one at a time, under its lock). */
struct span {
	u64 redirect; /* body bytes still to redirect to the client */
	u64 token;    /* weft's name for the body, posted to `done` */
	u64 index;    /* the client's index in `targets` */
	u64 excess;   /* bytes past the body, dropped */
	u64 passed;   /* body bytes at the head of the skb passed up to weft */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, struct span);
} spans SEC(".maps");

/* Bodies whose last byte was redirected, and tunnel sources that began
 * passing up: {token, socket cookie}. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} done SEC(".maps");

/* A marker from one of weft's UDP sockets (`injectors`): its last 8 bytes
 * are the source's cookie; cut it to nothing and queue it for the
 * destination, behind the source's bytes. */
static int marker(struct __sk_buff *skb)
{
	struct peer *peer;
	u64 source;

	if (skb->len < sizeof(source) ||
	    bpf_skb_load_bytes(skb, skb->len - sizeof(source), &source, sizeof(source)))
		return SK_DROP;
	peer = bpf_map_lookup_elem(&peers, &source);
	if (!peer)
		return SK_DROP;
	if (bpf_skb_change_tail(skb, 0, 0))
		return SK_DROP;
	if (bpf_sk_redirect_map(skb, &targets, peer->index, 0) != SK_PASS)
		return SK_DROP;
	return SK_PASS;
}

/* Wake weft about this tunnel source. A full ring loses the wake-up:
 * weft's idle timer then finds the passed bytes. */
static void notify(struct peer *peer, u64 cookie)
{
	u64 note[2];

	note[0] = peer->token;
	note[1] = cookie;
	bpf_ringbuf_output(&done, note, sizeof(note), 0);
}

/* Number the skb and record its place (see "Stamps" above); 0 when done.
 * The verifier wants constant lengths, hence one branch per short length. */
static int stamp(struct __sk_buff *skb, struct peer *peer, u64 cookie, u64 len)
{
	struct stamp_key key;
	struct stamp s = {};
	u32 seq = peer->stamped;
	long err;

	key.cookie = cookie;
	key.slot = seq % STAMP_SLOTS;
	s.offset = peer->passed;
	s.seq = seq;
	s.len = len;
	if (len >= 4)
		err = bpf_skb_load_bytes(skb, 0, &s.first, 4);
	else if (len == 3)
		err = bpf_skb_load_bytes(skb, 0, &s.first, 3);
	else if (len == 2)
		err = bpf_skb_load_bytes(skb, 0, &s.first, 2);
	else
		err = bpf_skb_load_bytes(skb, 0, &s.first, 1);
	/* BPF_NOEXIST: a slot still holding an unread skb refuses this one. */
	if (err || bpf_map_update_elem(&stamps, &key, &s, BPF_NOEXIST))
		return -1;
	if (len >= 4)
		err = bpf_skb_store_bytes(skb, 0, &seq, 4, 0);
	else if (len == 3)
		err = bpf_skb_store_bytes(skb, 0, &seq, 3, 0);
	else if (len == 2)
		err = bpf_skb_store_bytes(skb, 0, &seq, 2, 0);
	else
		err = bpf_skb_store_bytes(skb, 0, &seq, 1, 0);
	if (err) {
		bpf_map_delete_elem(&stamps, &key);
		return -1;
	}
	peer->stamped += 1;
	if (len < 4)
		peer->tiny += 1;
	return 0;
}

/* Pass the skb up to weft instead of redirecting it (past the grant),
 * stamped. */
static int pass_up(struct __sk_buff *skb, struct peer *peer, u64 cookie, u64 len, int wake)
{
	if (stamp(skb, peer, cookie, len))
		peer->broken = 1;
	peer->passed += len;
	if (wake)
		notify(peer, cookie);
	return SK_PASS;
}

SEC("sk_skb/stream_verdict")
int weft_verdict(struct __sk_buff *skb)
{
	u64 cookie = bpf_get_socket_cookie(skb);
	struct peer *peer = bpf_map_lookup_elem(&peers, &cookie);
	struct grant *grant;

	if (!peer) {
		if (bpf_map_lookup_elem(&injectors, &cookie))
			return marker(skb);
		return SK_PASS;
	}
	/* A FIN alone arrives as an empty skb: redirected, the peer's psock
	 * would fail to "send" it and break its pipe (EPIPE). weft learns the
	 * end of stream from the socket itself (EPOLLRDHUP). */
	if (skb->len == 0)
		return SK_DROP;
	grant = bpf_map_lookup_elem(&grants, &cookie);
	if (grant) {
		if (peer->passing) {
			/* Redirect again only behind every passed byte. */
			if (grant->resume_at != peer->passed || peer->bytes >= grant->budget)
				return pass_up(skb, peer, cookie, skb->len, 0);
			peer->passing = 0;
		} else if (peer->bytes >= grant->budget) {
			peer->passing = 1;
			return pass_up(skb, peer, cookie, skb->len, 1);
		}
	}
	/* On failure no target is set: SK_PASS keeps the bytes here (for a
	 * bounded source, as a passed skb: weft reads the passed ones by their
	 * stamps). */
	if (bpf_sk_redirect_map(skb, &targets, peer->index, 0) == SK_PASS) {
		u64 before = peer->bytes;

		__sync_fetch_and_add(&peer->bytes, skb->len);
		if (grant && before < grant->notify_at && before + skb->len >= grant->notify_at)
			notify(peer, cookie);
	} else if (grant) {
		peer->passing = 1;
		return pass_up(skb, peer, cookie, skb->len, 1);
	}
	return SK_PASS;
}

SEC("sk_skb/stream_verdict")
int weft_body_verdict(struct __sk_buff *skb)
{
	u64 cookie = bpf_get_socket_cookie(skb);
	struct span *span = bpf_map_lookup_elem(&spans, &cookie);
	u64 len = skb->len;
	u64 note[2];

	if (!span)
		return SK_PASS;
	if (!len)
		return SK_DROP;
	if (!span->redirect) {
		span->excess += len;
		return SK_DROP;
	}
	if (len > span->redirect) {
		span->excess += len - span->redirect;
		span->passed = span->redirect;
		span->redirect = 0;
		return SK_PASS;
	}
	/* On failure no target is set: the body is short, and weft's idle
	 * timer closes the client. */
	if (bpf_sk_redirect_map(skb, &targets, span->index, 0) != SK_PASS)
		return SK_DROP;
	span->redirect -= len;
	if (!span->redirect) {
		note[0] = span->token;
		note[1] = cookie;
		/* A full ring loses the wake-up: weft's idle timer then finds
		 * the span done. */
		bpf_ringbuf_output(&done, note, sizeof(note), 0);
	}
	return SK_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
