//! The pool header: the first 4 KiB page of every single-file pool.
//!
//! ```text
//! offset  size  field
//!      0     8  magic            "FERRPOOL" (written LAST at creation, P-PM-1)
//!      8     4  version          format version of this header (1)
//!     12     4  header_size      size_of::<PoolHeader>() = 128
//!     16     8  compat_flags     features an older reader may ignore
//!     24     8  incompat_flags   features a reader must understand to open the pool
//!     32     8  pool_size        total file size in bytes
//!     40     8  data_offset      start of the data area (4096)
//!     48    16  uuid             random pool identity
//!     64     8  created_unix_ns  creation time
//!     72    32  layout           application layout name, NUL-padded ASCII
//!    104     4  checksum         CRC32C of bytes 0..104 with the final magic
//!    108     4  reserved0        must be zero
//!    112    16  reserved1        must be zero
//!    128     8  shutdown_state   OPEN or CLEAN (outside the checksum; one 8-byte word, M1)
//!    136  3960  (zero)           unused up to 4096
//! ```
//!
//! # Invariants
//! - H1: a header whose magic is present has a valid checksum (the checksum is persisted before
//!   the magic, P-PM-1).
//! - H2: `shutdown_state` is `OPEN` while an opener holds the pool and `CLEAN` only after
//!   [`crate::Pool::close`] persisted it (P-PM-2).
//!
//! All multi-byte fields are little-endian (Ferrite supports little-endian targets only).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use std::path::Path;

use crate::error::{Error, Result};

/// Magic number of a pool header (`"FERRPOOL"`).
pub const POOL_MAGIC: u64 = u64::from_le_bytes(*b"FERRPOOL");
/// Current (and highest readable) version of the pool header.
pub const POOL_VERSION: u32 = 1;
/// Compatible feature flags this build knows (none yet).
pub const KNOWN_COMPAT: u64 = 0;
/// Incompatible feature flags this build understands (none yet).
pub const KNOWN_INCOMPAT: u64 = 0;
/// Bytes reserved for the header page; the data area starts here.
pub const HEADER_AREA: u64 = 4096;
/// Offset of the shutdown-state word inside the header page.
pub const SHUTDOWN_STATE_OFF: u64 = 128;
/// `shutdown_state` while the pool is open (also written at creation).
pub const STATE_OPEN: u64 = u64::from_le_bytes(*b"OPEN\0\0\0\0");
/// `shutdown_state` after a clean close.
pub const STATE_CLEAN: u64 = u64::from_le_bytes(*b"CLEAN\0\0\0");
/// Smallest pool: the header page plus one data page.
pub const MIN_POOL_SIZE: u64 = 2 * HEADER_AREA;
/// Maximum length of a layout name in bytes.
pub const LAYOUT_MAX: usize = 32;

/// The on-media pool header (see the module diagram).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PoolHeader {
    /// [`POOL_MAGIC`] once creation finished; zero before.
    pub magic: u64,
    /// Header format version.
    pub version: u32,
    /// `size_of::<PoolHeader>()`.
    pub header_size: u32,
    /// Compatible feature flags.
    pub compat_flags: u64,
    /// Incompatible feature flags.
    pub incompat_flags: u64,
    /// Total pool size in bytes.
    pub pool_size: u64,
    /// Offset of the data area.
    pub data_offset: u64,
    /// Pool identity.
    pub uuid: [u8; 16],
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// Layout name, NUL-padded.
    pub layout: [u8; LAYOUT_MAX],
    /// CRC32C of the bytes before this field, computed with `magic = POOL_MAGIC`.
    pub checksum: u32,
    /// Must be zero.
    pub reserved0: u32,
    /// Must be zero.
    pub reserved1: [u8; 16],
}

const _: () = assert!(size_of::<PoolHeader>() == 128);
const _: () = assert!(std::mem::offset_of!(PoolHeader, checksum) == 104);
const _: () = assert!(SHUTDOWN_STATE_OFF >= size_of::<PoolHeader>() as u64);
#[cfg(target_endian = "big")]
compile_error!(
    "Ferrite's on-media formats are little-endian; big-endian targets are not supported"
);

/// Checks a layout name: 1..=32 bytes of printable ASCII.
pub fn validate_layout(layout: &str) -> Result<[u8; LAYOUT_MAX]> {
    if layout.is_empty() || layout.len() > LAYOUT_MAX {
        return Err(Error::InvalidArgument(format!(
            "layout name must be 1..={LAYOUT_MAX} bytes, got {} ({layout:?})",
            layout.len()
        )));
    }
    if !layout.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(Error::InvalidArgument(format!(
            "layout name must be printable ASCII, got {layout:?}"
        )));
    }
    let mut out = [0u8; LAYOUT_MAX];
    out[..layout.len()].copy_from_slice(layout.as_bytes());
    Ok(out)
}

impl PoolHeader {
    /// A new header with the magic still zero (creation writes the magic last).
    pub fn new(pool_size: u64, layout: [u8; LAYOUT_MAX], uuid: [u8; 16], now_ns: u64) -> Self {
        let mut h = PoolHeader {
            magic: 0,
            version: POOL_VERSION,
            header_size: size_of::<PoolHeader>() as u32,
            compat_flags: 0,
            incompat_flags: 0,
            pool_size,
            data_offset: HEADER_AREA,
            uuid,
            created_unix_ns: now_ns,
            layout,
            checksum: 0,
            reserved0: 0,
            reserved1: [0; 16],
        };
        h.checksum = h.compute_checksum();
        h
    }

    /// CRC32C over the bytes before `checksum`, as if `magic` were [`POOL_MAGIC`].
    pub fn compute_checksum(&self) -> u32 {
        let mut copy = *self;
        copy.magic = POOL_MAGIC;
        let bytes = copy.as_bytes();
        crc32c::crc32c(&bytes[..std::mem::offset_of!(PoolHeader, checksum)])
    }

    /// The layout name as a string (up to the first NUL).
    pub fn layout_str(&self) -> Result<&str, &'static str> {
        layout_from_bytes(&self.layout)
    }

    /// Validates a header read from a file of `file_size` bytes, for an opener that expects
    /// `layout`. Checks, in order: magic (zero → incomplete), checksum and version (a
    /// newer version whose checksum we cannot verify is reported as a version error, not as
    /// corruption), feature flags, sizes, layout.
    pub fn validate(&self, path: &Path, file_size: u64, layout: &str) -> Result<()> {
        if self.magic == 0 {
            return Err(Error::Incomplete { path: path.to_path_buf() });
        }
        if self.magic != POOL_MAGIC {
            return Err(Error::corrupt(
                path,
                format!("bad magic {:#018x}: not a Ferrite pool", self.magic),
            ));
        }
        let crc_ok = self.checksum == self.compute_checksum();
        if (self.version != POOL_VERSION || self.incompat_flags & !KNOWN_INCOMPAT != 0)
            && (crc_ok || self.version > POOL_VERSION)
        {
            return Err(Error::WrongVersion {
                path: path.to_path_buf(),
                found: self.version,
                supported: POOL_VERSION,
                incompat_flags: self.incompat_flags,
                known_incompat: KNOWN_INCOMPAT,
            });
        }
        if !crc_ok {
            return Err(Error::corrupt(
                path,
                format!(
                    "header checksum mismatch (stored {:#010x}, computed {:#010x})",
                    self.checksum,
                    self.compute_checksum()
                ),
            ));
        }
        if self.header_size as usize != size_of::<PoolHeader>() {
            return Err(Error::corrupt(path, format!("header size {}", self.header_size)));
        }
        if self.reserved0 != 0 || self.reserved1 != [0; 16] {
            return Err(Error::corrupt(path, "reserved header bytes are not zero"));
        }
        if self.data_offset != HEADER_AREA {
            return Err(Error::corrupt(path, format!("data offset {}", self.data_offset)));
        }
        if self.pool_size != file_size {
            return Err(Error::corrupt(
                path,
                format!(
                    "header records {} bytes but the file has {} (truncated or extended)",
                    self.pool_size, file_size
                ),
            ));
        }
        if self.pool_size < MIN_POOL_SIZE || !self.pool_size.is_multiple_of(HEADER_AREA) {
            return Err(Error::corrupt(path, format!("pool size {}", self.pool_size)));
        }
        let found = self.layout_str().map_err(|what| Error::corrupt(path, what))?;
        if found != layout {
            return Err(Error::WrongLayout {
                path: path.to_path_buf(),
                expected: layout.to_owned(),
                found: found.to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> PoolHeader {
        let mut h = PoolHeader::new(1 << 20, validate_layout("t").unwrap(), [7; 16], 1);
        h.magic = POOL_MAGIC;
        h
    }

    #[test]
    fn valid_header_validates() {
        hdr().validate(Path::new("p"), 1 << 20, "t").unwrap();
    }

    #[test]
    fn every_field_flip_is_detected() {
        // Flip one bit in every byte of the checksummed part: each must be refused with a
        // typed error, never accepted and never a panic.
        let good = hdr();
        for byte in 0..size_of::<PoolHeader>() {
            for bit in [0u8, 3, 7] {
                let mut h = good;
                h.as_mut_bytes()[byte] ^= 1 << bit;
                let r = h.validate(Path::new("p"), 1 << 20, "t");
                assert!(r.is_err(), "flip of byte {byte} bit {bit} was accepted");
            }
        }
    }

    #[test]
    fn layout_names() {
        assert!(validate_layout("").is_err());
        assert!(validate_layout(&"x".repeat(33)).is_err());
        assert!(validate_layout("tab\there").is_err());
        assert!(validate_layout(&"x".repeat(32)).is_ok());
    }
}

// ---------------------------------------------------------------------------------------------
// Segment header (pool sets)
// ---------------------------------------------------------------------------------------------

/// Magic number of a pool-set segment header (`"FERRSEGM"`).
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"FERRSEGM");
/// Current (and highest readable) version of the segment header.
pub const SEGMENT_VERSION: u32 = 1;
/// Offset, in segment 0's header page, of the live-segment bitmap (bit `i` set: segment `i` is
/// part of the pool set).
pub const SEGMENT_BITMAP_OFF: u64 = 1024;
/// Bytes of the live-segment bitmap (up to the end of the header page).
pub const SEGMENT_BITMAP_LEN: u64 = HEADER_AREA - SEGMENT_BITMAP_OFF;

/// The on-media header of every segment file of a pool set (see `docs/design/format.md`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct SegmentHeader {
    /// [`SEGMENT_MAGIC`] once the segment is complete; zero before.
    pub magic: u64,
    /// Header format version.
    pub version: u32,
    /// `size_of::<SegmentHeader>()`.
    pub header_size: u32,
    /// Compatible feature flags.
    pub compat_flags: u64,
    /// Incompatible feature flags.
    pub incompat_flags: u64,
    /// UUID of the pool set this segment belongs to.
    pub pool_uuid: [u8; 16],
    /// This segment's id (also in its file name).
    pub segment_id: u64,
    /// Size of the segment file in bytes.
    pub segment_size: u64,
    /// Offset of the data area (4096).
    pub data_offset: u64,
    /// Creation time of this segment.
    pub created_unix_ns: u64,
    /// Layout name of the pool set, NUL-padded.
    pub layout: [u8; LAYOUT_MAX],
    /// CRC32C of the bytes before this field, computed with `magic = SEGMENT_MAGIC`.
    pub checksum: u32,
    /// Must be zero.
    pub reserved0: u32,
    /// Must be zero.
    pub reserved1: u64,
}

const _: () = assert!(size_of::<SegmentHeader>() == 128);
const _: () = assert!(std::mem::offset_of!(SegmentHeader, checksum) == 112);
const _: () = assert!(SEGMENT_BITMAP_LEN * 8 >= crate::options::MAX_SEGMENTS);

/// How a segment file's header was judged (see [`SegmentHeader::classify`]).
#[derive(Debug)]
pub enum SegmentVerdict {
    /// Magic zero: creation did not finish.
    Incomplete,
    /// A complete header of this pool set.
    Ours,
    /// A complete header of another pool set.
    Foreign([u8; 16]),
    /// Anything else, with the typed error.
    Bad(Error),
}

impl SegmentHeader {
    /// A new header with the magic still zero.
    pub fn new(
        pool_uuid: [u8; 16],
        segment_id: u64,
        segment_size: u64,
        layout: [u8; LAYOUT_MAX],
        now_ns: u64,
    ) -> Self {
        let mut h = SegmentHeader {
            magic: 0,
            version: SEGMENT_VERSION,
            header_size: size_of::<SegmentHeader>() as u32,
            compat_flags: 0,
            incompat_flags: 0,
            pool_uuid,
            segment_id,
            segment_size,
            data_offset: HEADER_AREA,
            created_unix_ns: now_ns,
            layout,
            checksum: 0,
            reserved0: 0,
            reserved1: 0,
        };
        h.checksum = h.compute_checksum();
        h
    }

    /// CRC32C over the bytes before `checksum`, as if `magic` were [`SEGMENT_MAGIC`].
    pub fn compute_checksum(&self) -> u32 {
        let mut copy = *self;
        copy.magic = SEGMENT_MAGIC;
        crc32c::crc32c(&copy.as_bytes()[..std::mem::offset_of!(SegmentHeader, checksum)])
    }

    /// The layout name (up to the first NUL).
    pub fn layout_str(&self) -> Result<&str, &'static str> {
        layout_from_bytes(&self.layout)
    }

    /// Validates the header of the segment file `path` of `file_size` bytes, which must be
    /// segment `id` of the pool set `pool_uuid` (None: segment 0, which defines the uuid)
    /// with layout `layout`.
    pub fn validate(
        &self,
        path: &Path,
        file_size: u64,
        id: u64,
        pool_uuid: Option<[u8; 16]>,
        layout: &str,
    ) -> Result<()> {
        match self.classify(path, pool_uuid) {
            SegmentVerdict::Ours => {}
            SegmentVerdict::Incomplete => return Err(Error::Incomplete { path: path.into() }),
            SegmentVerdict::Foreign(found) => {
                return Err(Error::ForeignSegment {
                    path: path.into(),
                    expected: pool_uuid.unwrap_or_default(),
                    found,
                });
            }
            SegmentVerdict::Bad(e) => return Err(e),
        }
        if self.segment_id != id {
            return Err(Error::corrupt(
                path,
                format!("segment header says id {}, file name says {id}", self.segment_id),
            ));
        }
        if self.segment_size != file_size {
            return Err(Error::corrupt(
                path,
                format!(
                    "segment header records {} bytes but the file has {file_size}",
                    self.segment_size
                ),
            ));
        }
        let found = self.layout_str().map_err(|w| Error::corrupt(path, w))?;
        if found != layout {
            return Err(Error::WrongLayout {
                path: path.into(),
                expected: layout.into(),
                found: found.into(),
            });
        }
        Ok(())
    }

    /// Judges magic, version, checksum, fixed fields and ownership (`pool_uuid`; `None`
    /// accepts any uuid).
    pub fn classify(&self, path: &Path, pool_uuid: Option<[u8; 16]>) -> SegmentVerdict {
        if self.magic == 0 {
            return SegmentVerdict::Incomplete;
        }
        if self.magic != SEGMENT_MAGIC {
            return SegmentVerdict::Bad(Error::corrupt(
                path,
                format!("bad magic {:#018x}: not a Ferrite segment", self.magic),
            ));
        }
        let crc_ok = self.checksum == self.compute_checksum();
        if (self.version != SEGMENT_VERSION || self.incompat_flags & !KNOWN_INCOMPAT != 0)
            && (crc_ok || self.version > SEGMENT_VERSION)
        {
            return SegmentVerdict::Bad(Error::WrongVersion {
                path: path.into(),
                found: self.version,
                supported: SEGMENT_VERSION,
                incompat_flags: self.incompat_flags,
                known_incompat: KNOWN_INCOMPAT,
            });
        }
        if !crc_ok {
            return SegmentVerdict::Bad(Error::corrupt(path, "segment header checksum mismatch"));
        }
        if self.header_size as usize != size_of::<SegmentHeader>()
            || self.reserved0 != 0
            || self.reserved1 != 0
            || self.data_offset != HEADER_AREA
            || self.segment_size < MIN_POOL_SIZE
            || !self.segment_size.is_multiple_of(HEADER_AREA)
        {
            return SegmentVerdict::Bad(Error::corrupt(path, "segment header fields invalid"));
        }
        match pool_uuid {
            Some(u) if u != self.pool_uuid => SegmentVerdict::Foreign(self.pool_uuid),
            _ => SegmentVerdict::Ours,
        }
    }
}

fn layout_from_bytes(layout: &[u8; LAYOUT_MAX]) -> Result<&str, &'static str> {
    let end = layout.iter().position(|&b| b == 0).unwrap_or(LAYOUT_MAX);
    let s = std::str::from_utf8(&layout[..end]).map_err(|_| "layout is not UTF-8")?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err("layout name is empty or not printable ASCII");
    }
    if layout[end..].iter().any(|&b| b != 0) {
        return Err("layout name has bytes after its NUL padding");
    }
    Ok(s)
}
