//! Connection records lent from a per-worker pool ([`RecordPool`]).
//!
//! A role whose slab keeps an idle keep-alive connection as a small inline
//! record (issue 21: an idle connection holds no buffer and no request state)
//! boxes its full record while the connection is busy. The box is lent when
//! the connection wakes and given back when it falls asleep or closes, so a
//! request on a kept-alive connection allocates nothing in the steady state:
//! the pool keeps the emptied allocations (the value moves out with
//! [`crate::sys::boxes::take`]) and writes the next record into one.

use std::mem::MaybeUninit;

/// Emptied allocations for records of type `T`, reused before new ones are
/// made.
pub struct RecordPool<T> {
    // Boxed on purpose: a record moves between the pool and a slot as the
    // same allocation, which is what the pool exists to keep.
    #[allow(clippy::vec_box)]
    kept: Vec<Box<MaybeUninit<T>>>,
}

impl<T> Default for RecordPool<T> {
    fn default() -> Self {
        RecordPool { kept: Vec::new() }
    }
}

impl<T> RecordPool<T> {
    /// `value` boxed, in a kept allocation when the pool has one.
    #[inline]
    pub fn lend(&mut self, value: T) -> Box<T> {
        match self.kept.pop() {
            Some(block) => Box::write(block, value),
            None => Box::new(value),
        }
    }

    /// The record out of `b`; its allocation is kept while the pool holds
    /// fewer than `keep`.
    #[inline]
    pub fn give_back(&mut self, b: Box<T>, keep: usize) -> T {
        let (value, block) = crate::sys::boxes::take(b);
        if self.kept.len() < keep {
            self.kept.push(block);
        }
        value
    }

    /// Allocations kept now.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Halve the pool, down to `floor` (after a burst).
    pub fn decay(&mut self, floor: usize) {
        self.trim((self.kept.len() / 2).max(floor));
    }

    /// Keep at most `keep` allocations (memory pressure: 0).
    pub fn trim(&mut self, keep: usize) {
        self.kept.truncate(keep);
        if keep == 0 {
            self.kept.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn records_reuse_their_blocks_and_drop_once() {
        let counted = Rc::new(());
        let mut pool = RecordPool::default();
        let a = pool.lend((Rc::clone(&counted), 1u32));
        let block = &*a as *const (Rc<()>, u32) as usize;
        let value = pool.give_back(a, 4);
        assert_eq!((pool.len(), value.1), (1, 1));
        let b = pool.lend(value);
        assert_eq!(
            &*b as *const (Rc<()>, u32) as usize, block,
            "the kept block is lent again"
        );
        assert!(pool.is_empty());
        drop(b);
        assert_eq!(Rc::strong_count(&counted), 1, "every record dropped once");
        // Past `keep`, blocks are freed; decay halves down to its floor.
        let many: Vec<_> = (0..8).map(|i| pool.lend((Rc::clone(&counted), i))).collect();
        for r in many {
            drop(pool.give_back(r, 6));
        }
        assert_eq!(pool.len(), 6);
        pool.decay(2);
        assert_eq!(pool.len(), 3);
        pool.decay(2);
        assert_eq!(pool.len(), 2);
        pool.trim(0);
        assert!(pool.is_empty());
        drop(pool);
        assert_eq!(Rc::strong_count(&counted), 1, "kept blocks hold no record");
    }
}
