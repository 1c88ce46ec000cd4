//! Optimistic version locks (the seqlock recipe of conventions §2.4), written once against a
//! tiny word abstraction ([`VersionWord`]) so the same protocol code drives the DRAM inner
//! nodes (`AtomicU64`, [`super::olc`]), the lock word of a leaf in persistent memory
//! ([`PmWord`], through the pool set's checked `load_u64`/`cas_u64`/`store_u64`) and, under
//! `--cfg loom`, loom's model-checked atomics. Design: `docs/design/fptree.md`, "Concurrency
//! (part II)".
//!
//! # Invariants
//! - VL1 (encoding): bit 0 of the word is the lock bit (odd = locked, even = unlocked); bit 63
//!   is the obsolete bit (the node or leaf was removed: readers and writers must restart from
//!   the root); bits 1..=62 count modifications. The word only grows while it is in use: a
//!   lock adds 1, an unlock that changed data adds 1 more (so a modification moves the word by
//!   2), an unchanged unlock restores the word it locked. Counting from 0, the counter would
//!   need 2^61 modifications of one node to wrap.
//! - VL2 (mutual exclusion): only a successful CAS from an even, non-obsolete value to that
//!   value + 1 locks a word ([`VersionLock::try_upgrade`], [`VersionLock::try_lock`],
//!   [`VersionLock::lock`], [`VersionLock::claim`]); only the holder of the resulting
//!   [`Locked`] token stores to it, and every unlock consumes the token.
//! - VL3 (reader validation): a reader's snapshot [`Version`] is even and not obsolete; the
//!   reader accepts what it read only if the word still equals the snapshot after its data
//!   loads ([`VersionLock::validate`]). A writer that changed any data between the two loads
//!   moved the word (VL1), so a torn or half-updated state is never accepted.
//! - VL4 (reuse): a removed node is left obsolete; [`VersionLock::claim`] revives it with a
//!   value above every version it had before, so a reader holding a snapshot of the old
//!   incarnation can never validate against the new one (no ABA).
//!
//! - VL5 (epochs, leaf lock words): [`EpochWord`] keeps the epoch of the open that wrote a
//!   word in bits 40..=62; a word of another epoch reads as unlocked, live and count 0 of the
//!   current one. An open persists a new epoch before any thread locks a leaf (P-FPT-30), so a
//!   word left odd by a crashed process never locks a leaf, and no recovery walk has to reset
//!   it.
//!
//! # Ordering
//! Reader: `v1 = load(Acquire)`, relaxed data loads into a local copy, `fence(Acquire)`,
//! `v2 = load(Relaxed)`, accept iff `v1 == v2` (and `v1` even). Writer: CAS to odd (`Acquire`
//! on success), `fence(Release)`, relaxed data stores, then `store(+1, Release)`. The writer's
//! release fence sits between its lock CAS and its first data store: a reader whose relaxed
//! load sees any of the writer's stores synchronizes (through its own acquire fence) with
//! that fence, so its second version load sees at least the odd lock value and the read is
//! refused. The unlock's `Release` publishes all data stores to the next reader's `Acquire`.
//!
//! # The leaf-lock protocol (persistent leaves)
//! The lock word of an FPTree leaf (`L_LOCK`, in line 0 beside the bitmap) is a version word
//! of this module, accessed through [`PmWord`]:
//! - a writer CASes it even → odd ([`VersionLock::try_lock`] / [`VersionLock::lock`]), makes
//!   and persists its leaf changes (the leaf's own persist order, P-FPT-n, is unchanged), then
//!   stores +1 with `Release` ([`VersionLock::unlock`]). The word itself is never flushed
//!   explicitly; it may reach PM by eviction or along with a flush of line 0, odd or even;
//! - a reader reads the leaf optimistically (relaxed word loads through the pool set) and
//!   validates ([`VersionLock::optimistic`]); what it read is garbage until validated, and the
//!   access layer returns `Err`, never panics, on an offset read that way;
//! - a leaf removed from the list is unlocked obsolete ([`VersionLock::unlock_obsolete`]) so
//!   readers and writers that reached it restart from the index;
//! - no recovery writes a leaf's word: the tree's words are [`EpochWord`]s (VL5), and every
//!   open moves the tree's epoch on durably before any thread locks a leaf (P-FPT-30), so a
//!   word written back while odd reads unlocked, count 0 of the new epoch. Only when the epoch
//!   field wraps does an open store 0 into every leaf's word (and persist it), before
//!   any thread uses the tree. No version outlives the open that read it. (An earlier design
//!   reset every word in the recovery walk; the persistent placement walks no leaf.)
//!
//! # Concurrency
//! Every method takes `&self`; the word types are `Send + Sync`. [`VersionLock::lock`] and
//! [`VersionLock::read_begin_wait`] wait (spin a bounded number of rounds, then yield);
//! everything else is non-blocking.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_pmem::Space;

use crate::storage::{StorageError, StorageResult};

/// The lock bit (VL1).
pub const LOCKED: u64 = 1;
/// The obsolete bit (VL1).
pub const OBSOLETE: u64 = 1 << 63;

/// Spin rounds before [`VersionWord::pause`] starts yielding the processor.
const SPIN_ROUNDS: u32 = 64;

/// One 8-byte word that can carry a version lock: the access primitives the protocol needs.
pub trait VersionWord {
    /// What an access can fail with (`Infallible` for DRAM words).
    type Error;
    /// An atomic load.
    fn load(&self, ord: Ordering) -> Result<u64, Self::Error>;
    /// An atomic store.
    fn store(&self, val: u64, ord: Ordering) -> Result<(), Self::Error>;
    /// A strong compare-and-swap: `Ok(Ok(previous))` when it stored `new`, `Ok(Err(actual))`
    /// otherwise.
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>, Self::Error>;
    /// A memory fence of the word's memory model (`std`'s or loom's).
    fn fence(ord: Ordering);
    /// Backs off in round `round` of a wait: a spin hint for the first rounds, then a yield.
    fn pause(round: u32) {
        if round < SPIN_ROUNDS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl VersionWord for AtomicU64 {
    type Error = Infallible;

    #[inline]
    fn load(&self, ord: Ordering) -> Result<u64, Infallible> {
        Ok(AtomicU64::load(self, ord))
    }

    #[inline]
    fn store(&self, val: u64, ord: Ordering) -> Result<(), Infallible> {
        AtomicU64::store(self, val, ord);
        Ok(())
    }

    #[inline]
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>, Infallible> {
        Ok(self.compare_exchange(current, new, success, failure))
    }

    #[inline]
    fn fence(ord: Ordering) {
        std::sync::atomic::fence(ord);
    }
}

/// The lock word of a leaf in persistent memory: a global offset in a pool set's space
/// (`PoolSet` dereferences to [`Space`]). Every access is bounds- and alignment-checked by the
/// space: a bad offset is `Err`, never a fault or a panic.
#[derive(Clone, Copy, Debug)]
pub struct PmWord<'a> {
    space: &'a Space,
    off: u64,
}

impl<'a> PmWord<'a> {
    /// The word at global offset `off` (8-aligned) of `space`. Checked on every access.
    pub fn new(space: &'a Space, off: u64) -> Self {
        PmWord { space, off }
    }

    /// The word's offset.
    pub fn offset(&self) -> u64 {
        self.off
    }
}

impl VersionWord for PmWord<'_> {
    type Error = StorageError;

    #[inline]
    fn load(&self, ord: Ordering) -> StorageResult<u64> {
        Ok(self.space.load_u64(self.off, ord)?)
    }

    #[inline]
    fn store(&self, val: u64, ord: Ordering) -> StorageResult<()> {
        Ok(self.space.store_u64(self.off, val, ord)?)
    }

    #[inline]
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> StorageResult<Result<u64, u64>> {
        Ok(self.space.cas_u64(self.off, current, new, success, failure)?)
    }

    #[inline]
    fn fence(ord: Ordering) {
        std::sync::atomic::fence(ord);
    }
}

/// First bit of the epoch field of a leaf lock word (VL5).
pub const EPOCH_SHIFT: u32 = 40;
/// The largest epoch: the field is bits 40..=62 (bit 63 stays the obsolete bit).
pub const MAX_EPOCH: u64 = (1 << (63 - EPOCH_SHIFT)) - 1;
/// The epoch field of a word.
const EPOCH_MASK: u64 = MAX_EPOCH << EPOCH_SHIFT;

/// A version word tagged with the epoch of the open that wrote it (VL5): the leaf lock words
/// of a tree, which no recovery walk resets (`docs/design/fptree.md`, "The concurrent tree").
///
/// A word whose epoch field differs from this open's epoch was written by an earlier process
/// (or never: a zeroed word is epoch 0, and epochs start at 1); it reads as
/// `epoch << EPOCH_SHIFT`, i.e. unlocked, live, count 0 of this epoch, whatever its lock and
/// obsolete bits say. A CAS from that normalised value replaces the raw stale word, so the
/// first lock of a leaf in an open also retires the stale value. Every value this wrapper
/// stores carries the current epoch (it is derived from a normalised load), so the count has
/// bits 0..=39 to itself: 2^39 modifications of one leaf in one open.
#[derive(Clone, Copy, Debug)]
pub struct EpochWord<W> {
    inner: W,
    /// The epoch, shifted into place.
    tag: u64,
}

impl<W: VersionWord> EpochWord<W> {
    /// `inner` seen in `epoch` (1..=[`MAX_EPOCH`]; other values are `InvalidArgument`).
    pub fn new(inner: W, epoch: u64) -> StorageResult<Self> {
        if epoch == 0 || epoch > MAX_EPOCH {
            return Err(StorageError::InvalidArgument(format!(
                "lock-word epoch {epoch} outside 1..={MAX_EPOCH}"
            )));
        }
        Ok(EpochWord { inner, tag: epoch << EPOCH_SHIFT })
    }

    /// The wrapped word.
    pub fn inner(&self) -> &W {
        &self.inner
    }

    #[inline]
    fn normalise(&self, raw: u64) -> u64 {
        if raw & EPOCH_MASK == self.tag { raw } else { self.tag }
    }
}

impl<W: VersionWord> VersionWord for EpochWord<W> {
    type Error = W::Error;

    #[inline]
    fn load(&self, ord: Ordering) -> Result<u64, W::Error> {
        Ok(self.normalise(self.inner.load(ord)?))
    }

    #[inline]
    fn store(&self, val: u64, ord: Ordering) -> Result<(), W::Error> {
        // `reset` stores 0, a stale value that reads as count 0 of this epoch; every other
        // store carries the epoch already.
        self.inner.store(val, ord)
    }

    #[inline]
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>, W::Error> {
        // The normalised `current` may stand for a raw stale word: CAS against the raw value
        // that normalises to it. Only a CAS or store of this epoch's values changes a stale
        // word, so a raw value that changes between the load and the CAS fails the CAS.
        let raw = self.inner.load(Ordering::Relaxed)?;
        if self.normalise(raw) != current {
            return Ok(Err(self.normalise(raw)));
        }
        Ok(match self.inner.cas(raw, new, success, failure)? {
            Ok(_) => Ok(current),
            Err(now) => Err(self.normalise(now)),
        })
    }

    #[inline]
    fn fence(ord: Ordering) {
        W::fence(ord);
    }

    #[inline]
    fn pause(round: u32) {
        W::pause(round);
    }
}

/// A reader's snapshot of an unlocked, live word (VL3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version(u64);

impl Version {
    /// A value for unused slots of fixed-size arrays of snapshots; never validated (a
    /// placeholder is only overwritten).
    pub(crate) const PLACEHOLDER: Version = Version(0);

    /// The raw word.
    pub fn raw(self) -> u64 {
        self.0
    }
}

/// Proof of holding a word's lock: the odd value the word holds. Consumed by every unlock.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a held lock must be released with unlock, unlock_unchanged or unlock_obsolete"]
pub struct Locked(u64);

impl Locked {
    /// The odd value the locked word holds.
    pub fn raw(&self) -> u64 {
        self.0
    }
}

/// The outcome of a non-blocking lock attempt.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum TryLock {
    /// Locked by the caller.
    Acquired(Locked),
    /// Locked by someone else, or changed since the snapshot (for [`VersionLock::try_upgrade`]).
    Busy,
    /// The node or leaf was removed: restart from the root.
    Obsolete,
}

/// The protocol of VL1–VL4 over any [`VersionWord`] (blanket-implemented).
pub trait VersionLock: VersionWord {
    /// A snapshot for an optimistic read, or `None` if the word is locked or obsolete (the
    /// caller restarts or waits).
    #[inline]
    fn read_begin(&self) -> Result<Option<Version>, Self::Error> {
        let v = self.load(Ordering::Acquire)?;
        Ok((v & (LOCKED | OBSOLETE) == 0).then_some(Version(v)))
    }

    /// A snapshot, waiting while the word is locked (bounded spin, then yield); `None` only if
    /// the word is obsolete.
    fn read_begin_wait(&self) -> Result<Option<Version>, Self::Error> {
        let mut round = 0u32;
        loop {
            let v = self.load(Ordering::Acquire)?;
            if v & OBSOLETE != 0 {
                return Ok(None);
            }
            if v & LOCKED == 0 {
                return Ok(Some(Version(v)));
            }
            Self::pause(round);
            round = round.saturating_add(1);
        }
    }

    /// Whether nothing changed since `v` was taken: everything loaded after `read_begin` and
    /// before this call is a consistent view (VL3).
    #[inline]
    fn validate(&self, v: Version) -> Result<bool, Self::Error> {
        Self::fence(Ordering::Acquire);
        Ok(self.load(Ordering::Relaxed)? == v.0)
    }

    /// Locks the word if it still holds the snapshot `v` (a reader becoming a writer without
    /// losing what it read).
    #[inline]
    fn try_upgrade(&self, v: Version) -> Result<TryLock, Self::Error> {
        match self.cas(v.0, v.0 | LOCKED, Ordering::Acquire, Ordering::Relaxed)? {
            Ok(_) => {
                Self::fence(Ordering::Release);
                Ok(TryLock::Acquired(Locked(v.0 | LOCKED)))
            }
            Err(now) if now & OBSOLETE != 0 => Ok(TryLock::Obsolete),
            Err(_) => Ok(TryLock::Busy),
        }
    }

    /// Locks the word if it is unlocked and live, without waiting.
    #[inline]
    fn try_lock(&self) -> Result<TryLock, Self::Error> {
        let v = self.load(Ordering::Relaxed)?;
        if v & OBSOLETE != 0 {
            return Ok(TryLock::Obsolete);
        }
        if v & LOCKED != 0 {
            return Ok(TryLock::Busy);
        }
        self.try_upgrade(Version(v))
    }

    /// Locks the word, waiting while someone else holds it (bounded spin, then yield);
    /// `None` if it is (or becomes) obsolete.
    fn lock(&self) -> Result<Option<Locked>, Self::Error> {
        let mut round = 0u32;
        loop {
            match self.try_lock()? {
                TryLock::Acquired(l) => return Ok(Some(l)),
                TryLock::Obsolete => return Ok(None),
                TryLock::Busy => {
                    Self::pause(round);
                    round = round.saturating_add(1);
                }
            }
        }
    }

    /// Locks a word that its caller owns exclusively and that no one can lock (a node just
    /// taken from a free list, or never used): an obsolete word is revived above every
    /// version it had (VL4), an unlocked one is locked. `None` if the word is locked, which
    /// means the caller's ownership claim is wrong.
    fn claim(&self) -> Result<Option<Locked>, Self::Error> {
        let v = self.load(Ordering::Relaxed)?;
        if v & LOCKED != 0 {
            return Ok(None);
        }
        // VL1: an obsolete word holds an even count; +1 makes it a locked value above it.
        let locked = (v & !OBSOLETE) | LOCKED;
        match self.cas(v, locked, Ordering::Acquire, Ordering::Relaxed)? {
            Ok(_) => {
                Self::fence(Ordering::Release);
                Ok(Some(Locked(locked)))
            }
            Err(_) => Ok(None),
        }
    }

    /// Releases after a change: the word moves to a new even value, which is returned.
    #[inline]
    fn unlock(&self, l: Locked) -> Result<Version, Self::Error> {
        let next = l.0.wrapping_add(1) & !OBSOLETE;
        self.store(next, Ordering::Release)?;
        Ok(Version(next))
    }

    /// Releases without a change: the word returns to the value it was locked from, so
    /// readers that began before the lock still validate.
    #[inline]
    fn unlock_unchanged(&self, l: Locked) -> Result<(), Self::Error> {
        self.store(l.0 & !LOCKED, Ordering::Release)
    }

    /// Releases a removed node or leaf: the word moves on and is marked obsolete, so every
    /// reader and writer that reached it restarts.
    #[inline]
    fn unlock_obsolete(&self, l: Locked) -> Result<(), Self::Error> {
        self.store((l.0.wrapping_add(1) & !OBSOLETE) | OBSOLETE, Ordering::Release)
    }

    /// Recovery: stores 0 (unlocked, live). Only while no other thread can use the word.
    fn reset(&self) -> Result<(), Self::Error> {
        self.store(0, Ordering::Relaxed)
    }

    /// Runs `read` optimistically until it ran against an unchanged word (VL3); `Ok(None)` if
    /// the word is obsolete. An error from `read` is returned only if the read validated (an
    /// error on a changing word is garbage and the read is retried).
    fn optimistic<T>(
        &self,
        mut read: impl FnMut() -> Result<T, Self::Error>,
    ) -> Result<Option<T>, Self::Error> {
        let mut round = 0u32;
        loop {
            let Some(v) = self.read_begin_wait()? else {
                return Ok(None);
            };
            let r = read();
            if self.validate(v)? {
                return r.map(Some);
            }
            Self::pause(round);
            round = round.saturating_add(1);
        }
    }
}

impl<W: VersionWord + ?Sized> VersionLock for W {}

/// The value of an infallible (DRAM) word operation.
#[inline(always)]
pub fn ok<T>(r: Result<T, Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => match e {},
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Barrier};

    use ferrite_pmem::{Options, PoolSet};

    use super::*;

    /// VL5: words of another epoch (left odd or obsolete by a crashed process, or never
    /// written) read as unlocked count 0 of the current epoch, and the first lock replaces them.
    #[test]
    fn an_epoch_word_ignores_stale_lock_bits() {
        let tag = 7u64 << EPOCH_SHIFT;
        for stale in [0, 1, (6u64 << EPOCH_SHIFT) | 5, OBSOLETE | (6u64 << EPOCH_SHIFT) | 3] {
            let w = EpochWord::new(AtomicU64::new(stale), 7).unwrap();
            let v0 = ok(w.read_begin()).expect("a stale word reads unlocked");
            assert_eq!(v0.raw(), tag, "stale word {stale:#x}");
            assert!(ok(w.validate(v0)));
            let l = ok(w.lock()).unwrap();
            assert_eq!(l.raw(), tag | 1);
            assert_eq!(w.inner().load(Ordering::Relaxed), tag | 1, "the raw word was replaced");
            assert_eq!(ok(w.read_begin()), None, "locked in this epoch");
            assert_eq!(ok(w.try_lock()), TryLock::Busy);
            assert!(!ok(w.validate(v0)));
            let v2 = ok(w.unlock(l));
            assert_eq!(v2.raw(), tag | 2);
            assert!(!ok(w.validate(v0)), "a change moves the word past the stale snapshot");
            // Obsolete in this epoch stays obsolete; reset makes the word count 0 again.
            let l = ok(w.lock()).unwrap();
            ok(w.unlock_obsolete(l));
            assert_eq!(ok(w.try_lock()), TryLock::Obsolete);
            ok(w.reset());
            assert_eq!(ok(w.read_begin()).unwrap().raw(), tag);
        }
        // A word locked in the current epoch is locked.
        let w = EpochWord::new(AtomicU64::new(tag | 3), 7).unwrap();
        assert_eq!(ok(w.try_lock()), TryLock::Busy);
        // A snapshot of a stale word fails once another thread locked it (the raw word moved).
        let w = EpochWord::new(AtomicU64::new((2u64 << EPOCH_SHIFT) | 1), 7).unwrap();
        let v = ok(w.read_begin()).unwrap();
        w.inner().store(tag | 1, Ordering::Relaxed);
        assert!(!ok(w.validate(v)));
        assert_eq!(ok(w.try_upgrade(v)), TryLock::Busy);
    }

    #[test]
    fn epochs_outside_the_field_are_refused() {
        assert!(EpochWord::new(AtomicU64::new(0), 0).is_err());
        assert!(EpochWord::new(AtomicU64::new(0), MAX_EPOCH + 1).is_err());
        let w = EpochWord::new(AtomicU64::new(0), MAX_EPOCH).unwrap();
        let l = ok(w.lock()).unwrap();
        assert_eq!(ok(w.unlock(l)).raw() & OBSOLETE, 0, "the top epoch does not reach bit 63");
    }

    #[test]
    fn the_word_moves_as_documented() {
        let w = AtomicU64::new(0);
        let v0 = ok(w.read_begin()).unwrap();
        assert_eq!(v0.raw(), 0);
        let TryLock::Acquired(l) = ok(w.try_upgrade(v0)) else { panic!("upgrade") };
        assert_eq!(l.raw(), 1);
        // Locked: readers get no snapshot, the old snapshot fails, a second lock is refused.
        assert_eq!(ok(w.read_begin()), None);
        assert!(!ok(w.validate(v0)));
        assert_eq!(ok(w.try_lock()), TryLock::Busy);
        assert_eq!(ok(w.try_upgrade(v0)), TryLock::Busy);
        let v2 = ok(w.unlock(l));
        assert_eq!(v2.raw(), 2);
        assert!(!ok(w.validate(v0)));
        // An unchanged unlock keeps older snapshots valid.
        let l = ok(w.lock()).unwrap();
        ok(w.unlock_unchanged(l));
        assert!(ok(w.validate(v2)));
        // Obsolete: no snapshot, no lock; a claim revives it above every earlier version.
        let l = ok(w.lock()).unwrap();
        ok(w.unlock_obsolete(l));
        assert_eq!(ok(w.read_begin()), None);
        assert_eq!(ok(w.read_begin_wait()), None);
        assert_eq!(ok(w.try_lock()), TryLock::Obsolete);
        assert_eq!(ok(w.lock()), None);
        assert_eq!(ok(w.try_upgrade(v2)), TryLock::Obsolete);
        let l = ok(w.claim()).unwrap();
        assert_eq!(l.raw(), 5);
        assert_eq!(ok(w.claim()), None, "a locked word cannot be claimed");
        let v6 = ok(w.unlock(l));
        assert_eq!(v6.raw(), 6);
        assert!(!ok(w.validate(v2)));
        ok(w.reset());
        assert_eq!(ok(w.read_begin()), Some(v0));
    }

    #[test]
    fn optimistic_reads_retry_errors_only_while_the_word_changes() {
        let w = AtomicU64::new(0);
        let mut calls = 0;
        let r: Result<Option<u32>, Infallible> = w.optimistic(|| {
            calls += 1;
            Ok(7)
        });
        assert_eq!(ok(r), Some(7));
        assert_eq!(calls, 1);
        let l = ok(w.lock()).unwrap();
        ok(w.unlock_obsolete(l));
        assert_eq!(ok(w.optimistic(|| Ok(1))), None);
    }

    fn sim_set() -> PoolSet {
        PoolSet::create_sim(&Options::default().segment_size(1 << 20)).expect("sim set")
    }

    #[test]
    fn the_pm_word_runs_the_same_protocol_and_refuses_bad_offsets() {
        let set = sim_set();
        let seg = set.segments()[0];
        let off = seg.data_offset + 64;
        let w = PmWord::new(&set, off);
        ok_pm(w.reset());
        let v = w.read_begin().unwrap().unwrap();
        let TryLock::Acquired(l) = w.try_lock().unwrap() else { panic!("lock") };
        assert_eq!(set.load_u64(off, Ordering::Relaxed).unwrap(), 1);
        assert!(!w.validate(v).unwrap());
        let v2 = w.unlock(l).unwrap();
        assert_eq!(set.load_u64(off, Ordering::Relaxed).unwrap(), 2);
        assert!(w.validate(v2).unwrap());
        // A read error on a validated snapshot is returned, not retried forever.
        let e = w.optimistic(|| set.load_u64(u64::MAX - 7, Ordering::Relaxed).map_err(Into::into));
        assert!(e.is_err());
        // Out of range and misaligned words are errors, not panics.
        for bad in [u64::MAX - 7, off + 3] {
            let b = PmWord::new(&set, bad);
            assert!(b.load(Ordering::Relaxed).is_err());
            assert!(b.read_begin().is_err());
            assert!(b.try_lock().is_err());
            assert!(b.lock().is_err());
            assert!(b.reset().is_err());
        }
    }

    fn ok_pm<T>(r: StorageResult<T>) -> T {
        r.expect("pm word")
    }

    #[test]
    fn recovery_reset_unlocks_a_word_left_odd() {
        // A writer that died holding the lock leaves the word odd (possibly written back that
        // way); recovery's reset makes the leaf usable again.
        let set = sim_set();
        let w = PmWord::new(&set, set.segments()[0].data_offset);
        ok_pm(w.reset());
        let held = ok_pm(w.lock()).unwrap();
        drop(held); // the writer "dies": the token is gone, the word stays odd
        assert_eq!(ok_pm(w.try_lock()), TryLock::Busy);
        assert_eq!(ok_pm(w.read_begin()), None);
        ok_pm(w.reset());
        assert!(ok_pm(w.read_begin()).is_some());
        let l = ok_pm(w.lock()).unwrap();
        ok_pm(w.unlock(l));
    }

    /// Two writers and two readers on real threads: writers store the same value into two
    /// words under the lock; readers must never accept a torn pair. The threads meet at a
    /// barrier; the counts are fixed, so the test does not depend on timing.
    #[test]
    fn threads_never_accept_a_torn_pair_and_writers_exclude_each_other() {
        const ROUNDS: u64 = 20_000;
        struct Shared {
            ver: AtomicU64,
            a: AtomicU64,
            b: AtomicU64,
            count: AtomicU64,
        }
        let s = Arc::new(Shared {
            ver: AtomicU64::new(0),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
            count: AtomicU64::new(0),
        });
        let barrier = Arc::new(Barrier::new(4));
        let mut handles = Vec::new();
        for w in 0..2u64 {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                for i in 0..ROUNDS {
                    let l = ok(s.ver.lock()).unwrap();
                    let x = (w << 32) | i;
                    s.a.store(x, Ordering::Relaxed);
                    // A non-atomic increment: correct only under mutual exclusion.
                    let c = s.count.load(Ordering::Relaxed);
                    s.count.store(c + 1, Ordering::Relaxed);
                    s.b.store(x, Ordering::Relaxed);
                    ok(s.ver.unlock(l));
                }
                ROUNDS
            }));
        }
        for _ in 0..2 {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                let mut accepted = 0u64;
                for _ in 0..ROUNDS {
                    let pair = ok(s.ver.optimistic(|| {
                        Ok((s.a.load(Ordering::Relaxed), s.b.load(Ordering::Relaxed)))
                    }))
                    .unwrap();
                    assert_eq!(pair.0, pair.1, "a torn pair was accepted");
                    accepted += 1;
                }
                accepted
            }));
        }
        for h in handles {
            assert_eq!(h.join().unwrap(), ROUNDS);
        }
        assert_eq!(s.count.load(Ordering::Relaxed), 2 * ROUNDS);
        assert_eq!(s.ver.load(Ordering::Relaxed), 4 * ROUNDS);
    }
}

/// Model checks (run with `RUSTFLAGS="--cfg loom"`, see `scripts/test.sh`): the same protocol
/// code on loom's atomics, every interleaving up to a preemption bound.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU64;

    use super::*;

    /// A version word in loom's model.
    struct LoomWord(AtomicU64);

    impl VersionWord for LoomWord {
        type Error = Infallible;

        fn load(&self, ord: Ordering) -> Result<u64, Infallible> {
            Ok(self.0.load(ord))
        }

        fn store(&self, val: u64, ord: Ordering) -> Result<(), Infallible> {
            self.0.store(val, ord);
            Ok(())
        }

        fn cas(
            &self,
            current: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<Result<u64, u64>, Infallible> {
            Ok(self.0.compare_exchange(current, new, success, failure))
        }

        fn fence(ord: Ordering) {
            loom::sync::atomic::fence(ord);
        }

        fn pause(_round: u32) {
            loom::thread::yield_now();
        }
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        // Bounded so the whole suite stays within a few minutes on two cores.
        b.preemption_bound = Some(2);
        b.check(f);
    }

    struct Pair {
        ver: LoomWord,
        a: AtomicU64,
        b: AtomicU64,
        count: AtomicU64,
    }

    fn pair() -> Arc<Pair> {
        Arc::new(Pair {
            ver: LoomWord(AtomicU64::new(0)),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
            count: AtomicU64::new(0),
        })
    }

    /// One writer's critical section: two data words and a non-atomic counter increment.
    fn write(p: &Pair, x: u64) {
        let l = ok(p.ver.lock()).unwrap();
        p.a.store(x, Ordering::Relaxed);
        let c = p.count.load(Ordering::Relaxed);
        p.count.store(c + 1, Ordering::Relaxed);
        p.b.store(x, Ordering::Relaxed);
        ok(p.ver.unlock(l));
    }

    #[test]
    fn loom_vlock_two_writers_and_a_reader() {
        model(|| {
            let p = pair();
            let writers: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|x| {
                    let p = Arc::clone(&p);
                    loom::thread::spawn(move || write(&p, x))
                })
                .collect();
            // The reader: one optimistic attempt (a retry loop would only repeat the same
            // interleavings); whatever it accepts must be an untorn pair.
            if let Some(v) = ok(p.ver.read_begin()) {
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if ok(p.ver.validate(v)) {
                    assert_eq!(a, b, "a torn pair was accepted");
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            // Mutual exclusion: no increment was lost; both modifications moved the word.
            assert_eq!(p.count.load(Ordering::Relaxed), 2);
            assert_eq!(p.ver.0.load(Ordering::Relaxed), 4);
        });
    }

    #[test]
    fn loom_vlock_optimistic_retry_loop_returns_an_untorn_pair() {
        model(|| {
            let p = pair();
            let w = {
                let p = Arc::clone(&p);
                loom::thread::spawn(move || write(&p, 1))
            };
            let (a, b) = ok(p
                .ver
                .optimistic(|| Ok((p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed)))))
            .unwrap();
            assert_eq!(a, b);
            w.join().unwrap();
        });
    }

    #[test]
    fn loom_vlock_unchanged_unlock_and_obsolete() {
        model(|| {
            let p = pair();
            let w = {
                let p = Arc::clone(&p);
                loom::thread::spawn(move || {
                    // Locks and changes nothing, then removes the "node".
                    let l = ok(p.ver.lock()).unwrap();
                    ok(p.ver.unlock_unchanged(l));
                    let l = ok(p.ver.lock()).unwrap();
                    p.a.store(9, Ordering::Relaxed);
                    ok(p.ver.unlock_obsolete(l));
                })
            };
            // A reader either sees the live pair (0, 0) or learns that the node is gone.
            match ok(p
                .ver
                .optimistic(|| Ok((p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed)))))
            {
                Some(pair) => assert_eq!(pair, (0, 0)),
                None => assert_eq!(p.a.load(Ordering::Relaxed), 9),
            }
            // A writer can never lock a removed node.
            if let Some(l) = ok(p.ver.lock()) {
                assert_eq!(p.a.load(Ordering::Relaxed), 0);
                ok(p.ver.unlock_unchanged(l));
            }
            w.join().unwrap();
        });
    }

    /// The leaf-lock protocol on a DRAM stand-in for the PM word: writers CAS even → odd,
    /// "persist" (a no-op in the model), store +1; a writer that dies holding the lock leaves
    /// the word odd; recovery (after every thread is gone) resets it to 0 and the leaf is
    /// usable again.
    #[test]
    fn loom_leaf_lock_protocol_with_a_crashed_writer_and_recovery() {
        model(|| {
            let p = pair();
            let crashed = {
                let p = Arc::clone(&p);
                loom::thread::spawn(move || {
                    if let TryLock::Acquired(l) = ok(p.ver.try_lock()) {
                        p.a.store(5, Ordering::Relaxed);
                        // Dies here: never unlocks.
                        drop(l);
                        true
                    } else {
                        false
                    }
                })
            };
            let live = {
                let p = Arc::clone(&p);
                loom::thread::spawn(move || match ok(p.ver.try_lock()) {
                    TryLock::Acquired(l) => {
                        p.a.store(7, Ordering::Relaxed);
                        p.b.store(7, Ordering::Relaxed);
                        ok(p.ver.unlock(l));
                        true
                    }
                    _ => false,
                })
            };
            // A reader never accepts the crashed writer's half-written pair.
            if let Some(v) = ok(p.ver.read_begin()) {
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if ok(p.ver.validate(v)) {
                    assert_eq!(a, b);
                }
            }
            let died = crashed.join().unwrap();
            let wrote = live.join().unwrap();
            assert!(died || wrote, "one of the two CASes from 0 succeeds");
            let word = p.ver.0.load(Ordering::Relaxed);
            assert_eq!(word & LOCKED == 1, died, "the word is odd iff a writer died holding it");
            // Recovery: no thread is left; reset, then the leaf locks again.
            ok(p.ver.reset());
            let l = ok(p.ver.lock()).unwrap();
            ok(p.ver.unlock(l));
            assert_eq!(p.ver.0.load(Ordering::Relaxed), 2);
        });
    }
    /// VL5 under loom: the word starts odd from an earlier epoch (a writer of a crashed
    /// process died holding it); in the new epoch two writers still exclude each other, a
    /// reader never accepts a torn pair, and the stale lock bit locks nobody out.
    #[test]
    fn loom_epoch_word_with_a_stale_odd_value() {
        model(|| {
            let stale = (3u64 << EPOCH_SHIFT) | 5;
            let ver = Arc::new(EpochWord::new(LoomWord(AtomicU64::new(stale)), 4).unwrap());
            let p = pair();
            let writers: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|x| {
                    let (p, ver) = (Arc::clone(&p), Arc::clone(&ver));
                    loom::thread::spawn(move || {
                        let l = ok(ver.lock()).unwrap();
                        p.a.store(x, Ordering::Relaxed);
                        let c = p.count.load(Ordering::Relaxed);
                        p.count.store(c + 1, Ordering::Relaxed);
                        p.b.store(x, Ordering::Relaxed);
                        ok(ver.unlock(l));
                    })
                })
                .collect();
            if let Some(v) = ok(ver.read_begin()) {
                let (a, b) = (p.a.load(Ordering::Relaxed), p.b.load(Ordering::Relaxed));
                if ok(ver.validate(v)) {
                    assert_eq!(a, b, "a torn pair was accepted");
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            assert_eq!(p.count.load(Ordering::Relaxed), 2);
            assert_eq!(ver.inner().0.load(Ordering::Relaxed), (4u64 << EPOCH_SHIFT) | 4);
        });
    }

    /// A leaf of the routing model: a lock word and three key slots (0: free).
    struct RLeaf {
        ver: LoomWord,
        slots: [AtomicU64; 3],
    }

    impl RLeaf {
        fn new(key: u64) -> RLeaf {
            RLeaf {
                ver: LoomWord(AtomicU64::new(0)),
                slots: [AtomicU64::new(key), AtomicU64::new(0), AtomicU64::new(0)],
            }
        }

        /// The keys of the leaf (relaxed loads: garbage until validated or locked).
        fn keys(&self) -> Vec<u64> {
            self.slots.iter().map(|s| s.load(Ordering::Relaxed)).filter(|&k| k != 0).collect()
        }

        /// Stores `key` into a free slot (the caller holds the lock).
        fn put(&self, key: u64) {
            let free = self.slots.iter().find(|s| s.load(Ordering::Relaxed) == 0);
            free.expect("a free slot").store(key, Ordering::Relaxed);
        }
    }

    /// The leaf-routing model of the tree's protocol (`docs/design/fptree.md`, "The leaf-lock
    /// protocol"): two leaves and a one-bound "index" (keys below `bound` route to leaf 0, the
    /// others to leaf 1) whose changes move its version `pin` odd then even (a seqlock, as the
    /// persistent placement's change version); a lookup's pin is the even version it read.
    struct Routed {
        leaves: [RLeaf; 2],
        pin: AtomicU64,
        bound: AtomicU64,
    }

    impl Routed {
        /// A pinned lookup: the leaf routing `key` and the version it rests on.
        fn lookup(&self, key: u64) -> (usize, u64) {
            loop {
                let v = self.pin.load(Ordering::Acquire);
                if v & 1 == 0 {
                    let b = self.bound.load(Ordering::Relaxed);
                    return (usize::from(key >= b), v);
                }
                loom::thread::yield_now();
            }
        }

        /// The pin still holds (no index change since the lookup).
        fn still_valid(&self, v: u64) -> bool {
            loom::sync::atomic::fence(Ordering::Acquire);
            self.pin.load(Ordering::Relaxed) == v
        }

        /// The tree's writer: pinned lookup, `try_lock`, pin recheck (else release and
        /// retry), the change, unlock.
        fn insert(&self, key: u64) {
            loop {
                let (i, v) = self.lookup(key);
                let leaf = &self.leaves[i];
                if let TryLock::Acquired(l) = ok(leaf.ver.try_lock()) {
                    if self.still_valid(v) {
                        leaf.put(key);
                        ok(leaf.ver.unlock(l));
                        return;
                    }
                    ok(leaf.ver.unlock_unchanged(l));
                }
                loom::thread::yield_now();
            }
        }

        /// The tree's reader: pinned lookup, leaf snapshot, copy, validation, pin check.
        fn contains(&self, key: u64) -> bool {
            loop {
                let (i, v) = self.lookup(key);
                let leaf = &self.leaves[i];
                if let Some(s) = ok(leaf.ver.read_begin()) {
                    let found = leaf.keys().contains(&key);
                    if ok(leaf.ver.validate(s)) && self.still_valid(v) {
                        return found;
                    }
                }
                loom::thread::yield_now();
            }
        }

        /// A structure modification (as a split: under the locks of both leaves): the keys
        /// in `new_bound..bound` move from leaf 0 to leaf 1, then the index changes.
        fn move_range(&self, new_bound: u64) {
            let l0 = ok(self.leaves[0].ver.lock()).unwrap();
            let l1 = ok(self.leaves[1].ver.lock()).unwrap();
            for s in &self.leaves[0].slots {
                let k = s.load(Ordering::Relaxed);
                if k >= new_bound {
                    self.leaves[1].put(k);
                    s.store(0, Ordering::Relaxed);
                }
            }
            self.pin.fetch_add(1, Ordering::Relaxed);
            loom::sync::atomic::fence(Ordering::Release);
            self.bound.store(new_bound, Ordering::Relaxed);
            self.pin.fetch_add(1, Ordering::Release);
            ok(self.leaves[1].ver.unlock(l1));
            ok(self.leaves[0].ver.unlock(l0));
        }
    }

    /// The leaf protocol with routing: a writer inserts key 7 while a structure modification
    /// moves the range 5..10 (holding key 6) from leaf 0 to leaf 1, and a reader looks for key
    /// 6, present throughout. Whatever the interleaving, key 7 ends in the leaf that owns its
    /// range (leaf 1), no key is lost, and the reader finds key 6 (never a torn or misrouted
    /// "absent"). Removing the writer's pin recheck, the reader's pin check or the reader's
    /// validation makes loom fail.
    #[test]
    fn loom_vlock_leaf_routing_with_a_range_move() {
        model(|| {
            let r = Arc::new(Routed {
                leaves: [RLeaf::new(6), RLeaf::new(12)],
                pin: AtomicU64::new(0),
                bound: AtomicU64::new(10),
            });
            let writer = {
                let r = Arc::clone(&r);
                loom::thread::spawn(move || r.insert(7))
            };
            let smo = {
                let r = Arc::clone(&r);
                loom::thread::spawn(move || r.move_range(5))
            };
            assert!(r.contains(6), "key 6 is present throughout");
            writer.join().unwrap();
            smo.join().unwrap();
            assert_eq!(r.leaves[0].keys(), Vec::<u64>::new(), "leaf 0 owns 0..5 only");
            let mut right = r.leaves[1].keys();
            right.sort_unstable();
            assert_eq!(right, [6, 7, 12], "leaf 1 owns 5.. and lost nothing");
        });
    }
}
