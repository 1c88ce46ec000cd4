//! On-media layout of PAllocator: the anchor, the per-slot blocks, small segments and pages,
//! and the size classes (drawn in `docs/design/allocator.md`).

/// Bytes per page of a small segment (seed 001 §3.4.4).
pub const PAGE: u64 = 64 * 1024;
/// Most pages a segment can have (the page bitmap's size).
pub const MAX_PAGES: u64 = 2048;

/// The 40 size classes, all multiples of 64 bytes (spec ⟨P⟩ table of
/// `../shared/specs/scm-and-pallocator.md` §3.3).
pub const CLASSES: [u64; 40] = [
    64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960,
    1024, // 16 × 64
    1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, // 8 × 128
    2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096, // 8 × 256
    4608, 5120, 6144, 7168, 8192, 10240, 12288, 15360, // 8 larger
];

/// The largest request the small allocator serves.
pub const MAX_SMALL: u64 = CLASSES[CLASSES.len() - 1];

/// The class of `size` (1..=MAX_SMALL bytes).
pub fn class_of(size: u64) -> Option<usize> {
    CLASSES.iter().position(|&c| c >= size)
}

/// Blocks per page of class `c`, and the offset of the first block: the page header (64 B) and
/// one 2-byte BlockEntry per block come first, blocks start 64-byte aligned.
pub fn page_geometry(c: usize) -> (u64, u64) {
    let size = CLASSES[c];
    let mut n = (PAGE - 64) / size;
    loop {
        let start = (64 + 2 * n).div_ceil(64) * 64;
        if start + n * size <= PAGE {
            return (n, start);
        }
        n -= 1;
    }
}

// ----- anchor (segment 0, data offset 0) -----

pub const ANCHOR_MAGIC: u64 = u64::from_le_bytes(*b"FERRPALC");
pub const ANCHOR_VERSION: u32 = 1;
pub const A_MAGIC: u64 = 0;
pub const A_VERSION_SLOTS: u64 = 8; // version u32 | slots u32
pub const A_GEOMETRY: u64 = 16; // page size u32 | classes u32
pub const A_COMPAT: u64 = 24;
pub const A_INCOMPAT: u64 = 32;
/// Bytes per small segment (the pool set's segment size at creation; restored at open).
pub const A_SEGMENT: u64 = 40;
pub const A_CRC: u64 = 48; // crc32c of bytes 8..48 (u32) | 0
/// Entry point: the application's root `PPtr`.
pub const A_ROOT: u64 = 64;
/// Head of the shared free-segment list.
pub const A_FREE_SEGS: u64 = 128;
/// Start of the slot blocks.
pub const A_SLOTS: u64 = 1024;

// ----- slot block -----

/// Bytes per slot block (18 lines).
pub const SLOT_BYTES: u64 = 1152;
/// Most slots an anchor page can hold.
pub const MAX_SLOTS: u32 = ((PAGE - A_SLOTS) / SLOT_BYTES) as u32;
/// Redo-log header word: 0 when disarmed; when armed, count (bits 0..16) | [`REDO_TAG`]
/// (bits 16..32) | crc32c of the count and the entries (bits 32..64): see [`redo_header`].
pub const S_LOG: u64 = 0;
/// First redo entry (16 bytes each: packed address, value), line-aligned so that a log of up
/// to four writes (an allocation) is one line.
pub const S_ENTRIES: u64 = 64;
/// Most word writes one operation may log (the largest, a free that empties a page of a full
/// segment and returns the segment, logs 20).
pub const MAX_REDO: u64 = 24;
/// Active-segments list head.
pub const S_ASL: u64 = 448;
/// Full-segments list head.
pub const S_FSL: u64 = 464;
/// The class page lists: one `PPtr` per class (partially free pages).
pub const S_PLM: u64 = 512;
/// Tag of an armed header ("RL").
pub const REDO_TAG: u64 = 0x524C;

/// The armed header of a log holding `entries` (packed address, value): the checksum makes
/// the header commit only the entries it was computed over (P-ALLOC-1).
pub fn redo_header(entries: &[(u64, u64)]) -> u64 {
    let n = entries.len() as u64;
    let mut bytes = Vec::with_capacity(8 + 16 * entries.len());
    bytes.extend_from_slice(&n.to_le_bytes());
    for &(k, v) in entries {
        bytes.extend_from_slice(&k.to_le_bytes());
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    n | REDO_TAG << 16 | u64::from(crc32c::crc32c(&bytes)) << 32
}

const _: () = assert!(S_ENTRIES + MAX_REDO * 16 <= S_ASL);
const _: () = assert!(S_PLM + 40 * 16 == SLOT_BYTES);

// ----- small segment header (data offset 0 of the segment: its page 0) -----

pub const G_NEXT: u64 = 0; // PPtr
pub const G_OWNER: u64 = 16; // slot + 1 (0: in the free-segment list)
pub const G_COUNTS: u64 = 24; // used pages u32 | usable pages u32
pub const G_MAGIC: u64 = 32; // "FERRSMSG" once initialised
pub const G_BITMAP: u64 = 64; // 2048 bits
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"FERRSMSG");

// ----- page header -----

pub const P_NEXT: u64 = 0; // PPtr
pub const P_STATE: u64 = 16; // next_free u16 | num_free u16 | class u8 | 0 u8 | num_blocks u16
pub const P_ENTRIES: u64 = 64; // u16 per block
/// BlockEntry of an allocated block (not a 64-byte aligned offset, so never a free-list link).
pub const ALLOCATED: u16 = 0xFFFF;

/// The page state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageState {
    /// In-page offset of the first free block (0: none).
    pub next_free: u16,
    /// Free blocks.
    pub num_free: u16,
    /// Size class.
    pub class: u8,
    /// Blocks in the page.
    pub num_blocks: u16,
}

impl PageState {
    pub fn pack(self) -> u64 {
        u64::from(self.next_free)
            | u64::from(self.num_free) << 16
            | u64::from(self.class) << 32
            | u64::from(self.num_blocks) << 48
    }
    pub fn unpack(w: u64) -> PageState {
        PageState {
            next_free: w as u16,
            num_free: (w >> 16) as u16,
            class: (w >> 32) as u8,
            num_blocks: (w >> 48) as u16,
        }
    }
}

/// Packs a (segment, offset) address into one redo-entry word.
pub fn pack_addr(segment: u64, offset: u64) -> Option<u64> {
    (segment < (1 << 24) && offset < (1 << 40)).then_some(segment << 40 | offset)
}

/// The inverse of [`pack_addr`].
pub fn unpack_addr(w: u64) -> (u64, u64) {
    (w >> 40, w & ((1 << 40) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_classes_all_multiples_of_64_ascending() {
        assert_eq!(CLASSES.len(), 40);
        assert!(CLASSES.iter().all(|c| c % 64 == 0));
        assert!(CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(64), Some(0));
        assert_eq!(class_of(65), Some(1));
        assert_eq!(class_of(15_360), Some(39));
        assert_eq!(class_of(15_361), None);
    }

    #[test]
    fn page_geometry_fits_and_aligns() {
        for (c, &size) in CLASSES.iter().enumerate() {
            let (n, start) = page_geometry(c);
            assert!(n >= 4, "class {c}: {n} blocks");
            assert_eq!(start % 64, 0);
            assert!(start >= 64 + 2 * n);
            assert!(start + n * size <= PAGE);
            // u16 offsets suffice.
            assert!(start + (n - 1) * size < 65536);
        }
        assert_eq!(page_geometry(0), (992, 2048)); // 64-byte blocks fill the page exactly
    }

    #[test]
    fn state_word_round_trips() {
        let s = PageState { next_free: 4160, num_free: 17, class: 39, num_blocks: 1006 };
        assert_eq!(PageState::unpack(s.pack()), s);
        assert_eq!(unpack_addr(pack_addr(7, 123_456).unwrap()), (7, 123_456));
    }
}
