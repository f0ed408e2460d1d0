//! Sizes and durations as operators write them: `64KiB`, `1m`, `10s`, `250ms`.

use std::time::Duration;

/// Parse a byte size: a number with an optional unit (B, K/KB/KiB, M/MB/MiB,
/// G/GB/GiB; all binary, as nginx does), case-insensitive.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size `{s}` (expected e.g. 512, 64KiB, 1MiB)"));
    }
    let n: u64 = num.parse().map_err(|_| format!("invalid size `{s}`"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("invalid size unit in `{s}` (expected B, KiB, MiB or GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("size `{s}` is too large"))
}

/// Parse a duration: a number with a unit (ms, s, m, h); a bare number is seconds.
/// Fractions are allowed (`1.5s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration `{s}` (expected e.g. 10s, 250ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in `{s}` (expected ms, s, m or h)")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration `{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("2 GiB").unwrap(), 2 << 30);
        assert!(parse_size("x").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1 fortnight").is_err());
    }
}
