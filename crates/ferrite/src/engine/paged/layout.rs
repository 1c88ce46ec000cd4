//! The fixed-size on-media heads of the paged engine (`docs/design/format.md`, "Paged
//! engine"): the meta page's fields, the rollback journal's header and record head, the WAL's
//! header and frame head, NVWAL's header, block head and frame head. Each is a `#[repr(C)]` struct of little-endian fields with no
//! padding, its size asserted at compile time, read with [`FromBytes::read_from_prefix`] (a
//! copy: never a reference into the medium) and written with [`IntoBytes::as_bytes`].
//!
//! The slotted page's variable layout (cells addressed by offsets read from the page) stays
//! with [`super::page`], through the checked accessors of [`super::bytes`].
//!
//! # Invariants
//! - Every field is little-endian whatever the host (`zerocopy::little_endian`), and every
//!   struct is `Unaligned`, so a head may be read from any offset of a buffer.
//! - The checksums (`crc`) cover the byte ranges each format names; the structs only place
//!   the fields.
//!
//! # Ordering and concurrency
//! None: plain values, copied in and out of buffers.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Page 0's fields (the rest of the page is zero). The CRC32C covers bytes 8..64: every field
/// from `version` to `seq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct MetaHead {
    /// "FERRPAG1"; zero until creation completes (P-PG-3).
    pub magic: U64,
    pub version: U32,
    pub page_size: U32,
    pub compat: U64,
    pub incompat: U64,
    pub page_count: U64,
    pub free_head: U32,
    pub free_count: U32,
    pub catalog_root: U32,
    /// 1 rollback journal, 2 WAL, 3 FASH, 4 FAST, 5 NVWAL.
    pub protocol: U32,
    pub seq: U64,
    /// CRC32C of bytes 8..64.
    pub crc: U32,
    pub _zero: U32,
}
const _: () = assert!(size_of::<MetaHead>() == 72);

/// The rollback journal's header (the log's first sector; zeroed: not hot). The CRC32C covers
/// bytes 8..36, `version` to `nonce`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct JournalHead {
    /// "FERRJNL1".
    pub magic: U64,
    pub version: U32,
    pub page_size: U32,
    pub pages_before: U64,
    pub nrec: U64,
    pub nonce: U32,
    /// CRC32C of bytes 8..36.
    pub crc: U32,
    pub _zero: [u8; 8],
}
const _: () = assert!(size_of::<JournalHead>() == 48);

/// The head of a journal record, before the page's original image. `crc` is CRC-32 (IEEE)
/// over the page number, the nonce and the image.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct RecordHead {
    pub pgno: U32,
    pub _zero0: U32,
    pub nonce: U32,
    pub crc: U32,
    pub _zero: [U64; 6],
}
const _: () = assert!(size_of::<RecordHead>() == 64);

/// The WAL's header (the log's first sector). `salt` and `crc` share one aligned 8-byte word
/// (offset 16), so a restart changes a single word. The CRC32C covers bytes 8..20.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct WalHead {
    /// "FERRWAL1".
    pub magic: U64,
    pub version: U32,
    pub page_size: U32,
    pub salt: U32,
    /// CRC32C of bytes 8..20.
    pub crc: U32,
}
const _: () = assert!(size_of::<WalHead>() == 24);

/// The head of a WAL frame, before the page image. `crc` is CRC-32 (IEEE) chained from the
/// previous frame's, over the first 12 bytes and the image.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct FrameHead {
    pub pgno: U32,
    /// 1 on the last frame of a commit, else 0.
    pub commit: U32,
    pub salt: U32,
    pub crc: U32,
    pub _zero: [U64; 6],
}
const _: () = assert!(size_of::<FrameHead>() == 64);

/// The slot-header log's header (FASH/FAST, `protocol/fash.rs`; the log file's first line).
/// `commit` is the commit mark, written alone with one aligned 8-byte store: 0 = nothing to
/// redo, else the `seq` of the entries that follow. The CRC32C covers bytes 8..24 (`seq`,
/// `count`, `bytes`) and the `bytes` bytes of entries from offset 64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct ShLogHead {
    pub commit: U64,
    pub seq: U64,
    pub count: U32,
    pub bytes: U32,
    pub crc: U32,
    pub _zero: U32,
}
const _: () = assert!(size_of::<ShLogHead>() == 32);

/// One entry of the slot-header log: `len` bytes for page `page` at byte `offset` follow,
/// padded to a multiple of 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct ShEntryHead {
    pub page: U32,
    pub offset: U32,
    pub len: U32,
    pub _zero: U32,
}
const _: () = assert!(size_of::<ShEntryHead>() == 16);
/// NVWAL's header (the first line of PM file `LOG`). `generation` and `crc` share one aligned 8-byte
/// word (offset 24), so a checkpoint changes the generation with a single failure-atomic
/// store (M1). The CRC32C covers bytes 8..28, `version` to `generation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct NvwalHead {
    /// "FERRNVW1"; zero until creation completes (P-PG-40).
    pub magic: U64,
    pub version: U32,
    pub page_size: U32,
    pub block_size: U32,
    /// The head block of the block list (always block 0: a checkpoint keeps it).
    pub head: U32,
    /// The checkpoint generation ("checkpoint id"): frames of another generation are stale.
    pub generation: U32,
    /// CRC32C of bytes 8..28.
    pub crc: U32,
}
const _: () = assert!(size_of::<NvwalHead>() == 32);

/// The head line of an NVWAL heap block: the tri-state word and the link to the next block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct NvwalBlockHead {
    /// Free (0), pending or in use (two magic values); written only as one aligned word.
    pub state: U64,
    /// 0: none; else the next block's number + 1. Written only as one aligned word.
    pub next: U64,
    pub _zero: [U64; 6],
}
const _: () = assert!(size_of::<NvwalBlockHead>() == 64);

/// The head of an NVWAL frame (spec §4.1's 32-byte encoding), before `size` payload bytes
/// padded to 8. `commit` is 0 until the commit mark is stored (one aligned word; bit 0 set,
/// bits 1..64 the low 63 bits of `checksum`). `checksum` chains from the previous frame's:
/// CRC-32 (IEEE) in the low half, CRC32C in the high half, each over bytes 8..24 and the
/// payload. `size` 0 is a skip frame: the rest of the block is unused.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub(crate) struct NvwalFrameHead {
    pub commit: U64,
    pub ckpt: U32,
    pub pgno: U32,
    pub offset: U32,
    pub size: U32,
    pub checksum: U64,
}
const _: () = assert!(size_of::<NvwalFrameHead>() == 32);

/// The head `T` at the start of `b`, copied out; `None` if `b` is shorter than `T`.
pub(crate) fn read<T: FromBytes>(b: &[u8]) -> Option<T> {
    T::read_from_prefix(b).ok().map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_the_documented_offsets() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(MetaHead, page_count), 32);
        assert_eq!(offset_of!(MetaHead, catalog_root), 48);
        assert_eq!(offset_of!(MetaHead, protocol), 52);
        assert_eq!(offset_of!(MetaHead, seq), 56);
        assert_eq!(offset_of!(MetaHead, crc), 64);
        assert_eq!(offset_of!(JournalHead, nonce), 32);
        assert_eq!(offset_of!(JournalHead, crc), 36);
        assert_eq!(offset_of!(WalHead, salt), 16);
        assert_eq!(offset_of!(FrameHead, crc), 12);
        assert_eq!(offset_of!(RecordHead, crc), 12);
        assert_eq!(offset_of!(ShLogHead, seq), 8);
        assert_eq!(offset_of!(ShLogHead, crc), 24);
        assert_eq!(offset_of!(ShEntryHead, len), 8);
        assert_eq!(offset_of!(NvwalHead, generation), 24);
        assert_eq!(offset_of!(NvwalBlockHead, next), 8);
        assert_eq!(offset_of!(NvwalFrameHead, ckpt), 8);
        assert_eq!(offset_of!(NvwalFrameHead, checksum), 24);
        // Little-endian on any host.
        let h = WalHead { salt: U32::new(0x0102_0304), ..Default::default() };
        assert_eq!(&h.as_bytes()[16..20], &[4, 3, 2, 1]);
    }
}
