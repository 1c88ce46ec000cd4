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
//! DRAM only, rebuilt at open (or in the background after it: `rebuild.rs`); the table locks
//! it (`RwLock`).

use std::collections::BTreeMap;
use std::ops::Bound;

use super::ixkey::IxKey;

/// The row ids of one key: one inline, or two or more ascending (16 bytes either way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Rows {
    One(u64),
    /// Two or more, ascending. Boxed: one pointer keeps `Rows` at 16 bytes (rare case).
    #[allow(clippy::box_collection)]
    Many(Box<Vec<u64>>),
}

impl Rows {
    /// The rows of an ascending list without duplicates (`None`: empty).
    pub fn from_sorted(mut rows: Vec<u64>) -> Option<Rows> {
        match rows.len() {
            0 => None,
            1 => rows.pop().map(Rows::One),
            _ => Some(Rows::Many(Box::new(rows))),
        }
    }

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

/// Whether entry `(k, r)` lies within the entry bounds `(lo, hi)`.
pub(super) fn entry_in(lo: &EntryBound, hi: &EntryBound, k: &IxKey, r: u64) -> bool {
    above_lo(lo, k, r) && below_hi(hi, k, r)
}

/// Whether the entry `(k, r)` is not below the lower entry bound `lo`.
pub(super) fn above_lo(lo: &EntryBound, k: &IxKey, r: u64) -> bool {
    match lo {
        Bound::Included((lk, lr)) => (k, r) >= (lk, *lr),
        Bound::Excluded((lk, lr)) => (k, r) > (lk, *lr),
        Bound::Unbounded => true,
    }
}

/// Whether the entry `(k, r)` is not above the upper entry bound `hi`.
pub(super) fn below_hi(hi: &EntryBound, k: &IxKey, r: u64) -> bool {
    match hi {
        Bound::Included((hk, hr)) => (k, r) <= (hk, *hr),
        Bound::Excluded((hk, hr)) => (k, r) < (hk, *hr),
        Bound::Unbounded => true,
    }
}

/// The keys sharing one head, with their row ids (24 bytes). Canonical form (so that two
/// indexes holding the same pairs are equal): `Short` iff the head holds exactly one key and
/// that key has at most eight bytes (an `i64` key, whose bytes the head holds).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bucket {
    /// One key of `len <= 8` bytes: the head's first `len` bytes.
    Short { len: u8, rows: Rows },
    /// Any other set of keys sharing the head, ordered. Boxed: one pointer keeps the tree's
    /// values small (the search reads keys; a smaller node is fewer lines and page faults).
    #[allow(clippy::box_collection)]
    Keys(Box<BTreeMap<IxKey, Rows>>),
}

const _: () = assert!(std::mem::size_of::<Bucket>() <= 24);

impl Bucket {
    /// The bucket of a single key.
    fn single(key: IxKey, rows: Rows) -> Bucket {
        let len = key.as_slice().len();
        if len <= 8 {
            Bucket::Short { len: len as u8, rows }
        } else {
            Bucket::Keys(Box::new(BTreeMap::from([(key, rows)])))
        }
    }

    /// Back to canonical form after a removal (`None`: empty).
    fn settle(self, head: u64) -> Option<Bucket> {
        match self {
            Bucket::Keys(m) if m.is_empty() => None,
            Bucket::Keys(m) if m.len() == 1 && m.keys().all(|k| k.as_slice().len() <= 8) => {
                let (k, rows) = m.into_iter().next()?;
                debug_assert_eq!(k.head(), head);
                Some(Bucket::single(k, rows))
            }
            b => Some(b),
        }
    }

    fn rows_mut(&mut self, head: u64, key: &IxKey) -> Option<&mut Rows> {
        match self {
            Bucket::Short { len, rows } => {
                (key.head() == head && key.as_slice().len() == usize::from(*len)).then_some(rows)
            }
            Bucket::Keys(m) => m.get_mut(key),
        }
    }

    fn rows(&self, head: u64, key: &IxKey) -> Option<&Rows> {
        match self {
            Bucket::Short { len, rows } => {
                (key.head() == head && key.as_slice().len() == usize::from(*len)).then_some(rows)
            }
            Bucket::Keys(m) => m.get(key),
        }
    }
}

/// The key of `len <= 8` bytes that `head` holds.
fn short_key(head: u64, len: u8) -> IxKey {
    IxKey::from_head(head, usize::from(len))
}

/// One index (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
            *rows = Rows::Many(Box::new(if x < r { vec![x, r] } else { vec![r, x] }));
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
        let head = key.head();
        let new = match self.map.entry(head) {
            Entry::Vacant(v) => {
                v.insert(Bucket::single(key, Rows::One(r)));
                true
            }
            Entry::Occupied(mut o) => {
                let b = o.get_mut();
                if let Some(rows) = b.rows_mut(head, &key) {
                    add_row(rows, r)
                } else {
                    let mut m = match std::mem::replace(b, Bucket::Keys(Box::default())) {
                        Bucket::Short { len, rows } => {
                            Box::new(BTreeMap::from([(short_key(head, len), rows)]))
                        }
                        Bucket::Keys(m) => m,
                    };
                    m.insert(key, Rows::One(r));
                    *b = Bucket::Keys(m);
                    true
                }
            }
        };
        self.entries += usize::from(new);
        new
    }

    /// Removes `(key, r)`; returns whether it was there.
    pub fn remove(&mut self, key: &IxKey, r: u64) -> bool {
        let head = key.head();
        let Some(b) = self.map.get_mut(&head) else { return false };
        let Some(rows) = b.rows_mut(head, key) else { return false };
        let Some(empty) = remove_row(rows, r) else { return false };
        if empty {
            // Whether the bucket may leave canonical form: it emptied, or one key is left.
            // (`remove_row` leaves a single emptied row id in place: the key goes.)
            let settle = match b {
                Bucket::Short { .. } => true,
                Bucket::Keys(m) => {
                    m.remove(key);
                    m.len() <= 1
                }
            };
            if settle
                && let Some(Bucket::Keys(m)) = self.map.remove(&head)
                && let Some(b) = Bucket::Keys(m).settle(head)
            {
                self.map.insert(head, b);
            }
        }
        self.entries -= 1;
        true
    }

    /// Whether the structure holds its invariants: `entries` counts the pairs, buckets are
    /// in canonical form with every key under its own head, and row lists are sorted and not
    /// empty.
    pub fn is_consistent(&self) -> bool {
        let rows_ok = |rows: &Rows| match rows {
            Rows::One(_) => true,
            Rows::Many(v) => v.len() >= 2 && v.windows(2).all(|w| w[0] < w[1]),
        };
        let mut n = 0;
        for (&h, b) in &self.map {
            match b {
                Bucket::Short { len, rows } => {
                    if *len > 8 || !rows_ok(rows) || short_key(h, *len).head() != h {
                        return false;
                    }
                    n += rows.as_slice().len();
                }
                Bucket::Keys(m) => {
                    let canonical = m.len() >= 2 || m.keys().any(|k| k.as_slice().len() > 8);
                    if !canonical || m.iter().any(|(k, rows)| k.head() != h || !rows_ok(rows)) {
                        return false;
                    }
                    n += m.values().map(|r| r.as_slice().len()).sum::<usize>();
                }
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
        let head = key.head();
        self.map.get(&head)?.rows(head, key).cloned()
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
        // The bounds' keys, included (their rows are filtered one by one). Heads bound keys
        // from below (`IxKey`'s invariant): every entry in the bounds has a head in
        // `[head(lo), head(hi)]`.
        let key = |b: &EntryBound| match b {
            Bound::Included((k, _)) | Bound::Excluded((k, _)) => Bound::Included(k.clone()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (klo, khi) = (key(lo), key(hi));
        let mut out = Vec::new();
        if let (Bound::Included(a), Bound::Included(b)) = (&klo, &khi)
            && a > b
        {
            return out;
        }
        if max == 0 {
            return out;
        }
        let head = |b: &Bound<IxKey>| match b {
            Bound::Included(k) => Bound::Included(k.head()),
            _ => Bound::Unbounded,
        };
        let range = self.map.range((head(&klo), head(&khi)));
        let mut take = |k: &IxKey, r: u64| {
            if entry_in(lo, hi, k, r) {
                out.push((k.clone(), r));
            }
            out.len() < max
        };
        let inner = (klo.as_ref(), khi.as_ref());
        if ascending {
            for (&h, b) in range {
                match b {
                    Bucket::Short { len, rows } => {
                        let k = short_key(h, *len);
                        if !rows.as_slice().iter().all(|&r| take(&k, r)) {
                            break;
                        }
                    }
                    Bucket::Keys(m) => {
                        if !m
                            .range::<IxKey, _>(inner)
                            .all(|(k, rows)| rows.as_slice().iter().all(|&r| take(k, r)))
                        {
                            break;
                        }
                    }
                }
            }
        } else {
            for (&h, b) in range.rev() {
                match b {
                    Bucket::Short { len, rows } => {
                        let k = short_key(h, *len);
                        if !rows.as_slice().iter().rev().all(|&r| take(&k, r)) {
                            break;
                        }
                    }
                    Bucket::Keys(m) => {
                        if !m
                            .range::<IxKey, _>(inner)
                            .rev()
                            .all(|(k, rows)| rows.as_slice().iter().rev().all(|&r| take(k, r)))
                        {
                            break;
                        }
                    }
                }
            }
        }
        out
    }
}

/// A random entry bound over `keys` keys and `rows` row ids (for the randomized tests).
#[cfg(test)]
pub(super) fn random_bound(
    rng: &mut ferrite_pmem::SplitMix64,
    key: impl Fn(u64) -> IxKey,
    keys: u64,
    rows: u64,
) -> EntryBound {
    let e = (key(rng.next_u64() % keys), rng.next_u64() % rows);
    match rng.next_u64() % 3 {
        0 => Bound::Included(e),
        1 => Bound::Excluded(e),
        _ => Bound::Unbounded,
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
        for step in 0..20_000 {
            let (k, r) = (key(rng.next_u64() % 40), rng.next_u64() % 6);
            match rng.next_u64() % 4 {
                0 | 1 => assert_eq!(ix.insert(k.clone(), r), model.insert((k, r)), "{step}"),
                2 => assert_eq!(ix.remove(&k, r), model.remove(&(k, r)), "{step}"),
                _ => {
                    let b = |rng: &mut SplitMix64| random_bound(rng, key, 40, 7);
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
            assert!(ix.is_consistent(), "{step}");
            let k = key(rng.next_u64() % 40);
            let want: Vec<u64> =
                model.range((k.clone(), 0)..=(k.clone(), u64::MAX)).map(|p| p.1).collect();
            let got = ix.rows(&k);
            assert_eq!(got.as_ref().map_or(&[][..], Rows::as_slice), &want[..], "{step}");
        }
        assert!(ix.is_consistent());
    }
}
