//! Persistent pointers: the dissertation's 16-byte (segment id, offset) pointer for pool sets
//! and an 8-byte offset for single-segment structures (seed 001 §3.2.1 and §3.4.2; spec
//! `../shared/specs/scm-and-pallocator.md` §2.2).
//!
//! A persistent pointer never holds a virtual address: addresses change at every open. It is
//! resolved through the open [`PoolSet`](crate::PoolSet) (or [`Pool`](crate::Pool)) value that
//! owns it — there is no process-global registry, so two pool sets in one process cannot
//! interfere.
//!
//! # Invariants
//! - [`PPtr`] is 16 bytes, 16-byte aligned, so both words share one cache line. Null is
//!   `segment == u64::MAX` (the offset is then meaningless).
//! - [`POff`] is 8 bytes; null is 0 (offset 0 of a data area is never an object: the first
//!   line of every data area is reserved for its root).
//!
//! # Ordering (P-PM-10)
//! Storing a 16-byte pointer is not failure-atomic, so the segment word is the commit word:
//! - null → valid: store `offset`, then `segment` with `Release`. Recovery sees either the old
//!   null (segment still `u64::MAX`) or the complete pointer — *provided* the offset becomes
//!   durable no later than the segment. [`Space::persist_pptr`](crate::Space::persist_pptr)
//!   guarantees that without axiom M2 by persisting the offset first (2 flushes, 2 fences);
//!   [`Space::persist_pptr_m2`](crate::Space::persist_pptr_m2) relies on M2 (same-line stores
//!   persist in order) and needs 1 flush and 1 fence. Use the latter only in structures that
//!   declare M2.
//! - valid → null: one 8-byte store of `segment = u64::MAX` (M1), then persist.
//! - Valid → another valid value is not atomic: go through null, or log the old value.

use std::sync::atomic::Ordering;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::Result;
use crate::space::Space;

/// Identifier of a segment of a pool set (its file is `seg-<id>.pm`).
pub type SegmentId = u64;

/// A 16-byte persistent pointer: (segment id, byte offset inside that segment's data area).
#[repr(C, align(16))]
#[derive(Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PPtr {
    /// Segment id; `u64::MAX` is null.
    pub segment: u64,
    /// Offset inside the segment's data area.
    pub offset: u64,
}

const _: () = assert!(size_of::<PPtr>() == 16 && align_of::<PPtr>() == 16);

impl PPtr {
    /// The null pointer.
    pub const NULL: PPtr = PPtr { segment: u64::MAX, offset: 0 };

    /// A pointer to `offset` in `segment`.
    pub const fn new(segment: SegmentId, offset: u64) -> PPtr {
        PPtr { segment, offset }
    }

    /// Whether this is null.
    pub const fn is_null(&self) -> bool {
        self.segment == u64::MAX
    }
}

impl Default for PPtr {
    fn default() -> Self {
        PPtr::NULL
    }
}

impl std::fmt::Debug for PPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_null() {
            f.write_str("PPtr(null)")
        } else {
            write!(f, "PPtr({}:{:#x})", self.segment, self.offset)
        }
    }
}

/// An 8-byte persistent offset into one data area (a single-file pool or one segment);
/// 0 is null. Stored and updated with one atomic 8-byte store.
#[repr(transparent)]
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
)]
pub struct POff(pub u64);

impl POff {
    /// The null offset.
    pub const NULL: POff = POff(0);

    /// Whether this is null.
    pub const fn is_null(&self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Debug for POff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_null() { f.write_str("POff(null)") } else { write!(f, "POff({:#x})", self.0) }
    }
}

impl Space {
    /// Reads the 16-byte pointer stored at `loc` (16-aligned): the segment word with
    /// `Acquire`, then the offset, so a concurrent null → valid publication is seen whole.
    pub fn load_pptr(&self, loc: u64) -> Result<PPtr> {
        if !loc.is_multiple_of(16) {
            return Err(crate::Error::Misaligned { off: loc, align: 16 });
        }
        let segment = self.load_u64(loc, Ordering::Acquire)?;
        let offset = self.load_u64(loc + 8, Ordering::Relaxed)?;
        Ok(PPtr { segment, offset })
    }

    /// Durably stores `p` at `loc` without relying on axiom M2 (P-PM-10): the offset is
    /// persisted before the segment word is stored and persisted. 2 flushes, 2 fences.
    #[track_caller]
    pub fn persist_pptr(&self, loc: u64, p: PPtr) -> Result<()> {
        if !loc.is_multiple_of(16) {
            return Err(crate::Error::Misaligned { off: loc, align: 16 });
        }
        self.store_u64(loc + 8, p.offset, Ordering::Relaxed)?;
        // Each persist is a site of its own (`#P-PM-10:offset`, `#P-PM-10:segment` after the
        // caller's location), so a mutation check can drop one without the other.
        self.persist_rule("P-PM-10:offset", loc + 8, 8)?; // ORDER(P-PM-10): offset durable before the segment word
        self.store_u64(loc, p.segment, Ordering::Release)?;
        self.persist_rule("P-PM-10:segment", loc, 8) // ORDER(P-PM-10): the segment word commits the pointer
    }

    /// Durably stores `p` at `loc` relying on axiom M2 (same-line stores persist in program
    /// order): offset, then segment (`Release`), one persist. 1 flush, 1 fence.
    #[track_caller]
    pub fn persist_pptr_m2(&self, loc: u64, p: PPtr) -> Result<()> {
        if !loc.is_multiple_of(16) {
            return Err(crate::Error::Misaligned { off: loc, align: 16 });
        }
        self.store_u64(loc + 8, p.offset, Ordering::Relaxed)?;
        self.store_u64(loc, p.segment, Ordering::Release)?;
        self.persist(loc, 16) // ORDER(P-PM-10): one line; M2 orders offset before segment
    }

    /// Durably nulls the pointer at `loc`: one failure-atomic store of the segment word.
    #[track_caller]
    pub fn persist_pptr_null(&self, loc: u64) -> Result<()> {
        if !loc.is_multiple_of(16) {
            return Err(crate::Error::Misaligned { off: loc, align: 16 });
        }
        self.store_u64(loc, PPtr::NULL.segment, Ordering::Release)?;
        self.persist(loc, 8) // ORDER(P-PM-10): valid -> null is one 8-byte store (M1)
    }
}
