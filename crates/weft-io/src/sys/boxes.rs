//! A value moved out of its box with the allocation kept: what the unstable
//! `Box::take` does, for [`crate::records::RecordPool`], which lends the same
//! allocations to connections again and again instead of freeing one and
//! allocating the next.

use std::mem::MaybeUninit;

/// Move the value out of `b` and return it with `b`'s allocation, now empty.
pub fn take<T>(b: Box<T>) -> (T, Box<MaybeUninit<T>>) {
    let raw = Box::into_raw(b);
    // SAFETY: `raw` comes from `Box::into_raw`, so it is valid, aligned and
    // holds an initialised `T`; the value is moved out here once, and the
    // allocation is only ever seen again as uninitialised memory (below).
    let value = unsafe { std::ptr::read(raw) };
    // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment, so the block that
    // `Box<T>` allocated is a valid `Box<MaybeUninit<T>>` with the same
    // allocator; its contents are uninitialised now, which `MaybeUninit`
    // allows and never drops.
    let empty = unsafe { Box::from_raw(raw.cast::<MaybeUninit<T>>()) };
    (value, empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn the_value_moves_out_once_and_the_block_is_reused() {
        let counted = Rc::new(());
        let b = Box::new((Rc::clone(&counted), 7u64));
        let block = &*b as *const (Rc<()>, u64) as usize;
        let (value, empty) = take(b);
        assert_eq!(value.1, 7);
        assert_eq!(Rc::strong_count(&counted), 2, "moved, neither dropped nor copied");
        let refilled = Box::write(empty, (Rc::clone(&counted), 8));
        assert_eq!(
            &*refilled as *const (Rc<()>, u64) as usize, block,
            "the same allocation"
        );
        assert_eq!((refilled.1, Rc::strong_count(&counted)), (8, 3));
        drop(refilled);
        drop(value);
        assert_eq!(Rc::strong_count(&counted), 1, "each value dropped once");
        let (value, empty) = take(Box::new((Rc::clone(&counted), 9u64)));
        drop(empty);
        assert_eq!(Rc::strong_count(&counted), 2, "an emptied block drops nothing");
        drop(value);
        assert_eq!(Rc::strong_count(&counted), 1);
    }
}
