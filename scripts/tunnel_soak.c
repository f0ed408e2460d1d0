// CONNECT tunnels through a proxy, every byte checked (scripts/tunnel_soak.py).
//
//   tunnel_soak PROXY_PORT UPSTREAM_PORT TUNNELS CONCURRENCY FIRST_ID
//
// Listens on 127.0.0.1:UPSTREAM_PORT as an echo upstream (a thread per
// connection), then runs TUNNELS tunnels, CONCURRENCY at a time: CONNECT to
// the upstream through the proxy, 1 MiB written (then a half-close) while
// the echo is read back to its end. Each tunnel's bytes are its own: every
// 4 KiB block starts with (tunnel id, block number), so a byte that arrives
// twice, out of place or from another tunnel is named. Both the echo (bytes
// through the proxy one way) and the client (both ways) compare.
//
// Exit 0 when every tunnel ended either exact or with a reset (a proxy that
// found a fault and said so by resetting); 2 when a stream ended cleanly
// with other bytes than were sent (a fault passed off as a good stream).
// Prints one line per fault and a summary line "tunnels N exact N reset N
// corrupt N".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MIB (1 << 20)
#define BLOCK 4096

static int upstream_port, proxy_port, left, next_id, exact, resets, corrupt;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char base[MIB];

// Tunnel `id`'s bytes: random ones, each block headed by (id, block).
static void fill(char *d, uint32_t id) {
  memcpy(d, base, MIB);
  for (uint32_t b = 0; b < MIB / BLOCK; b++) {
    uint32_t h[2] = {id, b};
    memcpy(d + (size_t)b * BLOCK, h, sizeof h);
  }
}

// Say where `got` (stream bytes from offset `off`) first differs from
// `want`, and what the next block header in it names.
static void report(const char *who, uint32_t id, const char *got, size_t n, size_t off, const char *want) {
  size_t i = 0;
  while (i < n && off + i < MIB && got[i] == want[off + i]) i++;
  fprintf(stderr, "%s, tunnel %u: first wrong byte at stream offset %zu", who, id, off + i);
  for (size_t p = i; p + 8 <= n; p++) {
    uint32_t h[2];
    memcpy(h, got + p, sizeof h);
    if (h[1] < MIB / BLOCK && h[0] >= 1 && h[0] < (uint32_t)next_id + 1000000) {
      fprintf(stderr, "; the next header, at %zu, is tunnel %u block %u (that offset holds block %zu)", off + p, h[0],
              h[1], (off + p) / BLOCK);
      break;
    }
  }
  fprintf(stderr, "\n");
}

static void *echo(void *arg) {
  int s = (int)(intptr_t)arg;
  char *buf = malloc(256 * 1024), *want = malloc(MIB);
  size_t off = 0;
  uint32_t id = 0;
  int said = 0;
  for (;;) {
    ssize_t n = recv(s, buf, 256 * 1024, 0);
    if (n <= 0) break;
    if (off == 0 && n >= 4) {
      memcpy(&id, buf, 4);
      fill(want, id);
    }
    if (!said && (off + (size_t)n > MIB || memcmp(buf, want + off, (size_t)n))) {
      report("echo (client to upstream)", id, buf, (size_t)n, off, want);
      said = 1;
    }
    off += (size_t)n;
    for (ssize_t o = 0; o < n;) {
      ssize_t w = send(s, buf + o, (size_t)(n - o), MSG_NOSIGNAL);
      if (w <= 0) goto out;
      o += w;
    }
  }
out:
  shutdown(s, SHUT_WR);
  close(s);
  free(buf);
  free(want);
  return 0;
}

static void *acceptor(void *arg) {
  int l = (int)(intptr_t)arg;
  for (;;) {
    int s = accept(l, 0, 0);
    if (s < 0) continue;
    pthread_t t;
    pthread_create(&t, 0, echo, (void *)(intptr_t)s);
    pthread_detach(t);
  }
  return 0;
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(0x7f000001);
  return a;
}

struct writer {
  int s;
  const char *d;
};

static void *write_all(void *arg) {
  struct writer *w = arg;
  for (size_t o = 0; o < MIB;) {
    ssize_t n = send(w->s, w->d + o, MIB - o, MSG_NOSIGNAL);
    if (n <= 0) return 0;  // reset: the reader sees it too
    o += (size_t)n;
  }
  shutdown(w->s, SHUT_WR);
  return 0;
}

// One tunnel: 0 exact, 1 reset, 2 corrupt.
static int tunnel(uint32_t id, char *d, char *buf) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = loopback(proxy_port);
  if (connect(s, (struct sockaddr *)&a, sizeof a)) {
    perror("connect to the proxy");
    exit(1);
  }
  char req[128];
  int n = snprintf(req, sizeof req, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: soak\r\n\r\n", upstream_port);
  if (send(s, req, (size_t)n, 0) != n) exit(1);
  char tail[4] = {0}, c;
  while (recv(s, &c, 1, 0) == 1) {  // the proxy's 200 head, to its end
    memmove(tail, tail + 1, 3);
    tail[3] = c;
    if (!memcmp(tail, "\r\n\r\n", 4)) break;
  }
  fill(d, id);
  struct writer w = {s, d};
  pthread_t t;
  pthread_create(&t, 0, write_all, &w);
  size_t got = 0;
  ssize_t r;
  // Room for more than was sent, to see a stream that grew.
  while ((r = recv(s, buf + got, got < MIB + BLOCK ? MIB + BLOCK - got : 1, 0)) > 0) got += (size_t)r;
  int reset = r < 0;
  pthread_join(t, 0);
  close(s);
  if (reset) {
    fprintf(stderr, "client, tunnel %u: reset after %zu bytes\n", id, got);
    return 1;
  }
  if (got != MIB || memcmp(buf, d, MIB)) {
    report("client (both ways)", id, buf, got, 0, d);
    fprintf(stderr, "client, tunnel %u: a clean end after %zu bytes of %d\n", id, got, MIB);
    return 2;
  }
  return 0;
}

static void *worker(void *arg) {
  (void)arg;
  char *d = malloc(MIB), *buf = malloc(2 * MIB);
  for (;;) {
    pthread_mutex_lock(&mu);
    if (left == 0) {
      pthread_mutex_unlock(&mu);
      break;
    }
    left--;
    uint32_t id = (uint32_t)next_id++;
    pthread_mutex_unlock(&mu);
    int outcome = tunnel(id, d, buf);
    pthread_mutex_lock(&mu);
    *(outcome == 0 ? &exact : outcome == 1 ? &resets : &corrupt) += 1;
    pthread_mutex_unlock(&mu);
  }
  free(d);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: tunnel_soak PROXY_PORT UPSTREAM_PORT TUNNELS CONCURRENCY FIRST_ID\n");
    return 1;
  }
  proxy_port = atoi(argv[1]);
  upstream_port = atoi(argv[2]);
  left = atoi(argv[3]);
  int conc = atoi(argv[4]);
  next_id = atoi(argv[5]);
  if (conc < 1 || conc > 64 || left < 0 || next_id < 1) {
    fprintf(stderr, "tunnel_soak: CONCURRENCY is 1 to 64, TUNNELS at least 0, FIRST_ID at least 1\n");
    return 1;
  }
  uint64_t x = 88172645463325252ull;  // xorshift64: the same bytes every run
  for (size_t i = 0; i < MIB; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    base[i] = (char)x;
  }
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = loopback(upstream_port);
  if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 512)) {
    perror("the echo upstream's port");
    return 1;
  }
  pthread_t at, ts[64];
  pthread_create(&at, 0, acceptor, (void *)(intptr_t)l);
  for (int i = 0; i < conc; i++) pthread_create(&ts[i], 0, worker, 0);
  for (int i = 0; i < conc; i++) pthread_join(ts[i], 0);
  printf("tunnels %d exact %d reset %d corrupt %d\n", exact + resets + corrupt, exact, resets, corrupt);
  return corrupt ? 2 : 0;
}
