//! The read set: what a read-write transaction read, for validation at commit.
//!
//! # Invariants
//! - RS1: every key a read-write transaction looked up (`get`, and the key an `insert`,
//!   `update` or `delete` probed) is recorded as a [`ReadKind::Key`]; every range it scanned
//!   (scans, selects, unique-index probes) as a [`ReadKind::Range`] on its access path,
//!   narrowed to the part the scan examined when a limit stopped it early.
//! - RS2: a read set that does not track (read-only transactions, serialized at their
//!   snapshot) records nothing; empty ranges are never recorded.
//!
//! # Ordering and concurrency
//! DRAM only, owned by one transaction.

use std::sync::Arc;

use crate::encoding::ByteRange;
use crate::query::AccessPath;
use crate::schema::Table;

/// What was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// One encoded primary key.
    Key(Vec<u8>),
    /// Every key of `path` within `range`.
    Range {
        /// The access path scanned.
        path: AccessPath,
        /// The examined range.
        range: ByteRange,
    },
}

/// One recorded read.
#[derive(Clone, Debug)]
pub(crate) struct Read {
    /// The table read.
    pub table: Arc<Table>,
    /// What of it.
    pub kind: ReadKind,
}

/// A transaction's read set.
#[derive(Clone, Debug)]
pub(crate) struct ReadSet {
    tracking: bool,
    reads: Vec<Read>,
}

impl ReadSet {
    /// A read set that records (`tracking`) or ignores every read (RS2).
    pub fn new(tracking: bool) -> Self {
        ReadSet { tracking, reads: Vec::new() }
    }

    /// Records a key lookup.
    pub fn key(&mut self, table: &Arc<Table>, pk: &[u8]) {
        if self.tracking {
            self.reads.push(Read { table: Arc::clone(table), kind: ReadKind::Key(pk.to_vec()) });
        }
    }

    /// Records a scanned range.
    pub fn range(&mut self, table: &Arc<Table>, path: AccessPath, range: ByteRange) {
        if self.tracking && !range.is_empty() {
            self.reads
                .push(Read { table: Arc::clone(table), kind: ReadKind::Range { path, range } });
        }
    }

    /// The recorded reads, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Read> {
        self.reads.iter()
    }

    /// Number of recorded reads.
    pub fn len(&self) -> usize {
        self.reads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::common::testing::table;

    #[test]
    fn records_only_when_tracking_and_never_empty_ranges() {
        let t = Arc::new(table());
        let mut off = ReadSet::new(false);
        off.key(&t, b"k");
        off.range(&t, AccessPath::Primary, ByteRange::all());
        assert_eq!(off.len(), 0);

        let mut on = ReadSet::new(true);
        on.key(&t, b"k");
        on.range(&t, AccessPath::Index(0), ByteRange::empty());
        on.range(&t, AccessPath::Index(0), ByteRange::all());
        assert_eq!(on.len(), 2);
        let kinds: Vec<&ReadKind> = on.iter().map(|r| &r.kind).collect();
        assert_eq!(kinds[0], &ReadKind::Key(b"k".to_vec()));
        assert_eq!(
            kinds[1],
            &ReadKind::Range { path: AccessPath::Index(0), range: ByteRange::all() }
        );
    }
}
