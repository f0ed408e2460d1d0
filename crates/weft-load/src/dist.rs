//! Random distributions for workloads, written the way Web Polygraph writes them.
//!
//! A [`Dist`] is parsed from text such as `exp(2.5s)`, `norm(2.5s,1s)`,
//! `logn(300KB,300KB)`, `zipf(64)`, `unif(1,10)`, `pareto(1000,1.0)`,
//! `weibull(1.46,0.382)`, `lognormal(9.357,1.318)` or a bare constant, in a
//! [`Unit`] that says how the numbers read (seconds, bytes or plain counts).
//! The semantics follow the sources in `../shared/research/workloads.md`:
//!
//! - `norm(m,s)` is Polygraph's sum of twelve uniforms, `m + s·(ΣU − 6)`;
//! - `logn(mean,sd)` takes the mean and deviation of the lognormal itself
//!   (Polygraph's `LognDistr::ViaMean`), `lognormal(mu,sigma)` the parameters of
//!   the underlying normal (SURGE's notation);
//! - `zipf(N)` is Polygraph's continuous Zipf: `floor((N+1)^U)`, values 1..N;
//! - `pareto(k,a)` has scale `k` and shape `a`; `weibull(a,b)` scale `a`, shape `b`.
//!
//! [`Table`] draws from a fixed discrete distribution (weights → cumulative
//! table, binary search): SPECweb99 classes and files, Zipf popularity over N
//! ranks. Sampling allocates nothing.

use rand::Rng;
use rand_distr::{Distribution, Exp1, Open01, StandardNormal};
use std::fmt;

/// How the numbers of a distribution are written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Seconds; accepts `ms`, `s`, `m`, `h` suffixes (bare = seconds).
    Seconds,
    /// Bytes; accepts `B`, `KB`/`KiB`, `MB`/`MiB`, `GB`/`GiB` (all binary, fractions allowed).
    Bytes,
    /// Plain numbers.
    Count,
}

/// A distribution of non-negative reals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Always this value.
    Const(f64),
    /// Exponential with this mean.
    Exp(f64),
    /// Polygraph normal (sum of 12 uniforms), truncated at 0.
    Norm(f64, f64),
    /// Lognormal given its own mean and standard deviation.
    LognMean(f64, f64),
    /// Lognormal given mu and sigma of the underlying normal.
    Lognormal(f64, f64),
    /// Uniform on [a, b).
    Unif(f64, f64),
    /// Polygraph zipf(N): floor((N+1)^U), values 1..N.
    Zipf(f64),
    /// Pareto with scale k and shape alpha.
    Pareto(f64, f64),
    /// Weibull with scale a and shape b.
    Weibull(f64, f64),
}

fn parse_number(s: &str, unit: Unit) -> Result<f64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    // "1e3" is a number, but so would be the 'e' of nothing else we accept.
    let (num, suffix) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("invalid number `{s}`"))?;
    let mult = match (unit, suffix.trim().to_ascii_lowercase().as_str()) {
        (_, "") => 1.0,
        (Unit::Seconds, "s") => 1.0,
        (Unit::Seconds, "ms") => 1e-3,
        (Unit::Seconds, "us") => 1e-6,
        (Unit::Seconds, "m" | "min") => 60.0,
        (Unit::Seconds, "h" | "hour") => 3600.0,
        (Unit::Seconds, "day") => 86400.0,
        (Unit::Bytes, "b") => 1.0,
        (Unit::Bytes, "k" | "kb" | "kib") => 1024.0,
        (Unit::Bytes, "m" | "mb" | "mib") => 1024.0 * 1024.0,
        (Unit::Bytes, "g" | "gb" | "gib") => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("invalid unit in `{s}`")),
    };
    let v = v * mult;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}` must be a non-negative number"));
    }
    Ok(v)
}

impl Dist {
    /// Parse `name(args)` or a bare constant.
    pub fn parse(s: &str, unit: Unit) -> Result<Dist, String> {
        let t = s.trim();
        let Some(open) = t.find('(') else {
            return parse_number(t, unit).map(Dist::Const);
        };
        if !t.ends_with(')') {
            return Err(format!("invalid distribution `{s}` (missing `)`)"));
        }
        let name = t[..open].trim().to_ascii_lowercase();
        let args: Vec<&str> = t[open + 1..t.len() - 1].split(',').map(str::trim).collect();
        let want = |n: usize| -> Result<(), String> {
            if args.len() == n && args.iter().all(|a| !a.is_empty()) {
                Ok(())
            } else {
                Err(format!("`{name}` takes {n} argument(s) in `{s}`"))
            }
        };
        // Shape parameters and counts are plain numbers whatever the unit.
        let num = |i: usize| parse_number(args[i], unit);
        let plain = |i: usize| parse_number(args[i], Unit::Count);
        let positive = |v: f64, what: &str| -> Result<f64, String> {
            if v > 0.0 {
                Ok(v)
            } else {
                Err(format!("{what} must be positive in `{s}`"))
            }
        };
        let d = match name.as_str() {
            "const" => {
                want(1)?;
                Dist::Const(num(0)?)
            }
            "exp" => {
                want(1)?;
                Dist::Exp(positive(num(0)?, "the mean")?)
            }
            "norm" => {
                want(2)?;
                Dist::Norm(num(0)?, num(1)?)
            }
            "logn" => {
                want(2)?;
                Dist::LognMean(positive(num(0)?, "the mean")?, num(1)?)
            }
            "lognormal" => {
                want(2)?;
                // mu may be negative in principle; accept a leading minus.
                let mu: f64 = args[0].parse().map_err(|_| format!("invalid mu in `{s}`"))?;
                Dist::Lognormal(mu, plain(1)?)
            }
            "unif" => {
                want(2)?;
                let (a, b) = (num(0)?, num(1)?);
                if b < a {
                    return Err(format!("unif(a,b) needs a <= b in `{s}`"));
                }
                Dist::Unif(a, b)
            }
            "zipf" => {
                want(1)?;
                let n = plain(0)?;
                if n < 1.0 || n.fract() != 0.0 {
                    return Err(format!("zipf(N) needs a whole N >= 1 in `{s}`"));
                }
                Dist::Zipf(n)
            }
            "pareto" => {
                want(2)?;
                Dist::Pareto(positive(num(0)?, "the scale")?, positive(plain(1)?, "the shape")?)
            }
            "weibull" => {
                want(2)?;
                Dist::Weibull(positive(num(0)?, "the scale")?, positive(plain(1)?, "the shape")?)
            }
            _ => {
                return Err(format!(
                    "unknown distribution `{name}` in `{s}` (expected const, exp, norm, logn, lognormal, unif, zipf, pareto or weibull)"
                ))
            }
        };
        Ok(d)
    }

    /// One draw (never negative).
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Exp(mean) => {
                let e: f64 = Exp1.sample(rng);
                e * mean
            }
            Dist::Norm(m, s) => {
                let mut sum = 0.0;
                for _ in 0..12 {
                    sum += rng.gen::<f64>();
                }
                (m + s * (sum - 6.0)).max(0.0)
            }
            Dist::LognMean(m, sd) => {
                let (mu, sigma) = logn_params(m, sd);
                let z: f64 = StandardNormal.sample(rng);
                (mu + sigma * z).exp()
            }
            Dist::Lognormal(mu, sigma) => {
                let z: f64 = StandardNormal.sample(rng);
                (mu + sigma * z).exp()
            }
            Dist::Unif(a, b) => a + (b - a) * rng.gen::<f64>(),
            Dist::Zipf(n) => {
                let u: f64 = rng.gen::<f64>();
                (n + 1.0).powf(u).floor().clamp(1.0, n)
            }
            Dist::Pareto(k, a) => {
                let u: f64 = Open01.sample(rng);
                k / u.powf(1.0 / a)
            }
            Dist::Weibull(a, b) => {
                let u: f64 = Open01.sample(rng);
                a * (-u.ln()).powf(1.0 / b)
            }
        }
    }

    /// The mean of the model (for documentation, tests and sanity checks);
    /// `None` where it is infinite (Pareto with shape <= 1).
    pub fn mean(&self) -> Option<f64> {
        Some(match *self {
            Dist::Const(v) => v,
            Dist::Exp(m) => m,
            Dist::Norm(m, _) => m,
            Dist::LognMean(m, _) => m,
            Dist::Lognormal(mu, s) => (mu + s * s / 2.0).exp(),
            Dist::Unif(a, b) => (a + b) / 2.0,
            Dist::Zipf(n) => {
                // E[floor((N+1)^U)] = Σ_{k=1..N} k·P(k) with P(k) = ln((k+1)/k)/ln(N+1).
                let l = (n + 1.0).ln();
                (1..=n as u64)
                    .map(|k| k as f64 * ((k as f64 + 1.0) / k as f64).ln() / l)
                    .sum()
            }
            Dist::Pareto(k, a) => {
                if a <= 1.0 {
                    return None;
                }
                a * k / (a - 1.0)
            }
            Dist::Weibull(a, b) => a * gamma(1.0 + 1.0 / b),
        })
    }

    /// Is this distribution the constant zero?
    pub fn is_zero(&self) -> bool {
        *self == Dist::Const(0.0)
    }
}

/// mu and sigma of the normal under a lognormal with this mean and deviation.
fn logn_params(mean: f64, sd: f64) -> (f64, f64) {
    let v = sd * sd + mean * mean;
    let sigma2 = v.ln() - 2.0 * mean.ln();
    let mu = 2.0 * mean.ln() - 0.5 * v.ln();
    (mu, sigma2.max(0.0).sqrt())
}

/// The gamma function (Lanczos approximation, g = 7), for the Weibull mean.
fn gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x))
    } else {
        let x = x - 1.0;
        let mut a = G[0];
        let t = x + 7.5;
        for (i, g) in G.iter().enumerate().skip(1) {
            a += g / (x + i as f64);
        }
        (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Const(v) => write!(f, "{v}"),
            Dist::Exp(m) => write!(f, "exp({m})"),
            Dist::Norm(m, s) => write!(f, "norm({m},{s})"),
            Dist::LognMean(m, s) => write!(f, "logn({m},{s})"),
            Dist::Lognormal(m, s) => write!(f, "lognormal({m},{s})"),
            Dist::Unif(a, b) => write!(f, "unif({a},{b})"),
            Dist::Zipf(n) => write!(f, "zipf({n})"),
            Dist::Pareto(k, a) => write!(f, "pareto({k},{a})"),
            Dist::Weibull(a, b) => write!(f, "weibull({a},{b})"),
        }
    }
}

/// A fixed discrete distribution over indices 0..n (cumulative weights).
#[derive(Clone, Debug)]
pub struct Table {
    cdf: Vec<f64>,
}

impl Table {
    /// From non-negative weights (normalised here).
    pub fn new(weights: &[f64]) -> Table {
        let total: f64 = weights.iter().sum();
        assert!(total > 0.0 && !weights.is_empty(), "a table needs positive weights");
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Table { cdf }
    }

    /// Zipf with exponent `s` over `n` ranks: P(rank i) ∝ 1/(i+1)^s, i = 0..n.
    pub fn zipf(n: usize, s: f64) -> Table {
        let w: Vec<f64> = (0..n.max(1)).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect();
        Table::new(&w)
    }

    /// Number of outcomes.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// True if there are no outcomes (never: construction requires one).
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability of outcome `i`.
    pub fn prob(&self, i: usize) -> f64 {
        self.cdf[i] - if i == 0 { 0.0 } else { self.cdf[i - 1] }
    }

    /// One draw.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let u: f64 = rng.gen::<f64>();
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const N: usize = 200_000;

    fn draws(d: &Dist) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(42);
        let mut v: Vec<f64> = (0..N).map(|_| d.sample(&mut rng)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    fn sd(v: &[f64]) -> f64 {
        let m = mean(v);
        (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
    }

    fn quantile(v: &[f64], q: f64) -> f64 {
        v[((v.len() - 1) as f64 * q) as usize]
    }

    fn close(got: f64, want: f64, rel: f64, what: &str) {
        assert!(
            (got - want).abs() <= rel * want.abs().max(1e-9),
            "{what}: got {got}, want {want} (±{}%)",
            rel * 100.0
        );
    }

    #[test]
    fn parsing_with_units() {
        assert_eq!(Dist::parse("2.5s", Unit::Seconds).unwrap(), Dist::Const(2.5));
        assert_eq!(Dist::parse("250ms", Unit::Seconds).unwrap(), Dist::Const(0.25));
        assert_eq!(Dist::parse("exp(4.5KB)", Unit::Bytes).unwrap(), Dist::Exp(4608.0));
        assert_eq!(
            Dist::parse("norm(2.5s, 1s)", Unit::Seconds).unwrap(),
            Dist::Norm(2.5, 1.0)
        );
        assert_eq!(Dist::parse("zipf(64)", Unit::Count).unwrap(), Dist::Zipf(64.0));
        assert_eq!(
            Dist::parse("lognormal(9.357,1.318)", Unit::Bytes).unwrap(),
            Dist::Lognormal(9.357, 1.318)
        );
        for bad in [
            "exp()",
            "exp(1,2)",
            "zipf(0)",
            "zipf(2.5)",
            "unif(3,1)",
            "gauss(1)",
            "norm(1",
            "5 parsecs",
            "-1",
        ] {
            assert!(Dist::parse(bad, Unit::Seconds).is_err(), "{bad}");
        }
        let e = Dist::parse("pareto(1,0)", Unit::Count).unwrap_err();
        assert!(e.contains("shape"), "{e}");
    }

    #[test]
    fn exponential() {
        let v = draws(&Dist::Exp(2.5));
        close(mean(&v), 2.5, 0.01, "mean");
        close(quantile(&v, 0.5), 2.5 * std::f64::consts::LN_2, 0.02, "median");
        close(quantile(&v, 0.9), 2.5 * 10f64.ln(), 0.02, "p90");
    }

    #[test]
    fn polygraph_normal() {
        let v = draws(&Dist::Norm(10.0, 2.0));
        close(mean(&v), 10.0, 0.005, "mean");
        close(sd(&v), 2.0, 0.02, "sd");
        close(quantile(&v, 0.5), 10.0, 0.01, "median");
        // Truncation at zero: norm(2.5s,1s) never yields a negative think time.
        let v = draws(&Dist::Norm(2.5, 1.0));
        assert!(v[0] >= 0.0);
        close(mean(&v), 2.5, 0.01, "norm(2.5,1) mean");
    }

    #[test]
    fn lognormal_by_mean_and_by_mu_sigma() {
        let v = draws(&Dist::LognMean(25.0 * 1024.0, 10.0 * 1024.0));
        close(mean(&v), 25.0 * 1024.0, 0.01, "logn mean");
        close(sd(&v), 10.0 * 1024.0, 0.03, "logn sd");
        let d = Dist::Lognormal(9.357, 1.318);
        let v = draws(&d);
        close(quantile(&v, 0.5), 9.357f64.exp(), 0.02, "lognormal median = e^mu");
        close(mean(&v), d.mean().unwrap(), 0.03, "lognormal mean");
    }

    #[test]
    fn uniform() {
        let v = draws(&Dist::Unif(0.0, 8192.0));
        close(mean(&v), 4096.0, 0.01, "mean");
        close(quantile(&v, 0.25), 2048.0, 0.02, "q25");
        assert!(v[0] >= 0.0 && *v.last().unwrap() < 8192.0);
    }

    #[test]
    fn polygraph_zipf() {
        let d = Dist::Zipf(64.0);
        let v = draws(&d);
        assert_eq!(v[0], 1.0);
        assert_eq!(*v.last().unwrap(), 64.0);
        assert!(v.iter().all(|x| x.fract() == 0.0));
        // P(X <= k) = ln(k+1)/ln(N+1).
        for k in [1.0f64, 3.0, 15.0] {
            let p = v.iter().filter(|&&x| x <= k).count() as f64 / N as f64;
            close(p, (k + 1.0).ln() / 65f64.ln(), 0.02, "cdf");
        }
        close(mean(&v), d.mean().unwrap(), 0.02, "mean");
    }

    #[test]
    fn pareto_and_weibull() {
        let v = draws(&Dist::Pareto(1000.0, 1.0));
        assert!(v[0] >= 1000.0);
        close(quantile(&v, 0.5), 2000.0, 0.02, "pareto(1000,1) median = k·2^(1/a)");
        let d = Dist::Pareto(1.0, 1.5);
        let v = draws(&d);
        close(quantile(&v, 0.5), 2f64.powf(1.0 / 1.5), 0.02, "pareto(1,1.5) median");
        close(quantile(&v, 0.9), 10f64.powf(1.0 / 1.5), 0.03, "pareto(1,1.5) p90");
        let d = Dist::Weibull(1.46, 0.382);
        let v = draws(&d);
        close(
            quantile(&v, 0.5),
            1.46 * 2f64.ln().powf(1.0 / 0.382),
            0.02,
            "weibull median",
        );
        close(mean(&v), d.mean().unwrap(), 0.05, "weibull mean");
        close(gamma(5.0), 24.0, 1e-9, "gamma(5)");
    }

    #[test]
    fn constant() {
        let v = draws(&Dist::Const(3.0));
        assert!(v.iter().all(|&x| x == 3.0));
        assert!(Dist::Const(0.0).is_zero());
    }

    #[test]
    fn tables_and_rank_zipf() {
        let t = Table::new(&[35.0, 50.0, 14.0, 1.0]);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0usize; 4];
        for _ in 0..N {
            counts[t.sample(&mut rng)] += 1;
        }
        for (i, want) in [0.35, 0.50, 0.14, 0.01].iter().enumerate() {
            close(counts[i] as f64 / N as f64, *want, 0.05, "class share");
            close(t.prob(i), *want, 1e-9, "prob");
        }
        let z = Table::zipf(100, 1.0);
        let h: f64 = (1..=100).map(|i| 1.0 / i as f64).sum();
        close(z.prob(0), 1.0 / h, 1e-9, "zipf rank 1");
        close(z.prob(9), 0.1 / h, 1e-9, "zipf rank 10");
        let mut first = 0;
        for _ in 0..N {
            if z.sample(&mut rng) == 0 {
                first += 1;
            }
        }
        close(first as f64 / N as f64, 1.0 / h, 0.03, "zipf rank 1 share");
    }
}
