//! Request distributions of YCSB: uniform, Zipfian (Gray et al.'s generator, as YCSB's
//! `ZipfianGenerator`, with the item count allowed to grow) and "latest" (YCSB's
//! `SkewedLatestGenerator`: Zipfian over recency).
//!
//! The Zipfian generator draws item *indices* `0..n` with index 0 the most popular; records
//! are stored under `key_of(index)`, which scatters the popular items over the key space as
//! YCSB's scrambled/hashed keys do.

use crate::keys::Rng;

/// YCSB's default Zipfian constant.
pub const DEFAULT_THETA: f64 = 0.99;

/// A Zipfian generator over `[0, n)` whose `n` may grow (zeta is extended incrementally).
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    alpha: f64,
    zeta2: f64,
    n: u64,
    zetan: f64,
    eta: f64,
}

fn zeta_from(from: u64, to: u64, theta: f64, start: f64) -> f64 {
    let mut sum = start;
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// A generator over `[0, n)` with constant `theta` (0 < theta < 1).
    pub fn new(n: u64, theta: f64) -> Self {
        let zeta2 = zeta_from(0, 2, theta, 0.0);
        let mut z =
            Zipfian { theta, alpha: 1.0 / (1.0 - theta), zeta2, n: 0, zetan: 0.0, eta: 0.0 };
        z.grow(n.max(1));
        z
    }

    fn grow(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta_from(self.n, n, self.theta, self.zetan);
            self.n = n;
            self.eta =
                (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan);
        }
    }

    /// Items currently covered.
    pub fn items(&self) -> u64 {
        self.n
    }

    /// Draws an index in `[0, n)`, first growing the item count to `n` if it is larger.
    pub fn next(&mut self, rng: &mut Rng, n: u64) -> u64 {
        self.grow(n);
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let v = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.n - 1)
    }
}

/// How a workload picks the record an operation touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Every record equally likely.
    Uniform,
    /// Zipfian with the workload's constant (YCSB's default; D uses "latest" instead).
    Zipfian,
}

impl Distribution {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
        }
    }
}

impl std::str::FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" | "zipf" => Ok(Distribution::Zipfian),
            other => Err(format!("unknown distribution {other:?} (expected zipfian or uniform)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let mut rng = Rng::new(7, 0);
        let mut z = Zipfian::new(1000, DEFAULT_THETA);
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            let i = z.next(&mut rng, 1000);
            hits[i as usize] += 1;
        }
        // Item 0 is the most popular, by far more than the median item.
        assert!(hits[0] > hits[1] && hits[1] > hits[500]);
        assert!(hits[0] > 10_000, "{}", hits[0]);
        // Growing keeps draws in range.
        for n in [1000u64, 1001, 5000, 5001] {
            for _ in 0..1000 {
                assert!(z.next(&mut rng, n) < n);
            }
        }
        assert_eq!(z.items(), 5001);
        let mut one = Zipfian::new(1, DEFAULT_THETA);
        assert_eq!(one.next(&mut rng, 1), 0);
    }

    #[test]
    fn grown_zeta_equals_fresh_zeta() {
        let mut a = Zipfian::new(10, 0.9);
        let mut rng = Rng::new(1, 1);
        a.next(&mut rng, 2000);
        let b = Zipfian::new(2000, 0.9);
        assert!((a.zetan - b.zetan).abs() < 1e-9);
        assert!((a.eta - b.eta).abs() < 1e-12);
    }
}
