//! Keys, values and the random numbers workloads draw.
//!
//! Every workload names its records by an **index** (0, 1, 2, ...) and stores them under the
//! **key** [`key_of`]`(index)`: a bijection of the 63-bit space that scatters consecutive indices
//! over the key space (YCSB's hashed inserts, and random keys for the insert micro-benchmark)
//! while staying regenerable, so consistency checks can recompute every key a run wrote. Keys
//! stay below 2^63 so every engine (SQLite's signed `INTEGER` too) orders them alike.
//!
//! A value of a record starts with its key (little-endian, as much of it as fits) followed by
//! filler derived from a version number: reads check that the value they got belongs to the key
//! they asked for and has the configured size.

const MASK63: u64 = (1 << 63) - 1;

/// The key of record `index` (a bijection on `[0, 2^63)`; `index` is taken modulo 2^63).
pub fn key_of(index: u64) -> u64 {
    // Each step is a bijection of [0, 2^63): xor with a right shift, and multiplication by an
    // odd constant modulo 2^63.
    let mut x = index & MASK63;
    x ^= x >> 31;
    x = x.wrapping_mul(0x7fb5_d329_728e_a185) & MASK63;
    x ^= x >> 27;
    x = x.wrapping_mul(0x81da_def4_bc2d_d44d) & MASK63;
    x ^= x >> 33;
    x
}

/// Fills `buf` with the value of `key` at `version`, `size` bytes long.
pub fn fill_value(buf: &mut Vec<u8>, key: u64, version: u64, size: usize) {
    buf.clear();
    let kb = key.to_le_bytes();
    buf.extend_from_slice(&kb[..size.min(8)]);
    let mut x = key ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while buf.len() < size {
        x = splitmix(&mut x);
        let b = x.to_le_bytes();
        let take = (size - buf.len()).min(8);
        buf.extend_from_slice(&b[..take]);
    }
}

/// Whether `value` can be a value of `key` with the configured size.
pub fn value_matches(key: u64, value: &[u8], size: usize) -> bool {
    let kb = key.to_le_bytes();
    value.len() == size && value[..size.min(8)] == kb[..size.min(8)]
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small, fast, seeded generator (SplitMix64) for workload choices.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `stream` of the run seeded with `seed` (distinct streams differ).
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut s = seed ^ stream.wrapping_mul(0xd6e8_feb8_6659_fd93);
        splitmix(&mut s);
        Rng(s)
    }

    /// A uniformly random `u64`.
    pub fn next_u64(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// Uniform in `[0, n)` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_below_2_63() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..100_000u64).chain((1 << 40)..(1 << 40) + 1000) {
            let k = key_of(i);
            assert!(k < 1 << 63);
            assert!(seen.insert(k), "collision at {i}");
        }
        // Consecutive indices are scattered.
        assert!(key_of(1).abs_diff(key_of(2)) > 1 << 40);
    }

    #[test]
    fn values_carry_their_key() {
        let mut v = Vec::new();
        for size in [0usize, 3, 8, 100, 1000] {
            fill_value(&mut v, 42, 7, size);
            assert_eq!(v.len(), size);
            assert!(value_matches(42, &v, size));
            if size >= 1 {
                assert!(!value_matches(43, &v, size));
            }
            assert!(!value_matches(42, &v, size + 1));
        }
    }

    #[test]
    fn rng_ranges() {
        let mut r = Rng::new(1, 2);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(r.below(0), 0);
        assert_ne!(Rng::new(1, 2).next_u64(), Rng::new(1, 3).next_u64());
    }
}
