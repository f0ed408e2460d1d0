//! A connection's deadline against the loop's timer heap. The heap keeps
//! superseded entries (it has no "cancel"); each connection remembers the
//! instant of the one entry that counts (`timer_at`), arms a new entry only
//! when its deadline moves earlier, and, when an entry fires, tells a stale
//! one from a deadline that has since moved later (re-armed there) from a
//! deadline that has passed.
//!
//! Also [`soonest`]: a handler's `max_wait` from what each part of it asks.

use std::time::{Duration, Instant};

use crate::backend::{Poller, Token};
use crate::event_loop::Ctx;

/// The shortest of the waits asked for (`None`: no part asked; the loop may
/// sleep until an event).
pub fn soonest<const N: usize>(waits: [Option<Duration>; N]) -> Option<Duration> {
    waits.into_iter().flatten().min()
}

/// Arm a timer for `deadline` (none: nothing to do) unless the entry armed
/// already fires at or before it: one heap entry per connection normally, a
/// second only when the deadline moved earlier than the armed one.
#[inline]
pub fn arm<P: Poller>(
    cx: &mut Ctx<P>,
    token: Token,
    deadline: impl Into<Option<Instant>>,
    timer_at: &mut Option<Instant>,
) {
    if let Some(d) = deadline.into() {
        if timer_at.is_none_or(|t| d < t) {
            *timer_at = Some(d);
            cx.arm_timer(token, d);
        }
    }
}

/// A fired entry `due`: true if it is the one that counts (it is then
/// disarmed), false if an earlier entry superseded it.
#[inline]
pub fn take_fired(timer_at: &mut Option<Instant>, due: Instant) -> bool {
    if *timer_at != Some(due) {
        return false;
    }
    *timer_at = None;
    true
}

/// A fired entry `due` of a connection whose deadline is now `deadline`:
/// `Ok(())` when the deadline has passed (the connection timed out);
/// otherwise `Err` with what [`Handler::on_timer`](crate::Handler::on_timer)
/// returns: `None` for a stale entry (or no deadline any more), the later
/// deadline (re-armed) when activity moved it.
#[inline]
pub fn expired(
    timer_at: &mut Option<Instant>,
    due: Instant,
    now: Instant,
    deadline: impl Into<Option<Instant>>,
) -> Result<(), Option<Instant>> {
    if !take_fired(timer_at, due) {
        return Err(None);
    }
    let d = deadline.into().ok_or(None)?;
    if now < d {
        *timer_at = Some(d);
        return Err(Some(d));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fired_entries_are_stale_later_or_expired() {
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        // Superseded: the armed entry is another one.
        let mut at = Some(t1);
        assert_eq!(expired(&mut at, t2, t2, t2), Err(None));
        assert_eq!(at, Some(t1));
        // The deadline moved later: re-armed there.
        assert_eq!(expired(&mut at, t1, t1, t2), Err(Some(t2)));
        assert_eq!(at, Some(t2));
        // No deadline any more.
        assert_eq!(expired(&mut at, t2, t2, None), Err(None));
        assert_eq!(at, None);
        // Passed.
        let mut at = Some(t1);
        assert_eq!(expired(&mut at, t1, t2, t1), Ok(()));
        assert_eq!(at, None);
        assert!(!take_fired(&mut at, t1));
    }
}
