//! The cost model of §3.2.1, in nanoseconds of simulated time.
//!
//! Measured by the thesis on a 300 MHz Pentium II with FreeBSD 2.2.5:
//! connection set-up and teardown 145 µs of CPU each, transmission 40 µs of
//! CPU per 512 bytes (so one node serves a cached 8 KB file about 1,075 times
//! a second), a disk read 28 ms (two seeks and rotational latency) plus
//! 410 µs per 4 KB transferred, and 14 ms more for every 44 KB of a file
//! beyond its first 44 KB (44 KB being the average transfer between seeks).
//! §3.3.3's sensitivity runs divide the CPU costs by a speed factor.

use crate::Nanos;

/// Files are read and sent in blocks of this size (§3.2.1).
pub const BLOCK: u64 = 44 * 1024;
/// Disk transfer unit.
pub const DISK_UNIT: u64 = 4 * 1024;

/// The simulated costs of one node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// CPU to establish a connection.
    pub setup: Nanos,
    /// CPU to tear one down.
    pub teardown: Nanos,
    /// CPU per 512 bytes sent.
    pub per_512: Nanos,
    /// Disk latency of a file's first block (two seeks + rotation).
    pub first_seek: Nanos,
    /// Disk latency of each further 44 KB block.
    pub next_seek: Nanos,
    /// Disk transfer per 4 KB.
    pub per_4k: Nanos,
    /// CPU speed relative to the thesis's machine (2 = twice as fast).
    pub cpu_speed: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            setup: 145_000,
            teardown: 145_000,
            per_512: 40_000,
            first_seek: 28_000_000,
            next_seek: 14_000_000,
            per_4k: 410_000,
            cpu_speed: 1.0,
        }
    }
}

impl CostModel {
    fn cpu(&self, ns: Nanos) -> Nanos {
        if self.cpu_speed == 1.0 {
            ns
        } else {
            (ns as f64 / self.cpu_speed).round() as Nanos
        }
    }
    /// CPU to set up a connection.
    pub fn setup(&self) -> Nanos {
        self.cpu(self.setup)
    }
    /// CPU to tear a connection down.
    pub fn teardown(&self) -> Nanos {
        self.cpu(self.teardown)
    }
    /// CPU to send `bytes` (proportional: 40 µs per 512 bytes).
    pub fn transmit(&self, bytes: u64) -> Nanos {
        self.cpu(bytes * self.per_512 / 512)
    }
    /// Blocks a file of `size` bytes is read and sent in (at least one).
    pub fn blocks(size: u64) -> u64 {
        size.div_ceil(BLOCK).max(1)
    }
    /// Bytes of block `i` of a file of `size` bytes.
    pub fn block_bytes(size: u64, i: u64) -> u64 {
        size.saturating_sub(i * BLOCK).min(BLOCK)
    }
    /// Disk time of block `i` of a file: its seek (28 ms for the first, 14 ms
    /// after) plus 410 µs per 4 KB unit, whole units.
    pub fn disk_block(&self, size: u64, i: u64) -> Nanos {
        let seek = if i == 0 { self.first_seek } else { self.next_seek };
        seek + Self::block_bytes(size, i).div_ceil(DISK_UNIT) * self.per_4k
    }
    /// Disk time to read a whole file.
    pub fn disk_read(&self, size: u64) -> Nanos {
        (0..Self::blocks(size)).map(|i| self.disk_block(size, i)).sum()
    }
    /// The rate at which one node serves one cached file of `size` bytes.
    pub fn cached_rate(&self, size: u64) -> f64 {
        1e9 / (self.setup() + self.transmit(size) + self.teardown()) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thesis_numbers() {
        let c = CostModel::default();
        // 145 + 640 + 145 µs = 930 µs → 1,075 requests/s.
        assert_eq!(c.transmit(8192), 640_000);
        assert!((c.cached_rate(8192) - 1075.27).abs() < 0.01);
        // 8 KB from disk: 28 ms + 2 × 410 µs.
        assert_eq!(c.disk_read(8192), 28_820_000);
        // 100 KB: 3 blocks (44+44+12 KB): 28 + 14 + 14 ms + 25 units × 410 µs.
        assert_eq!(CostModel::blocks(100 * 1024), 3);
        assert_eq!(c.disk_read(100 * 1024), 56_000_000 + 25 * 410_000);
        let fast = CostModel { cpu_speed: 2.0, ..c };
        assert_eq!(fast.setup(), 72_500);
    }
}
