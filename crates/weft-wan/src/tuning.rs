//! How the router thread waits and runs: spinning before a near departure
//! instead of sleeping, real-time priority, a CPU of its own, locked memory.
//!
//! What each buys (measured in docs/results.md, "weft wan: the router's own
//! added delay"):
//! - spin: a sleep and its timer interrupt cost tens of µs in a VM (the
//!   timer programming exits to the hypervisor), and a wake-up comes 50–70
//!   µs late on a loaded one; the router sleeps until `spin` before a
//!   departure and then polls the devices without a timeout until it. Spinning
//!   is capped at [`SPIN_SHARE`] of every [`WINDOW`] so that a real-time
//!   router never meets the kernel's RT throttling (95 % per second, then a
//!   50 ms stall) and a busy machine keeps its cores.
//! - realtime (SCHED_FIFO): wake-ups and spins are not queued behind other
//!   work on a shared machine.
//! - cpu (affinity): no migration between cores (cold caches, a wake-up IPI).
//! - mlock: no page fault on a packet buffer or heap growth mid-run.

use std::time::Duration;

/// Length of the window the spin budget is counted in.
pub const WINDOW: u64 = 10_000_000;
/// Share of each window the router may be busy (working or spinning) and still spin.
pub const SPIN_SHARE: f64 = 0.8;

/// The router thread's settings.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Spin (poll without sleeping) when the next departure is this close; zero: never.
    pub spin: Duration,
    /// SCHED_FIFO priority (1..=99); None: normal scheduling.
    pub realtime: Option<i32>,
    /// Pin the router thread to this CPU.
    pub cpu: Option<usize>,
    /// mlockall(2) the process.
    pub mlock: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            spin: Duration::from_micros(200),
            realtime: Some(10),
            cpu: None,
            mlock: false,
        }
    }
}

impl Tuning {
    /// Apply the thread settings to the calling thread; what failed, as notes.
    pub fn apply(&self) -> Vec<String> {
        use weft_io::sys::tun;
        let mut notes = Vec::new();
        if let Some(p) = self.realtime {
            if let Err(e) = tun::set_realtime(p) {
                notes.push(format!("router at normal priority ({e})"));
            }
        }
        if let Some(c) = self.cpu {
            if let Err(e) = tun::pin_to_cpu(c) {
                notes.push(format!("router not pinned to cpu {c} ({e})"));
            }
        }
        if self.mlock {
            if let Err(e) = tun::lock_memory() {
                notes.push(format!("memory not locked ({e})"));
            }
        }
        notes
    }
}

/// The spin budget: how much of the current window the router was busy.
#[derive(Debug, Default)]
pub struct Budget {
    start: u64,
    asleep: u64,
}

impl Budget {
    /// May the router spin at `now` (ns)?
    pub fn may_spin(&mut self, now: u64) -> bool {
        if now.saturating_sub(self.start) >= WINDOW {
            self.start = now;
            self.asleep = 0;
        }
        let busy = now.saturating_sub(self.start).saturating_sub(self.asleep);
        (busy as f64) < SPIN_SHARE * WINDOW as f64
    }

    /// Count `ns` asleep.
    pub fn slept(&mut self, ns: u64) {
        self.asleep += ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_stops_spinning_once_the_window_is_busy() {
        let mut b = Budget::default();
        assert!(b.may_spin(1_000));
        assert!(b.may_spin(7_000_000));
        assert!(!b.may_spin(8_500_000));
        b.slept(1_000_000);
        assert!(b.may_spin(8_500_000));
        // A new window starts afresh.
        assert!(b.may_spin(WINDOW + 10));
    }
}
