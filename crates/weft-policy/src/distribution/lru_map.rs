//! A map from target ids to values that keeps at most `capacity` entries and
//! forgets the least recently used one when full (§3.1.6 of the thesis: the
//! target → server mapping "can be maintained in an LRU cache", since a target
//! not requested for a long time has left the back-ends' caches anyway).
//!
//! Entries live in a slab (`Vec`) threaded by a doubly linked list of indices,
//! so a lookup, a touch, an insert and an eviction are O(1) and allocate only
//! while the slab grows.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;

/// A hasher for keys that are already well-spread integers (target ids are
/// either hashes of URLs or dense indices): one multiply, as FxHash does.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// `HashMap` keyed by ids, hashed with [`IdHasher`].
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

struct Slot<V> {
    key: u64,
    value: Option<V>,
    newer: u32,
    older: u32,
}

/// A bounded map with least-recently-used eviction.
pub struct LruMap<V> {
    index: IdMap<u32>,
    slots: Vec<Slot<V>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    capacity: usize,
}

impl<V> LruMap<V> {
    /// An empty map holding at most `capacity` (at least 1) entries.
    pub fn new(capacity: usize) -> LruMap<V> {
        LruMap {
            index: IdMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
            capacity: capacity.max(1),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The most entries held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn unlink(&mut self, i: u32) {
        let (newer, older) = (self.slots[i as usize].newer, self.slots[i as usize].older);
        match newer {
            NIL => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, i: u32) {
        self.slots[i as usize].older = self.newest;
        self.slots[i as usize].newer = NIL;
        match self.newest {
            NIL => self.oldest = i,
            n => self.slots[n as usize].newer = i,
        }
        self.newest = i;
    }

    /// The value of `key`, marked as just used.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let i = *self.index.get(&key)?;
        if self.newest != i {
            self.unlink(i);
            self.push_newest(i);
        }
        self.slots[i as usize].value.as_mut()
    }

    /// The value of `key`, without marking it used.
    pub fn peek(&self, key: u64) -> Option<&V> {
        let i = *self.index.get(&key)?;
        self.slots[i as usize].value.as_ref()
    }

    /// Insert or replace `key` as the newest entry; returns the entry evicted
    /// to make room, if any.
    pub fn insert(&mut self, key: u64, value: V) -> Option<(u64, V)> {
        if let Some(&i) = self.index.get(&key) {
            self.slots[i as usize].value = Some(value);
            self.unlink(i);
            self.push_newest(i);
            return None;
        }
        let evicted = if self.index.len() >= self.capacity {
            self.pop_oldest()
        } else {
            None
        };
        let slot = Slot {
            key,
            value: Some(value),
            newer: NIL,
            older: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key, i);
        self.push_newest(i);
        evicted
    }

    /// Remove `key`.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let i = self.index.remove(&key)?;
        self.unlink(i);
        self.free.push(i);
        self.slots[i as usize].value.take()
    }

    /// Remove and return the least recently used entry.
    pub fn pop_oldest(&mut self) -> Option<(u64, V)> {
        let i = self.oldest;
        if i == NIL {
            return None;
        }
        let key = self.slots[i as usize].key;
        self.remove(key).map(|v| (key, v))
    }

    /// Keys and values from the least to the most recently used.
    pub fn iter_oldest(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let mut i = self.oldest;
        std::iter::from_fn(move || {
            if i == NIL {
                return None;
            }
            let s = &self.slots[i as usize];
            i = s.newer;
            s.value.as_ref().map(|v| (s.key, v))
        })
    }

    /// Keep only the entries for which `keep` returns true (it may also edit
    /// them). O(entries): for rare events such as a back-end going down.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &mut V) -> bool) {
        let mut drop = Vec::new();
        for (&key, &i) in &self.index {
            if let Some(v) = self.slots[i as usize].value.as_mut() {
                if !keep(key, v) {
                    drop.push(key);
                }
            }
        }
        for key in drop {
            self.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut m = LruMap::new(2);
        assert!(m.insert(1, 'a').is_none());
        assert!(m.insert(2, 'b').is_none());
        m.get_mut(1);
        assert_eq!(m.insert(3, 'c'), Some((2, 'b')));
        assert_eq!(m.len(), 2);
        let order: Vec<u64> = m.iter_oldest().map(|(k, _)| k).collect();
        assert_eq!(order, vec![1, 3]);
        assert_eq!(m.remove(1), Some('a'));
        assert_eq!(m.pop_oldest(), Some((3, 'c')));
        assert!(m.is_empty());
        // Slots are reused.
        m.insert(4, 'd');
        m.insert(5, 'e');
        m.retain(|k, _| k == 5);
        assert_eq!(m.peek(5), Some(&'e'));
        assert_eq!(m.len(), 1);
    }
}
