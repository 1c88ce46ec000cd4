//! A DRAM index of a SOFORT table: encoded key → the row ids of the versions holding it
//! (`docs/design/sofort.md` §7).
//!
//! # Invariants
//! - Entries are pairs `(key, row)`, ordered by key, then row id. The tree is keyed by the
//!   key's eight-byte head ([`IxKey::head`]); a head maps to the keys sharing it (one, for
//!   an `i64` key), each to one row id inline or to two or more in ascending order. A point
//!   lookup is one descent that compares packed integers, with no allocation when the key
//!   has one version (the common case).
//! - No head maps to no key and no key to no row; `entries` counts the pairs.
//!
//! # Ordering / concurrency
//! DRAM only, rebuilt at open; the table locks it (`RwLock`).

use std::collections::BTreeMap;
use std::ops::Bound;

use super::ixkey::IxKey;

/// The row ids of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Rows {
    One(u64),
    /// Two or more, ascending.
    Many(Vec<u64>),
}

impl Rows {
    /// The row ids, ascending.
    pub fn as_slice(&self) -> &[u64] {
        match self {
            Rows::One(r) => std::slice::from_ref(r),
            Rows::Many(v) => v,
        }
    }
}

/// A bound on index entries `(key, row id)`.
pub(super) type EntryBound = Bound<(IxKey, u64)>;

/// The keys sharing one head, with their row ids, ascending by key. An `i64` key is its head,
/// so its bucket holds one key: the tree's search reads only the packed `u64` heads.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bucket {
    One((IxKey, Rows)),
    /// Two or more, ascending by key.
    Many(Vec<(IxKey, Rows)>),
}

impl Bucket {
    fn as_slice(&self) -> &[(IxKey, Rows)] {
        match self {
            Bucket::One(p) => std::slice::from_ref(p),
            Bucket::Many(v) => v,
        }
    }

    fn rows_mut(&mut self, key: &IxKey) -> Option<&mut Rows> {
        match self {
            Bucket::One((k, r)) => (k == key).then_some(r),
            Bucket::Many(v) => v.iter_mut().find(|(k, _)| k == key).map(|(_, r)| r),
        }
    }
}

/// One index (see the module docs).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Index {
    map: BTreeMap<u64, Bucket>,
    entries: usize,
}

/// Adds `r` to `rows`; whether it was new.
fn add_row(rows: &mut Rows, r: u64) -> bool {
    match rows {
        Rows::One(x) if *x == r => false,
        Rows::One(x) => {
            let x = *x;
            *rows = Rows::Many(if x < r { vec![x, r] } else { vec![r, x] });
            true
        }
        Rows::Many(v) => match v.binary_search(&r) {
            Ok(_) => false,
            Err(i) => {
                v.insert(i, r);
                true
            }
        },
    }
}

/// Removes `r` from `rows`: `None` if absent, else whether `rows` is now empty.
fn remove_row(rows: &mut Rows, r: u64) -> Option<bool> {
    match rows {
        Rows::One(x) => (*x == r).then_some(true),
        Rows::Many(v) => {
            let i = v.binary_search(&r).ok()?;
            v.remove(i);
            if let [x] = v[..] {
                *rows = Rows::One(x);
            }
            Some(false)
        }
    }
}

impl Index {
    /// Adds `(key, r)`; returns whether it was new.
    pub fn insert(&mut self, key: IxKey, r: u64) -> bool {
        use std::collections::btree_map::Entry;
        let new = match self.map.entry(key.head()) {
            Entry::Vacant(v) => {
                v.insert(Bucket::One((key, Rows::One(r))));
                true
            }
            Entry::Occupied(mut o) => {
                let b = o.get_mut();
                if let Some(rows) = b.rows_mut(&key) {
                    add_row(rows, r)
                } else {
                    let mut v = match std::mem::replace(b, Bucket::Many(Vec::new())) {
                        Bucket::One(p) => vec![p],
                        Bucket::Many(v) => v,
                    };
                    let i = v.partition_point(|(k, _)| *k < key);
                    v.insert(i, (key, Rows::One(r)));
                    *b = Bucket::Many(v);
                    true
                }
            }
        };
        self.entries += usize::from(new);
        new
    }

    /// Removes `(key, r)`; returns whether it was there.
    pub fn remove(&mut self, key: &IxKey, r: u64) -> bool {
        let Some(b) = self.map.get_mut(&key.head()) else { return false };
        let gone = match b {
            Bucket::One((k, rows)) if k == key => match remove_row(rows, r) {
                Some(true) => {
                    self.map.remove(&key.head());
                    true
                }
                Some(false) => true,
                None => false,
            },
            Bucket::One(_) => false,
            Bucket::Many(v) => match v.iter().position(|(k, _)| k == key) {
                Some(i) => match remove_row(&mut v[i].1, r) {
                    Some(empty) => {
                        if empty {
                            v.remove(i);
                            if v.len() == 1 {
                                let p = v.remove(0);
                                *b = Bucket::One(p);
                            }
                        }
                        true
                    }
                    None => false,
                },
                None => false,
            },
        };
        self.entries -= usize::from(gone);
        gone
    }

    /// Whether the structure holds its invariants: `entries` counts the pairs, no key or head
    /// is empty, buckets and row lists are sorted, and every key sits under its own head.
    pub fn is_consistent(&self) -> bool {
        let mut n = 0;
        for (h, b) in &self.map {
            let v = b.as_slice();
            let sorted = v.windows(2).all(|w| w[0].0 < w[1].0);
            let many_ok = !matches!(b, Bucket::Many(v) if v.len() < 2);
            if !sorted || !many_ok || v.iter().any(|(k, _)| k.head() != *h) {
                return false;
            }
            for (_, rows) in v {
                let r = rows.as_slice();
                if r.is_empty() || !r.windows(2).all(|w| w[0] < w[1]) {
                    return false;
                }
                if matches!(rows, Rows::Many(v) if v.len() < 2) {
                    return false;
                }
                n += r.len();
            }
        }
        n == self.entries
    }

    /// The pairs held.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// The row ids of `key` (a copy: no allocation for a key with one version).
    pub fn rows(&self, key: &IxKey) -> Option<Rows> {
        let b = self.map.get(&key.head())?;
        b.as_slice().iter().find(|(k, _)| k == key).map(|(_, r)| r.clone())
    }

    /// Up to `max` entries within the entry bounds `(lo, hi)`, in entry order (descending if
    /// not `ascending`).
    pub fn candidates(
        &self,
        lo: &EntryBound,
        hi: &EntryBound,
        ascending: bool,
        max: usize,
    ) -> Vec<(IxKey, u64)> {
        let after_lo = |k: &IxKey, r: u64| match lo {
            Bound::Included((lk, lr)) => (k, r) >= (lk, *lr),
            Bound::Excluded((lk, lr)) => (k, r) > (lk, *lr),
            Bound::Unbounded => true,
        };
        let before_hi = |k: &IxKey, r: u64| match hi {
            Bound::Included((hk, hr)) => (k, r) <= (hk, *hr),
            Bound::Excluded((hk, hr)) => (k, r) < (hk, *hr),
            Bound::Unbounded => true,
        };
        // Heads bound keys from below (module invariant of `IxKey`): every entry in the
        // bounds has a head in `[head(lo), head(hi)]`; entries are filtered one by one.
        let head = |b: &EntryBound| match b {
            Bound::Included((k, _)) | Bound::Excluded((k, _)) => Bound::Included(k.head()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        let range = self.map.range((head(lo), head(hi)));
        let mut take = |k: &IxKey, r: u64| {
            if after_lo(k, r) && before_hi(k, r) {
                out.push((k.clone(), r));
            }
            out.len() < max
        };
        if ascending {
            for (_, b) in range {
                for (k, rows) in b.as_slice() {
                    if !rows.as_slice().iter().all(|&r| take(k, r)) {
                        return out;
                    }
                }
            }
        } else {
            for (_, b) in range.rev() {
                for (k, rows) in b.as_slice().iter().rev() {
                    if !rows.as_slice().iter().rev().all(|&r| take(k, r)) {
                        return out;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pmem::SplitMix64;
    use ferrite_pmem::internals::testing::test_seed;
    use std::collections::BTreeSet;

    /// Keys of 1, 4, 7 and 10 bytes padded with zeros (the first three of a byte share a head),
    /// some ending in 1.
    fn key(i: u64) -> IxKey {
        let mut b = vec![(i % 5) as u8];
        b.resize(1 + ((i / 5) % 4) as usize * 3, 0);
        if (i / 20) % 2 == 1 {
            b.push(1);
        }
        IxKey::new(&b)
    }

    /// The index against a `BTreeSet` of pairs as the model: random inserts, removes and
    /// bounded scans in both directions.
    #[test]
    fn agrees_with_a_set_of_pairs() {
        let seed = test_seed();
        eprintln!("seed {seed:#x} (FERRITE_TEST_SEED to replay)");
        let mut rng = SplitMix64::new(seed);
        let mut ix = Index::default();
        let mut model: BTreeSet<(IxKey, u64)> = BTreeSet::new();
        for step in 0..4000 {
            let (k, r) = (key(rng.next_u64() % 40), rng.next_u64() % 6);
            match rng.next_u64() % 4 {
                0 | 1 => assert_eq!(ix.insert(k.clone(), r), model.insert((k, r)), "{step}"),
                2 => assert_eq!(ix.remove(&k, r), model.remove(&(k, r)), "{step}"),
                _ => {
                    let b = |rng: &mut SplitMix64| {
                        let e = (key(rng.next_u64() % 40), rng.next_u64() % 7);
                        match rng.next_u64() % 3 {
                            0 => Bound::Included(e),
                            1 => Bound::Excluded(e),
                            _ => Bound::Unbounded,
                        }
                    };
                    let (lo, hi) = (b(&mut rng), b(&mut rng));
                    let max = (rng.next_u64() % 5) as usize + 1;
                    let valid = match (&lo, &hi) {
                        (
                            Bound::Included(a) | Bound::Excluded(a),
                            Bound::Included(b) | Bound::Excluded(b),
                        ) => a < b,
                        _ => true,
                    };
                    if valid {
                        let want: Vec<_> =
                            model.range((lo.clone(), hi.clone())).take(max).cloned().collect();
                        assert_eq!(ix.candidates(&lo, &hi, true, max), want, "{step}");
                        let want: Vec<_> = model
                            .range((lo.clone(), hi.clone()))
                            .rev()
                            .take(max)
                            .cloned()
                            .collect();
                        assert_eq!(ix.candidates(&lo, &hi, false, max), want, "{step}");
                    }
                }
            }
            assert_eq!(ix.len(), model.len());
            let k = key(rng.next_u64() % 40);
            let want: Vec<u64> =
                model.range((k.clone(), 0)..=(k.clone(), u64::MAX)).map(|p| p.1).collect();
            let got = ix.rows(&k);
            assert_eq!(got.as_ref().map_or(&[][..], Rows::as_slice), &want[..], "{step}");
        }
        assert!(ix.is_consistent());
    }
}
