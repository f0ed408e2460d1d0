// SPDX-License-Identifier: GPL-2.0 OR MIT
// weft's in-kernel forwarding (`weft proxy --splice sockmap`): an sk_skb
// stream-verdict program that redirects every byte a tunnel socket receives
// to the send side of its peer, so weft is not woken per chunk.
//
// `socks` holds the tunnel sockets; `peers` maps a socket's cookie
// (SO_COOKIE) to its peer's index in `socks`. A socket without a peer entry
// keeps its bytes (SK_PASS, read by weft as usual), and so does one whose
// redirect fails (SK_PASS with no redirect target set).
//
// Built by crates/weft-sockmap/build.rs:
//   clang -O2 -g -target bpf -c bpf/sockmap.bpf.c -o $OUT_DIR/sockmap.bpf.o
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

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u32);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, u32);
} peers SEC(".maps");

SEC("sk_skb/stream_verdict")
int weft_verdict(struct __sk_buff *skb)
{
	u64 cookie = bpf_get_socket_cookie(skb);
	u32 *peer = bpf_map_lookup_elem(&peers, &cookie);

	if (!peer)
		return SK_PASS;
	/* A peer not in `socks` yet (the join is two updates): keep the bytes
	 * here rather than drop them; weft sees them queued and splices. */
	bpf_sk_redirect_map(skb, &socks, *peer, 0);
	return SK_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
