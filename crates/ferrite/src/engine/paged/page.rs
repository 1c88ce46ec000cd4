//! The slotted page: one node of a B+-tree (spec `fast-fash-nvwal.md` §0.1 SQLite's b-tree
//! page header, §2.2 the slotted page of FAST/FASH).
//!
//! ```text
//! offset 0
//! +------+------+-------+---------+------+------------+
//! | kind | hole | count | content | frag | right (u32)|  8 bytes (leaf) / 12 (interior)
//! | u8   | u16  | u16   | u16     | u8   | interior   |
//! +------+------+-------+---------+------+------------+
//! | offset[0] offset[1] ... offset[count-1]            |  u16 each, sorted by key
//! +----------------------------------------------------+  <- header end + 2*count
//! | free gap (scratch: new records are staged here)    |
//! +----------------------------------------------------+  <- content (0 stored = 65536)
//! | records, packed from the page end toward the front |
//! | and holes [next u16 | size u16 | ...] in a chain   |
//! +----------------------------------------------------+  page end
//! ```
//!
//! All integers are little-endian. The header is SQLite's (same fields, same offsets; only the
//! byte order differs and the kinds are our own: [`KIND_LEAF`], [`KIND_INTERIOR`]), so the
//! FAST arithmetic of §2.2 holds: a leaf's slot header is `8 + 2 * count` bytes.
//!
//! Records:
//! - leaf: `key_len u16 | local_len u16 | key | value`. An inline value has `local_len` bytes.
//!   A value longer than [`Limits::max_inline`] (a quarter of the page) goes to an overflow
//!   chain: bit 15 of `local_len` is set, and the key is followed by `total_len u32 |
//!   first_overflow_page u32 | the first Limits::local bytes of the value`.
//! - interior: `child u32 | key_len u16 | key`. Child `i` holds the keys `k` with
//!   `key[i-1] <= k < key[i]`; the header's right-most child holds `k >= key[count-1]`.
//!
//! Keys are memcomparable byte strings compared bytewise ([`crate::encoding`]) and at most
//! [`Limits::max_key`] bytes (an eighth of the page minus an interior record's 6 fixed
//! bytes); longer keys are refused with `InvalidArgument` before they reach a page.
//!
//! # Invariants (what [`check`] verifies of a page read from storage)
//! - S1: `header end + 2*count <= content <= page size`; every offset lies in
//!   `content..page size` and its record ends inside the page.
//! - S2: records do not overlap each other or a hole; keys strictly increase along the offset
//!   array; keys and inline values respect [`Limits`]; child and overflow page numbers are
//!   not 0 (the meta page).
//! - S3 (byte accounting): `header + 2*count + gap + sum(records) + sum(holes) + frag == page
//!   size`. Holes of fewer than 4 bytes are not chained; they are counted in `frag`, which
//!   never exceeds 255 (the page is compacted first).
//! - S4: records are only ever written into free space (the gap or a hole). An update writes a
//!   new record and repoints its offset (out of place); the old record becomes a hole. Only
//!   [`compact`] and [`build`] move records: they rewrite the whole page image.
//!
//! The hole chain is redundant: every byte of the content area that no offset's record
//! covers is free. FASH/FAST do not make chain updates failure-atomic (§2.2, "per-page free
//! list"), so a recovered page may carry a stale chain; the recovery of the layer below is to
//! call [`rebuild_holes`], which derives the chain and `frag` from the offset array alone, before
//! the tree writes to such a page. On the normal path the tree keeps the chain exact, and
//! [`check`] treats a chain that breaks S2/S3 as corruption.
//!
//! Every accessor is bounds-checked and returns `Error::Corrupted` on bytes that do not
//! describe a page, never panics: pages come from storage and may be damaged.
//!
//! # Ordering, concurrency
//! None: these functions work on one page buffer the caller owns (a private copy when
//! writing).

use crate::error::{Error, Result};

use super::bytes;
use super::pages::{META_PAGE, PageNo, PageSize};

/// Page kind of a leaf (SQLite's "leaf index" value).
pub(crate) const KIND_LEAF: u8 = 10;
/// Page kind of an interior page (SQLite's "interior index" value).
pub(crate) const KIND_INTERIOR: u8 = 2;

/// Header bytes of a leaf.
pub(crate) const LEAF_HEADER: usize = 8;
/// Header bytes of an interior page (the leaf header plus the right-most child).
pub(crate) const INTERIOR_HEADER: usize = 12;

const H_KIND: usize = 0;
const H_HOLE: usize = 1;
const H_COUNT: usize = 3;
const H_CONTENT: usize = 5;
const H_FRAG: usize = 7;
const H_RIGHT: usize = 8;

/// The smallest hole that is chained (`next u16 | size u16`).
const MIN_HOLE: usize = 4;
/// Bit of a leaf record's `local_len` marking an overflowed value.
const OVERFLOW_BIT: u16 = 0x8000;
/// Fixed bytes of a leaf record (`key_len`, `local_len`).
const LEAF_FIXED: usize = 4;
/// Extra fixed bytes of an overflowed leaf record (`total_len`, `first page`).
const OVERFLOW_FIXED: usize = 8;
/// Fixed bytes of an interior record (`child`, `key_len`).
const INTERIOR_FIXED: usize = 6;

/// Size limits derived from the page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The page size in bytes.
    pub page: usize,
    /// The longest key: `page/8 - 6`, so an interior record is at most an eighth of a page.
    pub max_key: usize,
    /// The longest value stored inline: `page/4`; longer values overflow.
    pub max_inline: usize,
    /// The prefix of an overflowed value kept in the leaf: `page/32`.
    pub local: usize,
}

impl Limits {
    /// The limits of pages of `size`.
    pub(crate) fn of(size: PageSize) -> Limits {
        let page = size.bytes();
        Limits { page, max_key: page / 8 - INTERIOR_FIXED, max_inline: page / 4, local: page / 32 }
    }

    /// The limits of a page buffer, judged by its length.
    fn of_buf(buf: &[u8]) -> Result<Limits> {
        PageSize::new(buf.len())
            .map(Limits::of)
            .map_err(|_| corrupt(format!("page buffer of {} bytes", buf.len()), 0))
    }

    /// The largest leaf record, offset included: splits rely on two of them fitting a
    /// half page.
    pub(crate) fn max_leaf_record(&self) -> usize {
        LEAF_FIXED + self.max_key + self.max_inline.max(OVERFLOW_FIXED + self.local) + 2
    }
}

fn corrupt(what: impl Into<String>, at: usize) -> Error {
    Error::Corrupted { what: what.into(), at: format!("page offset {at}") }
}

fn rd8(buf: &[u8], at: usize) -> Result<u8> {
    buf.get(at).copied().ok_or_else(|| corrupt("read past the page end", at))
}

fn rd16(buf: &[u8], at: usize) -> Result<u16> {
    bytes::get_u16(buf, at).ok_or_else(|| corrupt("read past the page end", at))
}

fn rd32(buf: &[u8], at: usize) -> Result<u32> {
    bytes::get_u32(buf, at).ok_or_else(|| corrupt("read past the page end", at))
}

fn wr(buf: &mut [u8], at: usize, data: &[u8]) -> Result<()> {
    let end = at.checked_add(data.len()).ok_or_else(|| corrupt("write past the page end", at))?;
    buf.get_mut(at..end)
        .ok_or_else(|| corrupt("write past the page end", at))?
        .copy_from_slice(data);
    Ok(())
}

fn wr16(buf: &mut [u8], at: usize, v: u16) -> Result<()> {
    bytes::set_u16(buf, at, v).ok_or_else(|| corrupt("write past the page end", at))
}

fn wr32(buf: &mut [u8], at: usize, v: u32) -> Result<()> {
    bytes::set_u32(buf, at, v).ok_or_else(|| corrupt("write past the page end", at))
}

fn slice(buf: &[u8], at: usize, len: usize) -> Result<&[u8]> {
    let end = at.checked_add(len).ok_or_else(|| corrupt("record past the page end", at))?;
    buf.get(at..end).ok_or_else(|| corrupt("record past the page end", at))
}

/// A page's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Keys and values.
    Leaf,
    /// Separator keys and child page numbers.
    Interior,
}

impl Kind {
    fn header_len(self) -> usize {
        match self {
            Kind::Leaf => LEAF_HEADER,
            Kind::Interior => INTERIOR_HEADER,
        }
    }

    fn byte(self) -> u8 {
        match self {
            Kind::Leaf => KIND_LEAF,
            Kind::Interior => KIND_INTERIOR,
        }
    }
}

/// A page's decoded header, checked against S1's bounds (not its records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// Leaf or interior.
    pub kind: Kind,
    /// Offset of the first chained hole, 0 for none.
    pub first_hole: usize,
    /// Number of records.
    pub count: usize,
    /// Start of the record content area.
    pub content: usize,
    /// Bytes in holes too small to chain.
    pub frag: usize,
    /// The right-most child (interior pages; 0 on leaves).
    pub right: PageNo,
}

impl Header {
    /// Reads and bounds-checks the header of `buf`.
    pub(crate) fn read(buf: &[u8]) -> Result<Header> {
        Limits::of_buf(buf)?;
        let kind = match rd8(buf, H_KIND)? {
            KIND_LEAF => Kind::Leaf,
            KIND_INTERIOR => Kind::Interior,
            k => return Err(corrupt(format!("unknown page kind {k}"), H_KIND)),
        };
        let first_hole = rd16(buf, H_HOLE)? as usize;
        let count = rd16(buf, H_COUNT)? as usize;
        let content = match rd16(buf, H_CONTENT)? {
            0 => 65536,
            c => c as usize,
        };
        let frag = rd8(buf, H_FRAG)? as usize;
        let right = if kind == Kind::Interior { rd32(buf, H_RIGHT)? } else { 0 };
        let h = Header { kind, first_hole, count, content, frag, right };
        if h.slots_end() > content || content > buf.len() {
            return Err(corrupt(
                format!("{count} offsets and content start {content} do not fit the page"),
                H_COUNT,
            ));
        }
        if first_hole != 0 && (first_hole < content || first_hole + MIN_HOLE > buf.len()) {
            return Err(corrupt(format!("first hole {first_hole} outside the content"), H_HOLE));
        }
        if kind == Kind::Interior && right == META_PAGE {
            return Err(corrupt("right-most child is page 0", H_RIGHT));
        }
        Ok(h)
    }

    fn write(&self, buf: &mut [u8]) -> Result<()> {
        wr(buf, H_KIND, &[self.kind.byte()])?;
        wr16(buf, H_HOLE, self.first_hole as u16)?;
        wr16(buf, H_COUNT, self.count as u16)?;
        // 65536 (an empty 64 KiB page) is stored as 0, as in SQLite.
        wr16(buf, H_CONTENT, (self.content & 0xFFFF) as u16)?;
        wr(buf, H_FRAG, &[self.frag as u8])?;
        if self.kind == Kind::Interior {
            wr32(buf, H_RIGHT, self.right)?;
        }
        Ok(())
    }

    /// Bytes of the fixed header.
    pub(crate) fn header_len(&self) -> usize {
        self.kind.header_len()
    }

    /// End of the offset array.
    pub(crate) fn slots_end(&self) -> usize {
        self.header_len() + 2 * self.count
    }

    /// The free gap between the offset array and the content area.
    pub(crate) fn gap(&self) -> usize {
        self.content - self.slots_end()
    }
}

/// A leaf record's value as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeafValue<'a> {
    /// The whole value.
    Inline(&'a [u8]),
    /// A value stored in an overflow chain.
    Overflow {
        /// The value's length.
        total: u32,
        /// The chain's first page.
        first: PageNo,
        /// The value's first bytes, kept in the leaf.
        local: &'a [u8],
    },
}

/// A decoded leaf record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeafCell<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: LeafValue<'a>,
}

/// A decoded interior record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InteriorCell<'a> {
    /// The child holding keys below `key` (and at or above the previous record's key).
    pub child: PageNo,
    /// The separator.
    pub key: &'a [u8],
}

/// The length of the record at `off`, checked to end inside the page.
fn cell_len(buf: &[u8], kind: Kind, off: usize) -> Result<usize> {
    let len = match kind {
        Kind::Leaf => {
            let klen = rd16(buf, off)? as usize;
            let word = rd16(buf, off + 2)?;
            let local = (word & !OVERFLOW_BIT) as usize;
            let extra = if word & OVERFLOW_BIT != 0 { OVERFLOW_FIXED } else { 0 };
            LEAF_FIXED + klen + extra + local
        }
        Kind::Interior => INTERIOR_FIXED + rd16(buf, off + 4)? as usize,
    };
    if off + len > buf.len() {
        return Err(corrupt(format!("record of {len} bytes past the page end"), off));
    }
    Ok(len)
}

/// The offset of record `i`.
pub(crate) fn slot(buf: &[u8], h: &Header, i: usize) -> Result<usize> {
    if i >= h.count {
        return Err(corrupt(format!("record {i} of {}", h.count), h.header_len()));
    }
    let at = h.header_len() + 2 * i;
    let off = rd16(buf, at)? as usize;
    if off < h.content || off >= buf.len() {
        return Err(corrupt(format!("offset {off} of record {i} outside the content"), at));
    }
    Ok(off)
}

/// The bytes of record `i` (to move it to another page).
pub(crate) fn cell_bytes<'a>(buf: &'a [u8], h: &Header, i: usize) -> Result<&'a [u8]> {
    let off = slot(buf, h, i)?;
    slice(buf, off, cell_len(buf, h.kind, off)?)
}

/// Decodes the leaf record at `off`.
fn leaf_at(buf: &[u8], off: usize) -> Result<LeafCell<'_>> {
    let klen = rd16(buf, off)? as usize;
    let word = rd16(buf, off + 2)?;
    let local = (word & !OVERFLOW_BIT) as usize;
    let key = slice(buf, off + LEAF_FIXED, klen)?;
    let at = off + LEAF_FIXED + klen;
    let value = if word & OVERFLOW_BIT != 0 {
        LeafValue::Overflow {
            total: rd32(buf, at)?,
            first: rd32(buf, at + 4)?,
            local: slice(buf, at + OVERFLOW_FIXED, local)?,
        }
    } else {
        LeafValue::Inline(slice(buf, at, local)?)
    };
    Ok(LeafCell { key, value })
}

/// Decodes a leaf record held in `cell` (as [`cell_bytes`] returns it).
pub(crate) fn decode_leaf(cell: &[u8]) -> Result<LeafCell<'_>> {
    leaf_at(cell, 0)
}

/// Decodes an interior record held in `cell`.
pub(crate) fn decode_interior(cell: &[u8]) -> Result<InteriorCell<'_>> {
    interior_at(cell, 0)
}

fn interior_at(buf: &[u8], off: usize) -> Result<InteriorCell<'_>> {
    let child = rd32(buf, off)?;
    let klen = rd16(buf, off + 4)? as usize;
    Ok(InteriorCell { child, key: slice(buf, off + INTERIOR_FIXED, klen)? })
}

/// Leaf record `i`.
pub(crate) fn leaf_cell<'a>(buf: &'a [u8], h: &Header, i: usize) -> Result<LeafCell<'a>> {
    if h.kind != Kind::Leaf {
        return Err(corrupt("leaf record asked of an interior page", H_KIND));
    }
    leaf_at(buf, slot(buf, h, i)?)
}

/// Interior record `i`.
pub(crate) fn interior_cell<'a>(buf: &'a [u8], h: &Header, i: usize) -> Result<InteriorCell<'a>> {
    if h.kind != Kind::Interior {
        return Err(corrupt("interior record asked of a leaf", H_KIND));
    }
    interior_at(buf, slot(buf, h, i)?)
}

/// The key of record `i`.
pub(crate) fn key_at<'a>(buf: &'a [u8], h: &Header, i: usize) -> Result<&'a [u8]> {
    match h.kind {
        Kind::Leaf => Ok(leaf_cell(buf, h, i)?.key),
        Kind::Interior => Ok(interior_cell(buf, h, i)?.key),
    }
}

/// Child `i` of an interior page: record `i`'s child for `i < count`, the right-most child
/// for `i == count`.
pub(crate) fn child_at(buf: &[u8], h: &Header, i: usize) -> Result<PageNo> {
    let child = if i == h.count { h.right } else { interior_cell(buf, h, i)?.child };
    if child == META_PAGE {
        return Err(corrupt(format!("child {i} is page 0"), h.header_len()));
    }
    Ok(child)
}

/// Binary search of a page's keys: `Ok(i)` if record `i` has `key`, else `Err(i)` where it
/// would be inserted. On a damaged page (keys out of order) the answer is wrong but defined.
pub(crate) fn search(
    buf: &[u8],
    h: &Header,
    key: &[u8],
) -> Result<std::result::Result<usize, usize>> {
    let (mut lo, mut hi) = (0, h.count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match key_at(buf, h, mid)?.cmp(key) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(Ok(mid)),
        }
    }
    Ok(Err(lo))
}

/// The index of the child of an interior page whose subtree covers `key`.
pub(crate) fn child_index(buf: &[u8], h: &Header, key: &[u8]) -> Result<usize> {
    // Child i covers key[i-1] <= k < key[i]: the first separator above `key`.
    Ok(match search(buf, h, key)? {
        Ok(i) => i + 1,
        Err(i) => i,
    })
}

/// Encodes a leaf record.
pub(crate) fn encode_leaf(key: &[u8], value: LeafValue<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEAF_FIXED + key.len() + 16);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    match value {
        LeafValue::Inline(v) => {
            out.extend_from_slice(&(v.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(v);
        }
        LeafValue::Overflow { total, first, local } => {
            out.extend_from_slice(&(local.len() as u16 | OVERFLOW_BIT).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&first.to_le_bytes());
            out.extend_from_slice(local);
        }
    }
    out
}

/// Encodes an interior record.
pub(crate) fn encode_interior(child: PageNo, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(INTERIOR_FIXED + key.len());
    out.extend_from_slice(&child.to_le_bytes());
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
    out
}

/// Whether records of `total` bytes (`n` of them) fit an empty page of `kind`.
pub(crate) fn fits(kind: Kind, page: usize, n: usize, total: usize) -> bool {
    kind.header_len() + 2 * n + total <= page
}

/// Writes a fresh page image: `cells` in key order, packed from the page end, no holes.
pub(crate) fn build(buf: &mut [u8], kind: Kind, cells: &[&[u8]], right: PageNo) -> Result<()> {
    let total: usize = cells.iter().map(|c| c.len()).sum();
    if !fits(kind, buf.len(), cells.len(), total) {
        return Err(corrupt(
            format!("{} records of {total} bytes do not fit a page", cells.len()),
            0,
        ));
    }
    buf.fill(0);
    let mut h =
        Header { kind, first_hole: 0, count: cells.len(), content: buf.len(), frag: 0, right };
    for (i, cell) in cells.iter().enumerate() {
        h.content -= cell.len();
        wr(buf, h.content, cell)?;
        wr16(buf, h.header_len() + 2 * i, h.content as u16)?;
    }
    h.write(buf)
}

/// Formats `buf` as an empty page.
pub(crate) fn init(buf: &mut [u8], kind: Kind, right: PageNo) -> Result<()> {
    build(buf, kind, &[], right)
}

/// Sets an interior page's right-most child.
pub(crate) fn set_right(buf: &mut [u8], child: PageNo) -> Result<()> {
    let mut h = Header::read(buf)?;
    if h.kind != Kind::Interior {
        return Err(corrupt("right-most child set on a leaf", H_KIND));
    }
    h.right = child;
    h.write(buf)
}

/// Walks the hole chain: `(offset, size)` of each hole, bounds-checked and cycle-safe.
fn holes(buf: &[u8], h: &Header) -> Result<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut at = h.first_hole;
    while at != 0 {
        if out.len() > buf.len() / MIN_HOLE {
            return Err(corrupt("hole chain has a cycle", at));
        }
        if at < h.content {
            return Err(corrupt("hole outside the content", at));
        }
        let next = rd16(buf, at)? as usize;
        let size = rd16(buf, at + 2)? as usize;
        if size < MIN_HOLE || at + size > buf.len() {
            return Err(corrupt(format!("hole of {size} bytes"), at));
        }
        out.push((at, size));
        at = next;
    }
    Ok(out)
}

/// Free bytes of the page: the gap, the holes and the fragments.
pub(crate) fn free_bytes(buf: &[u8], h: &Header) -> Result<usize> {
    Ok(h.gap() + holes(buf, h)?.iter().map(|&(_, s)| s).sum::<usize>() + h.frag)
}

/// Bytes the page's header, offsets and records take.
pub(crate) fn used_bytes(buf: &[u8], h: &Header) -> Result<usize> {
    Ok(buf.len().saturating_sub(free_bytes(buf, h)?))
}

/// Finds `len` bytes of free space, leaving at least `reserve` bytes of gap for the offset
/// array; updates `h` (not yet written back). The gap first, then first fit in the hole chain
/// (taking the hole's tail). The gap comes first for the in-place protocols (FASH/FAST): a
/// hole may be a record the committed page still references (one this transaction deleted
/// or moved), while the gap of a page was free before the transaction too, unless the
/// transaction shrank the page's offset array or content area.
fn alloc(buf: &mut [u8], h: &mut Header, len: usize, reserve: usize) -> Result<Option<usize>> {
    if h.gap() < reserve {
        return Ok(None);
    }
    if h.gap() >= len + reserve {
        h.content -= len;
        return Ok(Some(h.content));
    }
    let mut prev: Option<usize> = None;
    for (at, size) in holes(buf, h)? {
        if size < len {
            prev = Some(at);
            continue;
        }
        let rest = size - len;
        if rest >= MIN_HOLE {
            wr16(buf, at + 2, rest as u16)?;
            return Ok(Some(at + rest));
        }
        if h.frag + rest > u8::MAX as usize {
            prev = Some(at);
            continue;
        }
        let next = rd16(buf, at)?;
        match prev {
            Some(p) => wr16(buf, p, next)?,
            None => h.first_hole = next as usize,
        }
        h.frag += rest;
        return Ok(Some(at + rest));
    }
    Ok(None)
}

/// Returns `len` bytes at `off` to free space (updates `h`, not yet written back). Returns
/// `false` if the fragment count would overflow; the caller compacts the page then.
fn release(buf: &mut [u8], h: &mut Header, off: usize, len: usize) -> Result<bool> {
    if off == h.content {
        h.content += len;
    } else if len >= MIN_HOLE {
        wr16(buf, off, h.first_hole as u16)?;
        wr16(buf, off + 2, len as u16)?;
        h.first_hole = off;
    } else if h.frag + len <= u8::MAX as usize {
        h.frag += len;
    } else {
        return Ok(false);
    }
    Ok(true)
}

/// Inserts `cell` as record `i` if the page has room (compacting it if the free bytes suffice
/// but are scattered). `Ok(false)`: it does not fit; the page is unchanged.
pub(crate) fn insert_cell(buf: &mut [u8], i: usize, cell: &[u8]) -> Result<bool> {
    let mut h = Header::read(buf)?;
    if i > h.count {
        return Err(corrupt(format!("insert at {i} of {} records", h.count), H_COUNT));
    }
    let off = match alloc(buf, &mut h, cell.len(), 2)? {
        Some(off) => off,
        None => {
            if free_bytes(buf, &h)? < cell.len() + 2 {
                return Ok(false);
            }
            compact(buf)?;
            h = Header::read(buf)?;
            match alloc(buf, &mut h, cell.len(), 2)? {
                Some(off) => off,
                None => return Err(corrupt("no room after compaction", H_CONTENT)),
            }
        }
    };
    wr(buf, off, cell)?;
    let at = h.header_len() + 2 * i;
    buf.copy_within(at..h.slots_end(), at + 2);
    wr16(buf, at, off as u16)?;
    h.count += 1;
    h.write(buf)?;
    Ok(true)
}

/// Whether a record of `len` bytes (and its offset) fits the page's gap or one of its holes
/// as it is, without compacting the page.
pub(crate) fn fits_as_is(buf: &[u8], len: usize) -> Result<bool> {
    let mut h = Header::read(buf)?;
    let mut copy = buf.to_vec();
    Ok(alloc(&mut copy, &mut h, len, 2)?.is_some())
}

/// Removes record `i`; its bytes become free space.
pub(crate) fn remove_cell(buf: &mut [u8], i: usize) -> Result<()> {
    let mut h = Header::read(buf)?;
    let off = slot(buf, &h, i)?;
    let len = cell_len(buf, h.kind, off)?;
    let at = h.header_len() + 2 * i;
    buf.copy_within(at + 2..h.slots_end(), at);
    h.count -= 1;
    wr16(buf, h.slots_end(), 0)?;
    let kept = release(buf, &mut h, off, len)?;
    h.write(buf)?;
    if !kept {
        compact(buf)?;
    }
    Ok(())
}

/// Replaces record `i` with `cell` (same key order position). The new record goes into free
/// space and the offset is repointed, the old record becoming free afterwards (S4); if free
/// space is short, the old record is removed first and the page compacted as needed.
/// `Ok(false)`: it does not fit; the page is unchanged.
pub(crate) fn replace_cell(buf: &mut [u8], i: usize, cell: &[u8]) -> Result<bool> {
    let mut h = Header::read(buf)?;
    let old = slot(buf, &h, i)?;
    let old_len = cell_len(buf, h.kind, old)?;
    let at = h.header_len() + 2 * i;
    if let Some(off) = alloc(buf, &mut h, cell.len(), 0)? {
        wr(buf, off, cell)?;
        wr16(buf, at, off as u16)?;
        let kept = release(buf, &mut h, old, old_len)?;
        h.write(buf)?;
        if !kept {
            compact(buf)?;
        }
        return Ok(true);
    }
    if free_bytes(buf, &h)? + old_len < cell.len() {
        return Ok(false);
    }
    remove_cell(buf, i)?;
    if !insert_cell(buf, i, cell)? {
        return Err(corrupt("no room for a replacement after removal", H_CONTENT));
    }
    Ok(true)
}

/// Removes records `0..k` from the offset array and leaves every other record where it is
/// (a split's old page keeps its upper records in place, spec §2.3.6); the removed records'
/// bytes become free space ([`rebuild_holes`]).
pub(crate) fn drop_first(buf: &mut [u8], k: usize) -> Result<()> {
    let mut h = Header::read(buf)?;
    if k > h.count {
        return Err(corrupt(format!("dropping {k} of {} records", h.count), H_COUNT));
    }
    let at = h.header_len();
    buf.copy_within(at + 2 * k..h.slots_end(), at);
    h.count -= k;
    h.write(buf)?;
    rebuild_holes(buf)
}

/// The byte ranges `(offset, length)` of a well-formed page that its header makes
/// meaningful: the header with the offset array, every record, and the first four bytes of
/// every hole (the chain's `next | size`). Every other byte is scratch (spec §2.1's
/// visibility rule): changing it changes nothing the page says. Sorted by offset, not
/// overlapping. `Corrupted` for a page whose header, offsets or hole chain do not describe
/// extents inside it (the full [`check`] is not repeated: the caller read the page through it,
/// and only the extents matter here).
pub(crate) fn referenced(buf: &[u8]) -> Result<Vec<(usize, usize)>> {
    let h = Header::read(buf)?;
    if h.slots_end() > h.content || h.content > buf.len() {
        return Err(corrupt("header past the content area", H_CONTENT));
    }
    let mut out = vec![(0, h.slots_end())];
    out.extend(record_extents(buf, &h)?);
    out.extend(holes(buf, &h)?.into_iter().map(|(at, _)| (at, MIN_HOLE)));
    out.sort_unstable();
    Ok(out)
}

/// The page's records, in key order (copies).
pub(crate) fn cells(buf: &[u8], h: &Header) -> Result<Vec<Vec<u8>>> {
    (0..h.count).map(|i| cell_bytes(buf, h, i).map(<[u8]>::to_vec)).collect()
}

/// Defragments the page: rewrites it with its records packed at the end and no holes.
pub(crate) fn compact(buf: &mut [u8]) -> Result<()> {
    let h = Header::read(buf)?;
    let cells = cells(buf, &h)?;
    let refs: Vec<&[u8]> = cells.iter().map(Vec::as_slice).collect();
    build(buf, h.kind, &refs, h.right)
}

/// The records' `(offset, length)`, sorted by offset and checked not to overlap.
fn record_extents(buf: &[u8], h: &Header) -> Result<Vec<(usize, usize)>> {
    let mut ext = Vec::with_capacity(h.count);
    for i in 0..h.count {
        let off = slot(buf, h, i)?;
        ext.push((off, cell_len(buf, h.kind, off)?));
    }
    ext.sort_unstable();
    for w in ext.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(corrupt("records overlap", w[1].0));
        }
    }
    Ok(ext)
}

/// Rebuilds the hole chain and `frag` from the offset array alone: every byte of the content
/// area that no record covers is free. Runs of at least 4 bytes become holes (chained in
/// offset order); shorter ones are fragments. Used by recovery on pages whose chain may be
/// stale (the chain is not updated failure-atomically).
pub(crate) fn rebuild_holes(buf: &mut [u8]) -> Result<()> {
    let mut h = Header::read(buf)?;
    let ext = record_extents(buf, &h)?;
    // The content area starts at the first record (or the page end).
    h.content = ext.first().map_or(buf.len(), |&(off, _)| off);
    let mut runs = Vec::new();
    let mut at = h.content;
    for &(off, len) in &ext {
        if off > at {
            runs.push((at, off - at));
        }
        at = off + len;
    }
    if at < buf.len() {
        runs.push((at, buf.len() - at));
    }
    let frag: usize = runs.iter().filter(|r| r.1 < MIN_HOLE).map(|r| r.1).sum();
    if frag > u8::MAX as usize {
        return compact(buf);
    }
    h.frag = frag;
    h.first_hole = 0;
    for &(off, len) in runs.iter().rev().filter(|r| r.1 >= MIN_HOLE) {
        wr16(buf, off, h.first_hole as u16)?;
        wr16(buf, off + 2, len as u16)?;
        h.first_hole = off;
    }
    h.write(buf)
}

/// Validates a page read from storage (S1–S3, the record limits of [`Limits`]) and returns
/// its header. `Corrupted` for anything that is not a well-formed page.
pub(crate) fn check(buf: &[u8]) -> Result<Header> {
    let limits = Limits::of_buf(buf)?;
    let h = Header::read(buf)?;
    let ext = record_extents(buf, &h)?;
    let mut prev: Option<&[u8]> = None;
    for i in 0..h.count {
        let key = match h.kind {
            Kind::Leaf => {
                let c = leaf_cell(buf, &h, i)?;
                match c.value {
                    LeafValue::Inline(v) if v.len() > limits.max_inline => {
                        return Err(corrupt(format!("inline value of {} bytes", v.len()), i));
                    }
                    LeafValue::Overflow { total, first, local } => {
                        if first == META_PAGE
                            || (total as usize) <= limits.max_inline
                            || local.len() != limits.local
                        {
                            return Err(corrupt(
                                format!("overflow record: {total} bytes, {} local", local.len()),
                                slot(buf, &h, i)?,
                            ));
                        }
                    }
                    LeafValue::Inline(_) => {}
                }
                c.key
            }
            Kind::Interior => {
                child_at(buf, &h, i)?;
                interior_cell(buf, &h, i)?.key
            }
        };
        if key.len() > limits.max_key {
            return Err(corrupt(format!("key of {} bytes", key.len()), slot(buf, &h, i)?));
        }
        if prev.is_some_and(|p| p >= key) {
            return Err(corrupt(format!("keys out of order at record {i}"), slot(buf, &h, i)?));
        }
        prev = Some(key);
    }
    // Holes must not overlap records or each other, and the bytes must add up (S2, S3).
    let hs = holes(buf, &h)?;
    let mut all: Vec<(usize, usize)> = ext.iter().chain(hs.iter()).copied().collect();
    all.sort_unstable();
    for w in all.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(corrupt("hole overlaps a record or a hole", w[1].0));
        }
    }
    let accounted = h.slots_end() + h.gap() + all.iter().map(|r| r.1).sum::<usize>() + h.frag;
    if accounted != buf.len() {
        return Err(corrupt(
            format!("{accounted} bytes accounted for in a page of {}", buf.len()),
            H_FRAG,
        ));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        init(&mut b, Kind::Leaf, 0).unwrap();
        b
    }

    fn leaf(key: &[u8], v: &[u8]) -> Vec<u8> {
        encode_leaf(key, LeafValue::Inline(v))
    }

    fn keys(buf: &[u8]) -> Vec<Vec<u8>> {
        let h = Header::read(buf).unwrap();
        (0..h.count).map(|i| key_at(buf, &h, i).unwrap().to_vec()).collect()
    }

    #[test]
    fn limits() {
        let l = Limits::of(PageSize::new(512).unwrap());
        assert_eq!((l.max_key, l.max_inline, l.local), (58, 128, 16));
        let l = Limits::of(PageSize::DEFAULT);
        assert_eq!((l.max_key, l.max_inline, l.local), (506, 1024, 128));
        for size in [512, 4096, 65536] {
            let l = Limits::of(PageSize::new(size).unwrap());
            // Any two records (with offsets) fit half of a page's usable bytes each: a split
            // by bytes always finds a point where both halves fit.
            assert!(2 * l.max_leaf_record() <= size - INTERIOR_HEADER, "{size}");
        }
    }

    #[test]
    fn header_layout_is_sqlites() {
        let mut b = page(512);
        assert!(insert_cell(&mut b, 0, &leaf(b"k", b"v")).unwrap());
        // kind, first hole, count, content start, fragments.
        assert_eq!(b[0], KIND_LEAF);
        assert_eq!(bytes::u16_at(&b, 1), 0);
        assert_eq!(bytes::u16_at(&b, 3), 1);
        assert_eq!(bytes::u16_at(&b, 5), 512 - 6);
        assert_eq!(b[7], 0);
        assert_eq!(bytes::u16_at(&b, 8), 512 - 6, "offset[0]");
        assert_eq!(&b[506..], &[1, 0, 1, 0, b'k', b'v']);
        let mut big = vec![0u8; 65536];
        init(&mut big, Kind::Interior, 7).unwrap();
        assert_eq!(&big[5..7], &[0, 0], "content start 65536 is stored as 0");
        assert_eq!(check(&big).unwrap().content, 65536);
        assert_eq!(&big[8..12], &[7, 0, 0, 0]);
    }

    #[test]
    fn insert_remove_replace_keep_the_page_valid() {
        let mut b = page(512);
        for (i, k) in [b"b", b"d", b"a", b"c"].iter().enumerate() {
            let h = Header::read(&b).unwrap();
            let pos = search(&b, &h, *k).unwrap().unwrap_err();
            assert!(insert_cell(&mut b, pos, &leaf(*k, &[i as u8; 20])).unwrap());
            check(&b).unwrap();
        }
        assert_eq!(keys(&b), [b"a", b"b", b"c", b"d"]);
        remove_cell(&mut b, 1).unwrap();
        check(&b).unwrap();
        assert!(Header::read(&b).unwrap().first_hole != 0, "a hole was chained");
        assert!(replace_cell(&mut b, 0, &leaf(b"a", b"xy")).unwrap());
        check(&b).unwrap();
        let h = Header::read(&b).unwrap();
        assert_eq!(leaf_cell(&b, &h, 0).unwrap().value, LeafValue::Inline(b"xy"));
        assert_eq!(keys(&b), [b"a", b"c", b"d"]);
    }

    #[test]
    fn full_page_refuses_and_compaction_reclaims_holes() {
        let mut b = page(512);
        let mut n = 0u8;
        while insert_cell(&mut b, n as usize, &leaf(&[n], &[0; 40])).unwrap() {
            n += 1;
        }
        assert_eq!(n, 10, "10 records of 45 + 2 bytes fit 512 - 8");
        let before = b.clone();
        assert!(!insert_cell(&mut b, 0, &leaf(b"", &[0; 40])).unwrap());
        assert_eq!(b, before, "a refused insert changes nothing");
        // Free two non-adjacent records: 96 bytes in two holes, then a record of 90 bytes
        // only fits after compaction.
        remove_cell(&mut b, 2).unwrap();
        remove_cell(&mut b, 5).unwrap();
        check(&b).unwrap();
        assert!(insert_cell(&mut b, 0, &leaf(b"", &[1; 84])).unwrap());
        let h = check(&b).unwrap();
        assert_eq!((h.count, h.first_hole, h.frag), (9, 0, 0));
    }

    #[test]
    fn small_leftovers_become_fragments() {
        // 29 records of 15 bytes (+ 2 for the offset) leave a gap of 11 bytes in 512 - 8.
        let mut b = page(512);
        for k in 0..29u8 {
            assert!(insert_cell(&mut b, k as usize, &leaf(&[k], &[0; 10])).unwrap());
        }
        assert_eq!(Header::read(&b).unwrap().gap(), 11);
        remove_cell(&mut b, 1).unwrap(); // a 15-byte hole; the gap grows to 13
        assert!(replace_cell(&mut b, 0, &leaf(&[0], &[0; 9])).unwrap()); // takes 14 of the hole
        let h = check(&b).unwrap();
        assert_eq!(h.frag, 1);
    }

    #[test]
    fn holes_are_rebuilt_from_the_offset_array() {
        let mut b = page(1024);
        for k in 0..8u8 {
            assert!(insert_cell(&mut b, k as usize, &leaf(&[k], &[k; 30])).unwrap());
        }
        for i in [6, 4, 1] {
            remove_cell(&mut b, i).unwrap();
        }
        let good = check(&b).unwrap();
        let free = free_bytes(&b, &good).unwrap();
        // A crash left the chain stale: the header forgets its holes.
        b[H_HOLE] = 0;
        b[H_HOLE + 1] = 0;
        assert!(matches!(check(&b), Err(Error::Corrupted { .. })));
        rebuild_holes(&mut b).unwrap();
        let h = check(&b).unwrap();
        assert_eq!(free_bytes(&b, &h).unwrap(), free);
        assert_eq!(keys(&b).len(), 5);
    }

    #[test]
    fn interior_records() {
        let mut b = vec![0u8; 512];
        init(&mut b, Kind::Interior, 9).unwrap();
        assert!(insert_cell(&mut b, 0, &encode_interior(3, b"m")).unwrap());
        assert!(insert_cell(&mut b, 0, &encode_interior(4, b"f")).unwrap());
        let h = check(&b).unwrap();
        let ci = |k: &[u8]| child_at(&b, &h, child_index(&b, &h, k).unwrap()).unwrap();
        assert_eq!([ci(b"a"), ci(b"f"), ci(b"g"), ci(b"m"), ci(b"z")], [4, 3, 3, 9, 9]);
        set_right(&mut b, 11).unwrap();
        assert_eq!(Header::read(&b).unwrap().right, 11);
    }

    #[test]
    fn overflow_records_round_trip() {
        let local = [5u8; 16];
        let cell =
            encode_leaf(b"key", LeafValue::Overflow { total: 1000, first: 42, local: &local });
        let c = decode_leaf(&cell).unwrap();
        assert_eq!(c.key, b"key");
        assert_eq!(c.value, LeafValue::Overflow { total: 1000, first: 42, local: &local });
        let mut b = page(512);
        assert!(insert_cell(&mut b, 0, &cell).unwrap());
        check(&b).unwrap();
    }

    #[test]
    fn damaged_pages_are_corrupted_not_panics() {
        let mut b = page(512);
        for k in 0..4u8 {
            assert!(insert_cell(&mut b, k as usize, &leaf(&[k], &[k; 30])).unwrap());
        }
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Damage)> = vec![
            ("kind", Box::new(|b| b[0] = 99)),
            ("count", Box::new(|b| b[3] = 250)),
            ("content", Box::new(|b| bytes::put_u16(b, 5, 4))),
            ("offset", Box::new(|b| bytes::put_u16(b, 8, 600))),
            ("key order", Box::new(|b| b.copy_within(10..12, 8))),
            (
                "key length",
                Box::new(|b| {
                    let off = usize::from(bytes::u16_at(b, 8));
                    bytes::put_u16(b, off, 400);
                }),
            ),
            ("hole", Box::new(|b| bytes::put_u16(b, 1, 508))),
            ("frag", Box::new(|b| b[7] = 3)),
        ];
        for (what, damage) in cases {
            let mut d = b.clone();
            damage(&mut d);
            assert!(matches!(check(&d), Err(Error::Corrupted { .. })), "{what}");
        }
        assert!(matches!(check(&[0u8; 100]), Err(Error::Corrupted { .. })), "odd size");
    }
}
