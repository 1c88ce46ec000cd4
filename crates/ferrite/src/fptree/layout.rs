//! On-media layout of the FPTree: the leaf and the root, as `#[repr(C)]` structs whose sizes
//! and field offsets are checked at compile time (drawn in `docs/design/fptree.md`).
//!
//! Every persistent pointer is a 16-byte [`PPtr`] (segment, offset) whose segment word is the
//! commit word (null: segment `u64::MAX`); it sits 16-byte aligned, inside one cache line.

use std::mem::offset_of;

use ferrite_pmem::PPtr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Slots per leaf.
pub const M: usize = 32;
/// Bytes per leaf (9 cache lines).
pub const LEAF_SIZE: u64 = 576;
/// Bytes of the persistent root (3 cache lines).
pub const ROOT_SIZE: u64 = 192;
/// The bitmap bits that name slots; every other bit is 0 in a valid leaf.
pub const FULL: u64 = (1u64 << M) - 1;

/// `"FERRFPT1"`: the root's magic, stored last at creation.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"FERRFPT1");
/// The root format version this build reads and writes.
pub const ROOT_VERSION: u32 = 1;

/// A leaf as it lies in persistent memory (576 bytes, 64-byte aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LeafImage {
    /// One fingerprint byte per slot (written as whole `u64` words).
    pub fp: [u8; M],
    /// Validity bitmap; bit i = slot i valid; the commit word of the leaf.
    pub bitmap: u64,
    /// The concurrent tree's leaf lock; zero here. Words of earlier opens are never reset:
    /// they read unlocked in a later epoch (VL5, P-FPT-30).
    pub lock: u64,
    /// The next leaf of the list (null: this is the last leaf).
    pub next: PPtr,
    /// Key/value pairs.
    pub kv: [[u64; 2]; M],
}

/// Byte offsets of the leaf's fields.
pub const L_FP: u64 = offset_of!(LeafImage, fp) as u64;
/// The bitmap word.
pub const L_BITMAP: u64 = offset_of!(LeafImage, bitmap) as u64;
/// The lock word.
pub const L_LOCK: u64 = offset_of!(LeafImage, lock) as u64;
/// The `next` pointer.
pub const L_NEXT: u64 = offset_of!(LeafImage, next) as u64;
/// The first key/value pair.
pub const L_KV: u64 = offset_of!(LeafImage, kv) as u64;

const _: () = assert!(size_of::<LeafImage>() as u64 == LEAF_SIZE);
const _: () = assert!(L_FP == 0 && L_BITMAP == 32 && L_LOCK == 40 && L_NEXT == 48 && L_KV == 64);

impl LeafImage {
    /// An empty leaf: no valid slot, no next leaf.
    pub fn empty() -> LeafImage {
        LeafImage { fp: [0; M], bitmap: 0, lock: 0, next: PPtr::NULL, kv: [[0; 2]; M] }
    }

    /// The valid slots (bits ≥ 32 of the bitmap are ignored here; readers check them).
    pub fn valid(&self) -> impl Iterator<Item = usize> + '_ {
        (0..M).filter(|&s| self.bitmap & (1 << s) != 0)
    }
}

/// The checksummed, immutable part of the root (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RootHeader {
    /// [`ROOT_MAGIC`] once creation finished; 0 while it runs.
    pub magic: u64,
    /// [`ROOT_VERSION`].
    pub version: u32,
    /// Slots per leaf ([`M`]).
    pub slots: u32,
    /// Bytes per leaf ([`LEAF_SIZE`]).
    pub leaf_size: u32,
    /// Bytes per value (8).
    pub value_size: u32,
    /// Compatible feature flags (none yet).
    pub compat: u64,
    /// Incompatible feature flags (none yet; any set bit is refused).
    pub incompat: u64,
    /// crc32c of bytes 0..40 computed with the final magic.
    pub checksum: u32,
    /// Zero.
    pub reserved0: u32,
}

/// A micro-log: two persistent pointers in their own cache line.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MicroLog {
    /// Split log: the leaf being split. Delete log: the leaf being deleted (its commit word
    /// arms the log).
    pub a: PPtr,
    /// Split log: the new leaf (allocated into here; arms the log). Delete log: the
    /// predecessor (null: the leaf is the head).
    pub b: PPtr,
    /// Zero, except: the split log's first word is the lock-word epoch ([`R_EPOCH`]); the
    /// delete log's first two words are the persistent index root (`R_INDEX`).
    pub reserved: [u64; 4],
}

/// The persistent root of a tree (192 bytes, in a block of its own).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RootImage {
    /// Identity, geometry and checksum.
    pub header: RootHeader,
    /// The first leaf (never null in a created tree).
    pub head: PPtr,
    /// The split micro-log: `a` = the leaf being split, `b` = the new leaf.
    pub split: MicroLog,
    /// The delete micro-log: `a` = the leaf being deleted, `b` = its predecessor.
    pub delete: MicroLog,
}

/// Byte offsets of the root's fields.
pub const R_HEAD: u64 = offset_of!(RootImage, head) as u64;
/// The split log's leaf being split.
pub const R_SPLIT_CUR: u64 = offset_of!(RootImage, split) as u64 + offset_of!(MicroLog, a) as u64;
/// The split log's new leaf (the log's arm word).
pub const R_SPLIT_NEW: u64 = offset_of!(RootImage, split) as u64 + offset_of!(MicroLog, b) as u64;
/// The delete log's leaf (the log's arm word).
pub const R_DEL_CUR: u64 = offset_of!(RootImage, delete) as u64 + offset_of!(MicroLog, a) as u64;
/// The delete log's predecessor.
pub const R_DEL_PREV: u64 = offset_of!(RootImage, delete) as u64 + offset_of!(MicroLog, b) as u64;
/// The lock-word epoch of the last open (rule P-FPT-30, VL5 of `vlock.rs`): the first word of
/// the split log's reserved space (root line 1, outside the header checksum; 0 in a root that
/// no concurrent-capable build opened, which older builds ignore).
pub const R_EPOCH: u64 =
    offset_of!(RootImage, split) as u64 + offset_of!(MicroLog, reserved) as u64;

const _: () = assert!(size_of::<RootHeader>() == 48);
const _: () = assert!(size_of::<MicroLog>() == 64);
const _: () = assert!(size_of::<RootImage>() as u64 == ROOT_SIZE);
const _: () = assert!(R_HEAD == 48 && R_SPLIT_CUR == 64 && R_SPLIT_NEW == 80);
const _: () = assert!(R_DEL_CUR == 128 && R_DEL_PREV == 144 && R_EPOCH == 96);

impl RootHeader {
    /// The header this build writes for a fixed-key tree, with magic 0 (creation in progress)
    /// and its checksum.
    pub fn in_progress() -> RootHeader {
        RootHeader::in_progress_of(LEAF_SIZE as u32, 0)
    }

    /// The header of a tree whose leaves have `leaf_size` bytes and whose key kind sets the
    /// incompatible flags `incompat` (0 for `u64` keys: the v1 header, byte for byte), with
    /// magic 0 and its checksum.
    pub fn in_progress_of(leaf_size: u32, incompat: u64) -> RootHeader {
        let mut h = RootHeader {
            magic: 0,
            version: ROOT_VERSION,
            slots: M as u32,
            leaf_size,
            value_size: 8,
            compat: 0,
            incompat,
            checksum: 0,
            reserved0: 0,
        };
        h.checksum = h.crc();
        h
    }

    /// crc32c of bytes 0..40 with the final magic in place of whatever the magic word holds.
    pub fn crc(&self) -> u32 {
        let mut c = *self;
        c.magic = ROOT_MAGIC;
        crc32c::crc32c(&c.as_bytes()[..40])
    }
}

impl RootImage {
    /// A root as the first persist of creation writes it: header with magic 0, `head` as
    /// given, both logs disarmed (every pointer null).
    pub fn in_progress(head: PPtr) -> RootImage {
        RootImage::in_progress_of(head, LEAF_SIZE as u32, 0)
    }

    /// As [`RootImage::in_progress`] for the given leaf size and incompatible flags.
    pub fn in_progress_of(head: PPtr, leaf_size: u32, incompat: u64) -> RootImage {
        let log = MicroLog { a: PPtr::NULL, b: PPtr::NULL, reserved: [0; 4] };
        let header = RootHeader::in_progress_of(leaf_size, incompat);
        RootImage { header, head, split: log, delete: log }
    }
}
