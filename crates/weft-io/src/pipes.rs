//! Pipes for splice(2) and tee(2): a pool per worker with one cap for the
//! whole process, as HAProxy's `pipe.c` keeps them.
//!
//! A splice session borrows a pipe (two for KeepCopy or a tunnel) and gives it
//! back when its transfer ends. A pipe goes back to the pool only if it is
//! empty — otherwise stale bytes would reach the next session — and only up to
//! a number of idle pipes per worker; the others are closed. Every live pipe,
//! in use or idle, counts against the [`PipeBudget`]: when it is spent,
//! [`PipePool::get`] says so and the caller copies instead (and counts that).
//!
//! Pipes are enlarged with `F_SETPIPE_SZ` when created (a 1 MiB pipe moves a
//! large body in fewer system calls than the default 64 KiB:
//! `../shared/research/linux-mechanisms.md`). The kernel may refuse (pipes over
//! `/proc/sys/fs/pipe-max-size`, or over the per-user page budget when not
//! privileged); the pipe is then used at the size it has.

use crate::sys::{self, Fd};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The process-wide cap on live pipes, shared by every worker's pool.
#[derive(Debug)]
pub struct PipeBudget {
    live: AtomicUsize,
    max: usize,
    size: usize,
}

impl PipeBudget {
    /// At most `max` live pipes, each asked to hold `size` bytes.
    pub fn new(max: usize, size: usize) -> Arc<PipeBudget> {
        Arc::new(PipeBudget {
            live: AtomicUsize::new(0),
            max,
            size,
        })
    }

    /// Pipes alive now (in use or idle in a pool).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn take(&self) -> bool {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < self.max).then_some(n + 1))
            .is_ok()
    }

    fn release(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One pipe: read end, write end, capacity. Closing it returns its share of
/// the budget.
#[derive(Debug)]
pub struct Pipe {
    r: Fd,
    w: Fd,
    capacity: usize,
    budget: Arc<PipeBudget>,
}

impl Pipe {
    /// The read end.
    #[inline]
    pub fn read_fd(&self) -> RawFd {
        self.r.raw()
    }
    /// The write end.
    #[inline]
    pub fn write_fd(&self) -> RawFd {
        self.w.raw()
    }
    /// Bytes the pipe can hold (when filled in whole pages; see the slot
    /// caveat in `linux-mechanisms.md`).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.budget.release();
    }
}

/// Why no pipe was handed out.
#[derive(Debug)]
pub enum PipeError {
    /// The process-wide cap is reached.
    Exhausted,
    /// The kernel refused to create one.
    Io(io::Error),
}

/// One worker's idle pipes.
#[derive(Debug)]
pub struct PipePool {
    free: Vec<Pipe>,
    budget: Arc<PipeBudget>,
    keep_idle: usize,
}

impl PipePool {
    /// A pool drawing on `budget`, keeping at most `keep_idle` idle pipes.
    pub fn new(budget: Arc<PipeBudget>, keep_idle: usize) -> PipePool {
        PipePool {
            free: Vec::new(),
            budget,
            keep_idle,
        }
    }

    /// An empty pipe: an idle one, or a new one if the budget allows.
    pub fn get(&mut self) -> Result<Pipe, PipeError> {
        if let Some(p) = self.free.pop() {
            return Ok(p);
        }
        if !self.budget.take() {
            return Err(PipeError::Exhausted);
        }
        let (r, w) = match sys::pipe() {
            Ok(p) => p,
            Err(e) => {
                self.budget.release();
                return Err(PipeError::Io(e));
            }
        };
        let capacity = match sys::set_pipe_size(w.raw(), self.budget.size) {
            Ok(n) => n,
            Err(_) => sys::pipe_capacity(w.raw()).unwrap_or(4096),
        };
        Ok(Pipe {
            r,
            w,
            capacity,
            budget: self.budget.clone(),
        })
    }

    /// Give a pipe back. `bytes_left`: what the session knows is still in it;
    /// a pipe that is not empty is closed instead of pooled.
    pub fn put(&mut self, p: Pipe, bytes_left: usize) {
        if bytes_left == 0 && self.free.len() < self.keep_idle {
            self.free.push(p);
        }
    }

    /// Idle pipes held now.
    pub fn idle(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_caps_live_pipes_and_pool_reuses_empty_ones() {
        let budget = PipeBudget::new(2, 1 << 20);
        let mut pool = PipePool::new(budget.clone(), 4);
        let a = pool.get().unwrap();
        assert!(a.capacity() >= 4096);
        let b = pool.get().unwrap();
        assert!(matches!(pool.get(), Err(PipeError::Exhausted)));
        assert_eq!(budget.live(), 2);
        let a_fd = a.read_fd();
        pool.put(a, 0);
        assert_eq!(pool.idle(), 1);
        let again = pool.get().unwrap();
        assert_eq!(again.read_fd(), a_fd, "the idle pipe is reused");
        // A pipe with bytes in it is closed, and its budget freed.
        pool.put(b, 10);
        assert_eq!(pool.idle(), 0);
        assert_eq!(budget.live(), 1);
        drop(again);
        assert_eq!(budget.live(), 0);
    }

    #[test]
    fn splice_and_tee_through_pooled_pipes() {
        let budget = PipeBudget::new(8, 1 << 20);
        let mut pool = PipePool::new(budget, 4);
        let intake = pool.get().unwrap();
        let out = pool.get().unwrap();
        sys::write(intake.write_fd(), b"payload").unwrap();
        assert_eq!(sys::tee(intake.read_fd(), out.write_fd(), 7).unwrap(), 7);
        let mut a = [0u8; 7];
        let mut b = [0u8; 7];
        assert_eq!(sys::read(intake.read_fd(), &mut a).unwrap(), 7);
        assert_eq!(sys::read(out.read_fd(), &mut b).unwrap(), 7);
        assert_eq!(&a, b"payload");
        assert_eq!(a, b);
    }
}
