//! On-media layout of SOFORT (drawn in `docs/design/sofort.md` §2) and the timestamp/TXID
//! domains (§3, spec §2.4).
//!
//! # Invariants
//! - Every struct here is `#[repr(C)]`, has no padding, and its size and field offsets are
//!   asserted at compile time; every block is a PAllocator block (≤ `alloc::MAX_SMALL`).
//! - `0` is an uninitialised MVCC field, `[1, 2^63)` a TXID, `[2^63, 2^64)` a timestamp
//!   (`K_MIN_TS`), `INF` never visible / never deleted.

use std::mem::offset_of;

use ferrite_pmem::PPtr;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::alloc::MAX_SMALL;

// ----- timestamps and TXIDs -----

/// The smallest timestamp; `[1, K_MIN_TS)` are TXIDs.
pub const K_MIN_TS: u64 = 1 << 63;
/// The infinite timestamp.
pub const INF: u64 = u64::MAX;

/// Whether `x` is a timestamp (`INF` included).
#[inline]
pub fn is_ts(x: u64) -> bool {
    x >= K_MIN_TS
}

/// Whether `x` is a TXID.
#[inline]
pub fn is_txid(x: u64) -> bool {
    x != 0 && x < K_MIN_TS
}

/// Bits of the slot number in a TXID.
pub const SLOT_BITS: u32 = 10;
/// Bits of the per-slot sequence in a TXID.
pub const SEQ_BITS: u32 = 30;
/// Shift of the epoch in a TXID.
pub const EPOCH_SHIFT: u32 = SLOT_BITS + SEQ_BITS;
/// The largest epoch (TXIDs stay below `K_MIN_TS`).
pub const MAX_EPOCH: u64 = (1 << (63 - EPOCH_SHIFT)) - 1;
/// The largest per-slot sequence before the slot moves to a fresh epoch.
pub const MAX_SEQ: u64 = (1 << SEQ_BITS) - 1;

/// The TXID of sequence `seq` of slot `slot` in `epoch` (epoch ≥ 1, so never 0).
#[inline]
pub fn txid(epoch: u64, seq: u64, slot: u32) -> u64 {
    epoch << EPOCH_SHIFT | seq << SLOT_BITS | u64::from(slot)
}

/// The epoch of a TXID.
#[inline]
pub fn epoch_of(txid: u64) -> u64 {
    txid >> EPOCH_SHIFT
}

/// The slot of a TXID.
#[inline]
pub fn slot_of(txid: u64) -> usize {
    (txid & ((1 << SLOT_BITS) - 1)) as usize
}

/// A persisted timestamp ceiling is raised by this much (FIX-9).
pub const TS_CEILING_STEP: u64 = 1 << 16;

// ----- geometry -----

/// Rows per chunk.
pub const CHUNK_ROWS: u64 = 512;
/// Bytes of an MVCC block (512 × {CTS, DTS}).
pub const MVCC_BLOCK: u64 = CHUNK_ROWS * 16;
/// Bytes of a value block (512 × u64).
pub const VALUE_BLOCK: u64 = CHUNK_ROWS * 8;
/// Bytes of a heap chunk; also the longest `str`/`bytes` value.
pub const HEAP_CHUNK: u64 = MAX_SMALL;
/// Bytes of a directory block (L1 or L2).
pub const DIR_BYTES: u64 = MAX_SMALL;
/// Pointers per directory block.
pub const FANOUT: u64 = DIR_BYTES / 16;
/// Most tables (entries of the table directory).
pub const MAX_TABLES: u64 = FANOUT;
/// Most slots (entries of the area array, and the TXID's slot bits).
pub const MAX_SLOTS: u32 = FANOUT as u32;
/// Slots a new store gets by default.
pub const DEFAULT_SLOTS: u32 = 64;

// ----- catalog (version 2) -----

/// "FERRSOF1".
pub const CATALOG_MAGIC: u64 = u64::from_le_bytes(*b"FERRSOF1");
/// Format version of the catalog and everything below it that this build writes. Version 2
/// adds the index area of table descriptors (placement and tree root per index).
pub const CATALOG_VERSION: u32 = 2;
/// The older version this build still opens: its descriptors have no index area (every
/// index in DRAM), and tables created in such a store get none either, so that a build that
/// reads only version 1 never meets one.
pub const CATALOG_VERSION_1: u32 = 1;

/// The catalog block (256 bytes), allocated into the allocator's root.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CatalogHead {
    pub magic: u64,
    pub version: u32,
    pub header_len: u32,
    pub compat: u64,
    pub incompat: u64,
    pub slots: u32,
    pub chunk_rows: u32,
    pub max_tables: u32,
    pub area_bytes: u32,
    pub crc: u32,
    pub _pad0: u32,
    pub _pad1: u64,
    pub table_dir: PPtr,
    pub areas: PPtr,
    pub _pad2: [u64; 4],
    pub epoch: u64,
    pub ts_ceiling: u64,
    pub _pad3: [u64; 6],
    pub staging: PPtr,
    pub staging_target: PPtr,
    pub _pad4: [u64; 4],
}

pub const CATALOG_BYTES: u64 = size_of::<CatalogHead>() as u64;
pub const C_MAGIC: u64 = offset_of!(CatalogHead, magic) as u64;
pub const C_CRC: u64 = offset_of!(CatalogHead, crc) as u64;
pub const C_EPOCH: u64 = offset_of!(CatalogHead, epoch) as u64;
pub const C_CEILING: u64 = offset_of!(CatalogHead, ts_ceiling) as u64;
pub const C_TABLE_DIR: u64 = offset_of!(CatalogHead, table_dir) as u64;
pub const C_AREAS: u64 = offset_of!(CatalogHead, areas) as u64;
pub const C_STAGING: u64 = offset_of!(CatalogHead, staging) as u64;
pub const C_STAGING_TARGET: u64 = offset_of!(CatalogHead, staging_target) as u64;

const _: () = {
    assert!(CATALOG_BYTES == 256);
    assert!(C_CRC == 48);
    assert!(C_TABLE_DIR == 64 && C_AREAS == 80);
    assert!(C_EPOCH == 128 && C_CEILING == 136);
    assert!(C_STAGING == 192 && C_STAGING_TARGET == 208);
};

/// The continuation directory of continuable transactions (design §14): a PPtr in the
/// catalog's mutable, unchecksummed part (bytes 144..160, zero in stores made before it
/// existed). All-zero or null: none yet; made at the first continuable transaction.
pub const C_CONT_DIR: u64 = 144;

const _: () = assert!(C_CONT_DIR >= C_CEILING + 8 && C_CONT_DIR + 16 <= C_STAGING);

/// The past workload's block (design §16.1, `past.rs`): a PPtr in the catalog's mutable,
/// unchecksummed part (bytes 160..176, zero in stores made before it existed, ignored by
/// builds that do not know it). All-zero or null: none yet; made at the first write.
pub const C_PAST: u64 = 160;

const _: () = assert!(C_PAST >= C_CONT_DIR + 16 && C_PAST + 16 <= C_STAGING);

/// The crc32c of a catalog: bytes 8..48 and 64..128 (the immutable part).
pub fn catalog_crc(bytes: &[u8]) -> u32 {
    let a = crc32c::crc32c(&bytes[8..48]);
    crc32c::crc32c_append(a, &bytes[64..128])
}

// ----- table descriptor -----

/// "FERRSTBL".
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"FERRSTBL");

/// The head of a table descriptor; column roots follow at 64 + 32·c, then the schema, then
/// (catalog version 2, `ix_count > 0`) the index area at `ix_off`: one [`IndexEntry`] per
/// index, the primary key's first.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct TableHead {
    pub magic: u64,
    pub table_id: u32,
    pub ncols: u32,
    pub schema_len: u32,
    pub crc: u32,
    pub chunk_rows: u32,
    pub heap_chunk: u32,
    pub mvcc_root: PPtr,
    /// Offset of the index area in the descriptor (16-aligned); 0 with `ix_count == 0`.
    pub ix_off: u32,
    /// Entries of the index area (1 + secondary indexes), or 0: no area, every index in DRAM
    /// (version 1 descriptors wrote 0 here).
    pub ix_count: u32,
    pub _pad: u64,
}

pub const TABLE_HEAD: u64 = size_of::<TableHead>() as u64;
pub const T_MVCC_ROOT: u64 = offset_of!(TableHead, mvcc_root) as u64;
pub const T_IX_OFF: u64 = offset_of!(TableHead, ix_off) as u64;
/// Bytes per column entry of a descriptor (values root, heap root).
pub const T_COLUMN: u64 = 32;

const _: () = assert!(TABLE_HEAD == 64 && T_MVCC_ROOT == 32 && T_IX_OFF == 48);

/// One entry of a descriptor's index area: where the index lives and, for a tree, its root
/// slot (null until the tree's creation, which may finish at the next open).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct IndexEntry {
    /// The FPTree's root slot (`fptree::Tree::create` allocates the root into it).
    pub root: PPtr,
    /// One of `IX_DRAM`, `IX_HYBRID`, `IX_PERSISTENT`; anything else is `Corrupted`.
    pub placement: u64,
    pub _pad: u64,
}

pub const IX_ENTRY: u64 = size_of::<IndexEntry>() as u64;
pub const IX_PLACEMENT: u64 = offset_of!(IndexEntry, placement) as u64;
/// Placement codes of [`IndexEntry::placement`].
pub const IX_DRAM: u64 = 0;
pub const IX_HYBRID: u64 = 1;
pub const IX_PERSISTENT: u64 = 2;

const _: () = assert!(IX_ENTRY == 32 && IX_PLACEMENT == 16);

/// Offset of the index area of a descriptor with `ncols` columns and a `schema_len`-byte
/// schema (16-aligned: tree root slots are 16-byte pointers).
pub fn t_index_area(ncols: u64, schema_len: u64) -> u64 {
    (TABLE_HEAD + T_COLUMN * ncols + schema_len).div_ceil(16) * 16
}

/// Offset of column `c`'s values root in a descriptor.
pub fn t_values_root(c: u64) -> u64 {
    TABLE_HEAD + T_COLUMN * c
}

/// Offset of column `c`'s heap root in a descriptor.
pub fn t_heap_root(c: u64) -> u64 {
    TABLE_HEAD + T_COLUMN * c + 16
}

/// The crc32c of a descriptor: head bytes 8..20 and 24..32 (all but the crc) and the schema;
/// with an index area also head bytes 48..56 (its offset and count) and `placements` (each
/// entry's placement word, little-endian; the root slots are written later and not covered).
pub fn table_crc(head: &[u8], schema: &[u8], placements: &[u8]) -> u32 {
    let a = crc32c::crc32c_append(crc32c::crc32c(&head[8..20]), &head[24..32]);
    let a = crc32c::crc32c_append(a, schema);
    if head[48..56].iter().all(|&b| b == 0) {
        a
    } else {
        crc32c::crc32c_append(crc32c::crc32c_append(a, &head[48..56]), placements)
    }
}

// ----- transaction areas -----

/// Bytes of a slot's area.
pub const AREA_BYTES: u64 = 1024;
pub const A_TXID: u64 = 0;
pub const A_COMMIT_TS: u64 = 8;
/// creates u32 | deletes u32 << 32.
pub const A_COUNTS: u64 = 16;
/// The commit word: equal to `A_TXID`'s value iff committed.
pub const A_COMMIT: u64 = 24;
/// Entries 0..4 on the header line.
pub const A_INLINE: u64 = 32;
pub const INLINE_ENTRIES: u64 = 4;
/// Entries from 4 on, up to the extension pointer.
pub const A_MORE: u64 = 64;
pub const A_EXT: u64 = AREA_BYTES - 16;
pub const AREA_MORE_ENTRIES: u64 = (A_EXT - A_MORE) / 8;
/// Bytes of an extension block; its next pointer is at the end.
pub const EXT_BYTES: u64 = 4096;
pub const EXT_NEXT: u64 = EXT_BYTES - 16;
pub const EXT_ENTRIES: u64 = EXT_NEXT / 8;

const _: () = assert!(AREA_MORE_ENTRIES == 118 && EXT_ENTRIES == 510);

/// Most entries (creates + deletes) a transaction may have (u32 counts).
pub const MAX_ENTRIES: u64 = u32::MAX as u64;

/// An area entry: table id (16 bits) and row id (48 bits).
#[inline]
pub fn entry(table: u16, row: u64) -> u64 {
    u64::from(table) << 48 | (row & ((1 << 48) - 1))
}

/// The (table id, row id) of an area entry.
#[inline]
pub fn unentry(e: u64) -> (u16, u64) {
    ((e >> 48) as u16, e & ((1 << 48) - 1))
}

/// Most rows a table may have (row ids are 48 bits in area entries).
pub const MAX_ROWS: u64 = 1 << 48;

// ----- continuation logs (continuable transactions, design §14) -----

/// "FERRCNT1".
pub const LOG_MAGIC: u64 = u64::from_le_bytes(*b"FERRCNT1");
/// Format version of a continuation log.
pub const LOG_VERSION: u64 = 1;
/// Bytes of a log block; its next pointer is at the end.
pub const LOG_BYTES: u64 = MAX_SMALL;
pub const L_MAGIC: u64 = 0;
pub const L_VERSION: u64 = 8;
/// The TXID of the slot's continuable transaction (0: none).
pub const L_TXID: u64 = 16;
/// Its start timestamp.
pub const L_STS: u64 = 24;
/// `statements completed << 32 | durable end of the records` (one word: M1).
pub const L_STATE: u64 = 32;
/// Records start here in the first block (the header line is bytes 0..64), at 0 in the others.
pub const L_DATA: u64 = 64;
pub const L_NEXT: u64 = LOG_BYTES - 16;

const _: () = assert!(L_NEXT < 1 << 16 && L_STATE + 8 <= L_DATA);

/// A log position: block index (16 bits) | byte offset in the block (16 bits).
#[inline]
pub fn log_pos(block: u64, off: u64) -> u32 {
    ((block << 16) | off) as u32
}

/// (block index, offset) of a log position.
#[inline]
pub fn unlog_pos(p: u32) -> (u64, u64) {
    (u64::from(p >> 16), u64::from(p & 0xffff))
}

// ----- value slots -----

/// A heap reference in a value slot: chunk (32 bits) | offset (16) | length (16).
#[inline]
pub fn pack_ref(chunk: u64, off: u64, len: u64) -> u64 {
    chunk << 32 | off << 16 | len
}

/// (chunk, offset, length) of a heap reference.
#[inline]
pub fn unpack_ref(w: u64) -> (u64, u64, u64) {
    (w >> 32, (w >> 16) & 0xffff, w & 0xffff)
}

/// Bytes an extent of a `len`-byte value occupies (8-aligned).
#[inline]
pub fn extent_len(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

const _: () = assert!(HEAP_CHUNK < 1 << 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_at_the_boundaries() {
        assert!(!is_ts(0) && !is_txid(0));
        assert!(is_txid(1) && is_txid(K_MIN_TS - 1) && !is_ts(K_MIN_TS - 1));
        assert!(is_ts(K_MIN_TS) && !is_txid(K_MIN_TS) && is_ts(INF));
        let t = txid(MAX_EPOCH, MAX_SEQ, MAX_SLOTS - 1);
        assert!(is_txid(t));
        assert_eq!((epoch_of(t), slot_of(t)), (MAX_EPOCH, (MAX_SLOTS - 1) as usize));
        assert!(is_txid(txid(1, 0, 0)));
        assert_eq!(unentry(entry(7, 123_456)), (7, 123_456));
        assert_eq!(unpack_ref(pack_ref(9, 15352, 8)), (9, 15352, 8));
    }
}
