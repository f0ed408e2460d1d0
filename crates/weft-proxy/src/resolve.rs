//! Host names resolved off the event loop, in the manner of Flash's helpers.
//!
//! getaddrinfo(3) blocks, so it runs on a few helper threads. A worker that
//! meets a name it has not resolved recently submits a job and parks the
//! request; the helper appends the answer to that worker's mailbox and signals
//! the worker's eventfd, which the worker's event loop watches like any
//! socket. Answers are cached per worker for `--dns-ttl` (the cache is the
//! worker's own, so a lookup on the hot path takes no lock); address literals
//! never reach the resolver at all. Failures are not cached.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weft_io::mailbox::Mailboxes;
use weft_io::Token;

struct Job {
    worker: usize,
    host: String,
    port: u16,
}

/// One resolved (or failed) name.
pub struct Answer {
    /// The name as submitted.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Addresses, or why there are none.
    pub result: Result<Vec<SocketAddr>, String>,
}

struct Inner {
    queue: Mutex<VecDeque<Job>>,
    cv: Condvar,
    stop: AtomicBool,
    mailboxes: Mailboxes<Answer>,
}

/// The helper threads and one mailbox per worker.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

impl Resolver {
    /// Start `threads` helpers serving `workers` mailboxes.
    pub fn start(workers: usize, threads: usize) -> io::Result<Resolver> {
        let mailboxes = Mailboxes::new(workers)?;
        let inner = Arc::new(Inner {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            mailboxes,
        });
        for i in 0..threads.max(1) {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("weft-resolve-{i}"))
                .spawn(move || helper(&inner))?;
        }
        Ok(Resolver { inner })
    }

    /// The eventfd worker `i` watches.
    pub fn waker(&self, worker: usize) -> RawFd {
        self.inner.mailboxes.waker(worker)
    }

    /// Ask for `host:port` on behalf of `worker`.
    pub fn submit(&self, worker: usize, host: &str, port: u16) {
        let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(Job {
            worker,
            host: host.to_string(),
            port,
        });
        drop(q);
        self.inner.cv.notify_one();
    }

    /// Move `worker`'s answers into `out` (and reset its eventfd).
    pub fn take_answers(&self, worker: usize, out: &mut Vec<Answer>) {
        self.inner.mailboxes.take(worker, out);
    }

    /// Stop the helpers (they finish the lookup in progress, if any).
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.cv.notify_all();
    }
}

fn helper(inner: &Inner) {
    loop {
        let job = {
            let mut q = inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if inner.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(j) = q.pop_front() {
                    break j;
                }
                q = inner.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let result = match (job.host.as_str(), job.port).to_socket_addrs() {
            Ok(it) => {
                let mut v: Vec<SocketAddr> = it.collect();
                // IPv4 first: loopback origins usually listen on 127.0.0.1 only.
                v.sort_by_key(|a| a.is_ipv6());
                v.dedup();
                if v.is_empty() {
                    Err(format!("no address for {}", job.host))
                } else {
                    Ok(v)
                }
            }
            Err(e) => Err(format!("cannot resolve {}: {e}", job.host)),
        };
        let answer = Answer {
            host: job.host,
            port: job.port,
            result,
        };
        inner.mailboxes.post(job.worker, answer);
    }
}

/// Addresses known for one port of a host, and when they expire.
type Resolved = (u16, Vec<SocketAddr>, Instant);

/// One worker's resolved names and the requests waiting for names. Keyed by
/// host (then port) so a lookup borrows the name instead of building a key.
pub struct DnsCache {
    ttl: Duration,
    entries: HashMap<Box<str>, Vec<Resolved>>,
    waiting: HashMap<Box<str>, Vec<(u16, Token)>>,
    count: usize,
}

/// What a lookup found.
pub enum Lookup<'a> {
    /// Known addresses.
    Ready(&'a [SocketAddr]),
    /// Submitted (or already in flight); the token is woken with the answer.
    Waiting,
}

impl DnsCache {
    /// Names are kept for `ttl`.
    pub fn new(ttl: Duration) -> DnsCache {
        DnsCache {
            ttl,
            entries: HashMap::new(),
            waiting: HashMap::new(),
            count: 0,
        }
    }

    /// Addresses for `host:port`, or park `token` until they are known.
    pub fn lookup<'a>(
        &'a mut self,
        host: &str,
        port: u16,
        now: Instant,
        token: Token,
        resolver: &Resolver,
        worker: usize,
    ) -> Lookup<'a> {
        let fresh = self
            .entries
            .get(host)
            .and_then(|v| v.iter().position(|(p, _, exp)| *p == port && *exp > now));
        if let Some(i) = fresh {
            return Lookup::Ready(&self.entries[host][i].1);
        }
        let list = match self.waiting.get_mut(host) {
            Some(l) => l,
            None => self.waiting.entry(Box::from(host)).or_default(),
        };
        if !list.iter().any(|(p, _)| *p == port) {
            resolver.submit(worker, host, port);
        }
        if !list.contains(&(port, token)) {
            list.push((port, token));
        }
        Lookup::Waiting
    }

    /// Record an answer; returns the tokens that waited for it and the error, if any.
    pub fn answer(&mut self, a: Answer, now: Instant) -> (Vec<Token>, Option<String>) {
        let mut waiters = Vec::new();
        if let Some(list) = self.waiting.get_mut(a.host.as_str()) {
            list.retain(|&(p, t)| {
                if p == a.port {
                    waiters.push(t);
                    false
                } else {
                    true
                }
            });
            if list.is_empty() {
                self.waiting.remove(a.host.as_str());
            }
        }
        match a.result {
            Ok(addrs) => {
                if self.count > 10_000 {
                    self.entries.clear();
                    self.count = 0;
                }
                let v = self.entries.entry(Box::from(a.host.as_str())).or_default();
                v.retain(|(p, _, _)| *p != a.port);
                v.push((a.port, addrs, now + self.ttl));
                self.count += 1;
                (waiters, None)
            }
            Err(e) => (waiters, Some(e)),
        }
    }
}

/// A host that is an address literal (IPv6 with or without brackets).
pub fn literal(host: &str, port: u16) -> Option<SocketAddr> {
    let h = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    h.parse::<std::net::IpAddr>().ok().map(|ip| SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_skip_the_resolver() {
        assert_eq!(literal("127.0.0.1", 80), Some(SocketAddr::from(([127, 0, 0, 1], 80))));
        assert_eq!(literal("[::1]", 8080).unwrap().port(), 8080);
        assert_eq!(literal("::1", 1).unwrap().ip().to_string(), "::1");
        assert!(literal("localhost", 80).is_none());
    }

    /// One resolver helper, an empty cache with a 60 s TTL, now, a waiter.
    fn one_helper() -> (Resolver, DnsCache, Instant, Token) {
        let cache = DnsCache::new(Duration::from_secs(60));
        (Resolver::start(1, 1).unwrap(), cache, Instant::now(), Token::new(1, 0))
    }

    #[test]
    fn lookups_are_answered_by_helpers_and_cached() {
        let (r, mut c, now, t) = one_helper();
        assert!(matches!(c.lookup("localhost", 80, now, t, &r, 0), Lookup::Waiting));
        // A second waiter for the same name does not submit again.
        assert!(matches!(
            c.lookup("localhost", 80, now, Token::new(2, 0), &r, 0),
            Lookup::Waiting
        ));
        let mut answers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while answers.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            r.take_answers(0, &mut answers);
        }
        assert_eq!(answers.len(), 1);
        let (waiters, err) = c.answer(answers.pop().unwrap(), now);
        assert_eq!(waiters.len(), 2);
        assert!(err.is_none(), "{err:?}");
        assert!(matches!(c.lookup("localhost", 80, now, t, &r, 0), Lookup::Ready(a) if !a.is_empty()));
        // Expired entries are looked up again.
        let later = now + Duration::from_secs(61);
        assert!(matches!(c.lookup("localhost", 80, later, t, &r, 0), Lookup::Waiting));
        r.stop();
    }

    #[test]
    fn failures_are_reported() {
        let (r, mut c, now, t) = one_helper();
        assert!(matches!(c.lookup("name.invalid", 80, now, t, &r, 0), Lookup::Waiting));
        let mut answers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while answers.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            r.take_answers(0, &mut answers);
        }
        let (waiters, err) = c.answer(answers.pop().unwrap(), now);
        assert_eq!(waiters, vec![t]);
        assert!(err.unwrap().contains("name.invalid"));
        r.stop();
    }
}
