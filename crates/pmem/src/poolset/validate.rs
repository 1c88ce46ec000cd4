//! Judging a pool set's files at open, without changing anything (PS1 of the pool set):
//! segment 0 defines the uuid, the layout, the shutdown state and the live set; every live
//! segment must be present and valid; unlisted files of this set are orphans of a crashed grow
//! or remove (P-PM-8, P-PM-9) and are deleted by the opener; foreign files are refused.
//!
//! # Invariants
//! - Every value read from a file (sizes, ids, bitmap words) is validated or combined with
//!   checked arithmetic: a corrupt set is a typed error, never a panic.
//!
//! # Ordering / Concurrency
//! Reads only, before the set is mapped; no persistence events.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use zerocopy::FromBytes;

use crate::error::{Error, Result};
use crate::header::{
    HEADER_AREA, LAYOUT_MAX, MIN_POOL_SIZE, SEGMENT_BITMAP_OFF, SHUTDOWN_STATE_OFF, STATE_CLEAN,
    STATE_OPEN, SegmentHeader, SegmentVerdict,
};
use crate::options::MAX_SEGMENTS;
use crate::pptr::SegmentId;

/// What validation found in a pool set's files.
pub(super) struct Judged {
    pub(super) uuid: [u8; 16],
    pub(super) layout: [u8; LAYOUT_MAX],
    pub(super) was_clean: bool,
    /// Live segments: id → file size.
    pub(super) live: BTreeMap<SegmentId, u64>,
    /// Files of this set (or incomplete ones) not in the bitmap: names to delete.
    pub(super) orphans: Vec<String>,
    /// Sum of the live segments' sizes (checked: a corrupt size is an error, not an overflow).
    pub(super) total: u64,
}

/// A segment file as found (on disk or in a crash image): id, name, size, and its first bytes
/// (the whole header page for segment 0, the header for the others; `None` if shorter).
pub(super) struct Found {
    pub(super) id: SegmentId,
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) head: Option<Vec<u8>>,
}

/// Validates a pool set's files without changing anything (PS1): segment 0 defines the uuid,
/// the layout, the shutdown state and the live set; every live segment must be present and
/// valid; unlisted files of this set are orphans; foreign files are refused.
pub(super) fn judge(dir: &Path, seg0: &Found, others: &[Found], layout: &str) -> Result<Judged> {
    let path0 = dir.join(&seg0.name);
    if seg0.size < HEADER_AREA {
        return Err(if seg0.size == 0 {
            Error::Incomplete { path: path0 }
        } else {
            Error::TooSmall { path: path0, size: seg0.size, min: MIN_POOL_SIZE }
        });
    }
    let page = seg0
        .head
        .as_deref()
        .filter(|h| h.len() as u64 >= HEADER_AREA)
        .ok_or_else(|| Error::corrupt(&path0, "segment 0 header page unreadable"))?;
    let hdr0 = SegmentHeader::read_from_prefix(page)
        .map(|(h, _)| h)
        .map_err(|_| Error::corrupt(&path0, "unreadable header"))?;
    hdr0.validate(&path0, seg0.size, 0, None, layout)?;
    let uuid = hdr0.pool_uuid;
    let word = |off: u64| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&page[off as usize..off as usize + 8]);
        u64::from_le_bytes(w)
    };
    let was_clean = match word(SHUTDOWN_STATE_OFF) {
        STATE_CLEAN => true,
        STATE_OPEN => false,
        other => return Err(Error::corrupt(&path0, format!("unknown shutdown state {other:#x}"))),
    };
    let mut bitmap = BTreeSet::new();
    for w in 0..MAX_SEGMENTS / 64 {
        let bits = word(SEGMENT_BITMAP_OFF + w * 8);
        for b in 0..64 {
            if bits & (1 << b) != 0 {
                bitmap.insert(w * 64 + b);
            }
        }
    }
    if !bitmap.contains(&0) {
        return Err(Error::corrupt(&path0, "segment 0 is not in its own bitmap"));
    }
    let mut live = BTreeMap::new();
    live.insert(0, seg0.size);
    let mut orphans = Vec::new();
    for f in others {
        let path = dir.join(&f.name);
        let hdr =
            f.head.as_deref().and_then(|h| SegmentHeader::read_from_prefix(h).ok()).map(|(h, _)| h);
        if bitmap.contains(&f.id) {
            let hdr = hdr.ok_or_else(|| Error::corrupt(&path, "segment file truncated"))?;
            hdr.validate(&path, f.size, f.id, Some(uuid), layout)?;
            live.insert(f.id, f.size);
            continue;
        }
        // Not in the bitmap: an orphan of a crashed grow/remove if it is ours or incomplete;
        // a foreign or unreadable file is refused, never deleted.
        match hdr.map(|h| h.classify(&path, Some(uuid))) {
            None | Some(SegmentVerdict::Incomplete) | Some(SegmentVerdict::Ours) => {
                orphans.push(f.name.clone())
            }
            Some(SegmentVerdict::Foreign(found)) => {
                return Err(Error::ForeignSegment { path, expected: uuid, found });
            }
            Some(SegmentVerdict::Bad(e)) => return Err(e),
        }
    }
    if let Some(&id) = bitmap.iter().find(|id| !live.contains_key(id)) {
        return Err(Error::MissingSegment { path: dir.to_path_buf(), id });
    }
    let total = live
        .values()
        .try_fold(0u64, |acc, &size| acc.checked_add(size))
        .ok_or_else(|| Error::corrupt(dir, "the live segments' sizes overflow 64 bits"))?;
    Ok(Judged { uuid, layout: hdr0.layout, was_clean, live, orphans, total })
}

#[cfg(test)]
mod tests {
    use zerocopy::IntoBytes;

    use super::*;
    use crate::header::{SEGMENT_MAGIC, validate_layout};

    fn found(id: SegmentId, size: u64, bitmap: u64) -> Found {
        let layout = validate_layout("t").unwrap();
        let mut h = SegmentHeader::new([7; 16], id, size, layout, 0);
        h.magic = SEGMENT_MAGIC;
        let mut head = h.as_bytes().to_vec();
        if id == 0 {
            head.resize(HEADER_AREA as usize, 0);
            let state = (SHUTDOWN_STATE_OFF as usize)..(SHUTDOWN_STATE_OFF as usize + 8);
            head[state].copy_from_slice(&STATE_CLEAN.to_le_bytes());
            let bits = (SEGMENT_BITMAP_OFF as usize)..(SEGMENT_BITMAP_OFF as usize + 8);
            head[bits].copy_from_slice(&bitmap.to_le_bytes());
        }
        Found { id, name: format!("seg-{id:06}.pm"), size, head: Some(head) }
    }

    // Regression: the live segments' sizes (read from the files, or from a crash image's
    // file table) were summed with `+`, so a set whose validated headers record huge sizes
    // panicked with an overflow in builds with overflow checks instead of being refused.
    #[test]
    fn sizes_that_overflow_are_corrupt_not_a_panic() {
        let huge = 1u64 << 63;
        let seg0 = found(0, 8192, 0b111);
        let others = [found(1, huge, 0), found(2, huge, 0)];
        let r = judge(Path::new("d"), &seg0, &others, "t");
        assert!(matches!(r, Err(Error::Corrupt { .. })), "{:?}", r.err());
        // The same set with sane sizes is accepted, and its total is exact.
        let others = [found(1, 8192, 0), found(2, 16384, 0)];
        let j = judge(Path::new("d"), &seg0, &others, "t").unwrap();
        assert_eq!((j.total, j.live.len(), j.was_clean), (8192 + 8192 + 16384, 3, true));
    }
}
