//! Responses by status class (1xx to 5xx), a registry group every role can
//! embed: `"status":{"2xx":9,"4xx":1}` in JSON (classes seen at least once),
//! `weft_<role>_status_total{class="2xx"}` in Prometheus (every class, zeros
//! included, so a series never appears halfway through a scrape history).

use super::{Group, JsonObject, Kind, Publish, Read, Samples};

/// The class names, index = first digit - 1.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Responses counted by the first digit of their status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusClasses(pub [u64; 5]);

impl StatusClasses {
    /// Count one response with `status` (outside 100..=599: not counted).
    #[inline]
    pub fn count(&mut self, status: u16) {
        if let Some(c) = (status / 100)
            .checked_sub(1)
            .and_then(|i| self.0.get_mut(usize::from(i)))
        {
            *c += 1;
        }
    }

    /// The responses counted in class `digit`xx (1 to 5).
    pub fn get(&self, digit: usize) -> u64 {
        digit.checked_sub(1).and_then(|i| self.0.get(i)).copied().unwrap_or(0)
    }
}

impl Group for StatusClasses {
    const WORDS: usize = CLASSES.len();

    fn add(&mut self, other: &Self) {
        self.0.iter_mut().zip(other.0).for_each(|(a, b)| *a += b);
    }

    #[inline]
    fn publish(&self, out: &mut Publish<'_>) {
        self.0.iter().for_each(|v| out.put(*v));
    }

    fn read(input: &mut Read<'_>) -> Self {
        StatusClasses(std::array::from_fn(|_| input.take()))
    }

    fn write_json(&self, out: &mut String) {
        let mut o = JsonObject::begin(out);
        for (name, n) in CLASSES.iter().zip(self.0) {
            if n > 0 {
                o.u64(name, n);
            }
        }
        o.end();
    }

    fn samples(&self, name: &str, out: &mut Samples) {
        for (class, n) in CLASSES.iter().zip(self.0) {
            out.push(
                name,
                "Responses by status class.",
                Kind::Counter,
                Some(("class", class)),
                n,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{render_prometheus, Slot};

    #[test]
    fn counts_publishes_and_renders() {
        let mut s = StatusClasses::default();
        for st in [200, 204, 404, 503, 99, 600, 0] {
            s.count(st);
        }
        assert_eq!(s.0, [0, 2, 0, 1, 1]);
        assert_eq!((s.get(2), s.get(0), s.get(9)), (2, 0, 0));
        let slot: Slot<StatusClasses> = Slot::default();
        slot.publish(&s);
        assert_eq!(slot.read(), s);
        let mut j = String::new();
        s.write_json(&mut j);
        assert_eq!(j, "{\"2xx\":2,\"4xx\":1,\"5xx\":1}");
        let text = render_prometheus("t", &[s, s]);
        assert!(text.contains("weft_t_total{class=\"2xx\",worker=\"1\"} 2\n"), "{text}");
        assert!(text.contains("weft_t_total{class=\"3xx\"} 0\n"), "{text}");
        assert!(text.contains("weft_t_total{class=\"5xx\"} 2\n"), "{text}");
    }
}
