//! Open-loop arrival times.

use crate::config::Arrivals;
use rand::Rng;

/// Open-loop arrival times, in seconds after the start: a running sum of
/// inter-arrival draws counted from the start (never from when the previous
/// arrival was handled), so the offered rate does not drift.
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Arrivals,
    rate: f64,
    phase: f64,
    count: u64,
    next: f64,
}

impl Schedule {
    /// Arrivals at `rate` per second, the first at `phase` seconds.
    pub fn new(kind: Arrivals, rate: f64, phase: f64) -> Schedule {
        Schedule {
            kind,
            rate,
            phase,
            count: 0,
            next: phase,
        }
    }

    /// When the next arrival is due.
    #[inline]
    pub fn due(&self) -> f64 {
        self.next
    }

    /// The next arrival was made: draw the one after.
    pub fn advance<R: Rng>(&mut self, rng: &mut R) {
        self.count += 1;
        match self.kind {
            // The k-th arrival at phase + k/R, computed from the count so no
            // rounding error accumulates.
            Arrivals::Fixed => self.next = self.phase + self.count as f64 / self.rate,
            Arrivals::Exp => {
                let e: f64 = rand_distr::Distribution::sample(&rand_distr::Exp1, rng);
                self.next += e / self.rate;
            }
            Arrivals::Uniform => self.next += 2.0 * rng.gen::<f64>() / self.rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn fixed_schedule_does_not_drift() {
        let mut s = Schedule::new(Arrivals::Fixed, 3000.0, 0.5 / 3000.0);
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..3_000_000 {
            s.advance(&mut rng);
        }
        // Arrival 3,000,000 of a 3000/s schedule is due at exactly 1000 s (+ phase).
        assert!((s.due() - (1000.0 + 0.5 / 3000.0)).abs() < 1e-9, "{}", s.due());
    }

    #[test]
    fn random_schedules_keep_the_rate() {
        for kind in [Arrivals::Exp, Arrivals::Uniform] {
            let mut s = Schedule::new(kind, 1000.0, 0.0);
            let mut rng = SmallRng::seed_from_u64(7);
            let n = 1_000_000;
            let mut gaps = Vec::with_capacity(n);
            let mut last = 0.0;
            for _ in 0..n {
                s.advance(&mut rng);
                gaps.push(s.due() - last);
                last = s.due();
            }
            // n arrivals take n/R seconds within 0.5 %.
            assert!((s.due() - 1000.0).abs() < 5.0, "{kind:?}: {}", s.due());
            let mean = gaps.iter().sum::<f64>() / n as f64;
            let var = gaps.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / n as f64;
            // Exponential: sd = mean; uniform on [0, 2/R): sd = mean/sqrt(3).
            let want = if kind == Arrivals::Exp {
                mean
            } else {
                mean / 3f64.sqrt()
            };
            assert!((var.sqrt() - want).abs() < 0.01 * want, "{kind:?}: sd {}", var.sqrt());
        }
    }
}
