//! Backward validation at commit: a read-write transaction with snapshot `s` may commit only if
//! nothing it read or wrote changed after `s`.
//!
//! # Invariants
//! - V1 (what [`validate`] checks): no key in the read set and no key in the write set has a
//!   commit after `s` ([`Committed::latest_change`]), and no recorded range changed after `s`
//!   ([`Committed::range_changed`]). Then every read returns at commit time what it returned
//!   at `s`, so the transaction is equivalent to running alone at its commit point; committed
//!   read-write transactions are serializable in commit order. First committer wins: the
//!   transaction validating later aborts with `Conflict`.
//! - V2: when nothing committed after `s` ([`Committed::last_commit`] `<= s`) validation
//!   passes without looking at the sets.
//! - V3: the engine calls [`validate`] with commits held out (C4) and applies the write set
//!   before admitting the next commit; validating and applying are one critical section.
//!
//! # Ordering and concurrency
//! Reads the engine's view only.

use super::Committed;
use super::reads::{ReadKind, ReadSet};
use super::writes::WriteSet;
use crate::error::{Error, Result};

/// V1/V2: `Ok` if the transaction with snapshot `snapshot` may commit, `Conflict` if not.
pub(crate) fn validate<C: Committed + ?Sized>(
    reads: &ReadSet,
    writes: &WriteSet,
    committed: &C,
    snapshot: u64,
) -> Result<()> {
    if committed.last_commit() <= snapshot {
        return Ok(());
    }
    let after = |ts: Option<u64>| ts.is_some_and(|ts| ts > snapshot);
    for r in reads.iter() {
        let table = r.table.name();
        match &r.kind {
            ReadKind::Key(pk) => {
                if after(committed.latest_change(&r.table, pk)?) {
                    return Err(Error::conflict(format!(
                        "table {table:?}: a row this transaction read was changed by a \
                         transaction that committed first"
                    )));
                }
            }
            ReadKind::Range { path, range } => {
                if committed.range_changed(&r.table, *path, range, snapshot)? {
                    return Err(Error::conflict(format!(
                        "table {table:?}: a range this transaction scanned was changed by a \
                         transaction that committed first"
                    )));
                }
            }
        }
    }
    for tw in writes.tables() {
        for pk in tw.rows.keys() {
            if after(committed.latest_change(&tw.table, pk)?) {
                return Err(Error::conflict(format!(
                    "table {:?}: a row this transaction wrote was changed by a transaction \
                     that committed first",
                    tw.table.name()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;
    use std::sync::Arc;

    use super::*;
    use crate::encoding::{ByteRange, encode_key};
    use crate::engine::common::testing::{MapView, row, table};
    use crate::query::AccessPath;
    use crate::value::Value;

    fn pk(k: i64) -> Vec<u8> {
        encode_key([&Value::I64(k)])
    }

    /// Rows 1..=5 committed at 1; the transaction's snapshot is 1.
    fn setup() -> (Arc<crate::schema::Table>, MapView) {
        let t = Arc::new(table());
        let mut v = MapView::new(&t);
        for k in 1..=5 {
            v.commit(row(k, k, &format!("b{k}")), 1);
        }
        (t, v)
    }

    fn is_conflict(r: Result<()>) -> bool {
        matches!(r, Err(Error::Conflict { .. }))
    }

    #[test]
    fn nothing_committed_since_passes() {
        let (t, v) = setup();
        let mut reads = ReadSet::new(true);
        reads.key(&t, &pk(1));
        assert!(validate(&reads, &WriteSet::new(), &v, 1).is_ok());
    }

    #[test]
    fn key_reads_and_writes_conflict_with_later_commits() {
        let (t, mut v) = setup();
        v.commit(row(2, 20, "b2"), 2);
        let mut reads = ReadSet::new(true);
        reads.key(&t, &pk(1));
        assert!(validate(&reads, &WriteSet::new(), &v, 1).is_ok(), "key 1 did not change");
        reads.key(&t, &pk(2));
        assert!(is_conflict(validate(&reads, &WriteSet::new(), &v, 1)));
        // A key read that did not exist and still does not is unchanged.
        let mut absent = ReadSet::new(true);
        absent.key(&t, &pk(42));
        assert!(validate(&absent, &WriteSet::new(), &v, 1).is_ok());
        // A blind write of a changed key conflicts too (write-write).
        let mut w = WriteSet::new();
        w.buffer(&t, pk(2), None, false);
        assert!(is_conflict(validate(&ReadSet::new(true), &w, &v, 1)));
        // Validated at snapshot 2 the same sets pass.
        assert!(validate(&reads, &w, &v, 2).is_ok());
    }

    #[test]
    fn scan_ranges_see_phantoms_and_ignore_changes_outside() {
        let (t, mut v) = setup();
        // The transaction scanned primary keys [2, 4] and index by_a for a in [1, 2].
        let prim = ByteRange::from_prefix_bounds(Bound::Included(pk(2)), Bound::Included(pk(4)));
        let by_a = ByteRange::from_prefix_bounds(
            Bound::Included(encode_key([&Value::I64(1)])),
            Bound::Included(encode_key([&Value::I64(2)])),
        );
        let mut reads = ReadSet::new(true);
        reads.range(&t, AccessPath::Primary, prim.clone());
        reads.range(&t, AccessPath::Index(0), by_a.clone());
        // A commit outside both ranges: row 5 gets a = 50.
        v.commit(row(5, 50, "b5"), 2);
        assert!(validate(&reads, &WriteSet::new(), &v, 1).is_ok());
        // A phantom inserted inside the primary range (key 3 is taken; use an index phantom
        // first): row 9 with a = 2 lands in the by_a range.
        v.commit(row(9, 2, "b9"), 3);
        assert!(is_conflict(validate(&reads, &WriteSet::new(), &v, 1)));
        // Moving a row *out* of the scanned index range is a change too: its old entry (still
        // held, C3) points at a key written after the snapshot.
        let (t, mut v) = setup();
        let mut reads = ReadSet::new(true);
        reads.range(&t, AccessPath::Index(0), by_a);
        v.commit(row(1, 100, "b1"), 2);
        assert!(is_conflict(validate(&reads, &WriteSet::new(), &v, 1)));
        // A delete inside a primary range is seen through its tombstone.
        let (t, mut v) = setup();
        let mut reads = ReadSet::new(true);
        reads.range(&t, AccessPath::Primary, prim);
        v.delete(&pk(3), 2);
        assert!(is_conflict(validate(&reads, &WriteSet::new(), &v, 1)));
    }
}
