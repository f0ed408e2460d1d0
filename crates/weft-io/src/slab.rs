//! A slab of connection state indexed by [`Token`]s that carry a generation.
//!
//! Freed slots are reused (so the table stays dense and cache-friendly), and each
//! reuse bumps the slot's generation: a token issued for the previous occupant no
//! longer matches, so a late event or timer for a closed connection finds nothing.

use crate::Token;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Generation-checked storage.
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    /// An empty slab.
    pub fn new() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Number of occupied slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no slot is occupied.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The token the next `insert` will return.
    pub fn next_token(&self) -> Token {
        match self.free.last() {
            Some(&i) => Token::new(i, self.slots[i as usize].generation),
            None => Token::new(self.slots.len() as u32, 0),
        }
    }

    /// Store a value built from its own token.
    pub fn insert_with(&mut self, make: impl FnOnce(Token) -> T) -> Token {
        let token = self.next_token();
        let i = token.index() as usize;
        let value = make(token);
        if i == self.slots.len() {
            self.slots.push(Slot {
                generation: 0,
                value: Some(value),
            });
        } else {
            self.free.pop();
            self.slots[i].value = Some(value);
        }
        self.len += 1;
        token
    }

    /// The value for `token`, if it is still the slot's current occupant.
    #[inline]
    pub fn get(&self, token: Token) -> Option<&T> {
        let s = self.slots.get(token.index() as usize)?;
        if s.generation != token.generation() {
            return None;
        }
        s.value.as_ref()
    }

    /// Mutable access, generation-checked.
    #[inline]
    pub fn get_mut(&mut self, token: Token) -> Option<&mut T> {
        let s = self.slots.get_mut(token.index() as usize)?;
        if s.generation != token.generation() {
            return None;
        }
        s.value.as_mut()
    }

    /// Mutable access to two different occupants at once (a proxy session
    /// drives its client and upstream connections together). None if either
    /// token is stale or both name the same slot.
    pub fn get2_mut(&mut self, a: Token, b: Token) -> Option<(&mut T, &mut T)> {
        let (ia, ib) = (a.index() as usize, b.index() as usize);
        if ia == ib || ia >= self.slots.len() || ib >= self.slots.len() {
            return None;
        }
        let (sa, sb) = if ia < ib {
            let (lo, hi) = self.slots.split_at_mut(ib);
            (&mut lo[ia], &mut hi[0])
        } else {
            let (lo, hi) = self.slots.split_at_mut(ia);
            (&mut hi[0], &mut lo[ib])
        };
        if sa.generation != a.generation() || sb.generation != b.generation() {
            return None;
        }
        Some((sa.value.as_mut()?, sb.value.as_mut()?))
    }

    /// Replace the value for `token` with `f` of it, the token staying valid
    /// (a connection turning from busy to idle and back moves its state
    /// between two forms). False if the token is stale. `f` must not panic:
    /// the slot would be left empty.
    pub fn update(&mut self, token: Token, f: impl FnOnce(T) -> T) -> bool {
        let Some(s) = self.slots.get_mut(token.index() as usize) else {
            return false;
        };
        if s.generation != token.generation() {
            return false;
        }
        match s.value.take() {
            Some(v) => {
                s.value = Some(f(v));
                true
            }
            None => false,
        }
    }

    /// Remove and return the value; the slot's generation moves on.
    pub fn remove(&mut self, token: Token) -> Option<T> {
        let s = self.slots.get_mut(token.index() as usize)?;
        if s.generation != token.generation() {
            return None;
        }
        let v = s.value.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(token.index());
        self.len -= 1;
        Some(v)
    }

    /// Tokens of all occupied slots.
    pub fn tokens(&self) -> Vec<Token> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value.is_some())
            .map(|(i, s)| Token::new(i as u32, s.generation))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_tokens_are_rejected_after_reuse() {
        let mut s = Slab::new();
        let a = s.insert_with(|_| "a");
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert_with(|_| "b");
        assert_eq!(a.index(), b.index(), "slot is reused");
        assert_ne!(a, b);
        assert_eq!(s.get(a), None, "old token must not see the new occupant");
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn two_at_once() {
        let mut s = Slab::new();
        let a = s.insert_with(|_| 1);
        let b = s.insert_with(|_| 2);
        {
            let (x, y) = s.get2_mut(b, a).unwrap();
            std::mem::swap(x, y);
        }
        assert_eq!(s.get(a), Some(&2));
        assert_eq!(s.get(b), Some(&1));
        assert!(s.get2_mut(a, a).is_none());
        s.remove(b);
        assert!(s.get2_mut(a, b).is_none(), "stale token");
    }

    #[test]
    fn insert_with_sees_its_token() {
        let mut s = Slab::new();
        let t = s.insert_with(|t| t);
        assert_eq!(s.get(t), Some(&t));
    }

    #[test]
    fn update_keeps_the_token() {
        let mut s = Slab::new();
        let t = s.insert_with(|_| String::from("busy"));
        assert!(s.update(t, |v| v.replace("busy", "idle")));
        assert_eq!(s.get(t).map(String::as_str), Some("idle"));
        assert_eq!(s.len(), 1);
        s.remove(t);
        assert!(!s.update(t, |_| unreachable!()), "stale token");
    }
}
