//! Overflow chains: the part of a large value that does not stay in its leaf.
//!
//! A leaf keeps a value longer than [`Limits::max_inline`](super::page::Limits) as a local
//! prefix plus the total length and the first page of a chain (see [`super::page`]). The rest
//! of the value lies in the chain, in order:
//!
//! ```text
//! +------+------+----------+-----------+---------------------------+
//! | kind | 0    | used u16 | next u32  | used bytes of the value   |
//! +------+------+----------+-----------+---------------------------+
//!   0      1      2          4           8                 page end
//! ```
//!
//! `kind` is [`KIND_OVERFLOW`]; `next` is 0 on the last page. Every page but the last is
//! full (`used = page - 8`).
//!
//! # Invariants
//! - O1: a chain is written whole when its value is inserted (into newly allocated pages)
//!   and freed whole when the value is deleted or replaced; it is never modified in place.
//! - O2: the chain's `used` bytes add up to the value's length minus the local prefix;
//!   reading or freeing stops with `Corrupted` if they do not, if a page is not an overflow
//!   page, or if the chain is longer than the value needs (so a cycle cannot loop).
//!
//! # Ordering, concurrency
//! None here: pages are written through [`PageWrite`], whose layer makes them durable.

use crate::error::{Error, Result};

use super::bytes::{put_u16, put_u32, u16_at, u32_at};
use super::pages::{META_PAGE, PageNo, PageRead, PageWrite};

/// Page kind of an overflow page.
pub(crate) const KIND_OVERFLOW: u8 = 32;
/// Header bytes of an overflow page.
pub(crate) const OVERFLOW_HEADER: usize = 8;

fn corrupt(what: impl Into<String>, page: PageNo) -> Error {
    Error::Corrupted { what: what.into(), at: format!("overflow page {page}") }
}

/// Bytes of value one overflow page holds.
fn per_page(page_size: usize) -> usize {
    page_size - OVERFLOW_HEADER
}

/// Writes `data` into a new chain and returns its first page. `data` is not empty.
pub(crate) fn write_chain<W: PageWrite>(pages: &mut W, data: &[u8]) -> Result<PageNo> {
    let room = per_page(pages.page_size().bytes());
    let chunks: Vec<&[u8]> = data.chunks(room).collect();
    let mut nos = Vec::with_capacity(chunks.len());
    for _ in &chunks {
        nos.push(pages.allocate()?);
    }
    for (i, (chunk, &no)) in chunks.iter().zip(&nos).enumerate() {
        let next = nos.get(i + 1).copied().unwrap_or(0);
        let buf = pages.page_mut(no)?;
        if buf.len() != room + OVERFLOW_HEADER {
            return Err(corrupt(format!("page of {} bytes", buf.len()), no));
        }
        buf.fill(0);
        buf[0] = KIND_OVERFLOW;
        put_u16(buf, 2, chunk.len() as u16);
        put_u32(buf, 4, next);
        buf[OVERFLOW_HEADER..OVERFLOW_HEADER + chunk.len()].copy_from_slice(chunk);
    }
    nos.first().copied().ok_or_else(|| Error::InvalidArgument("empty overflow chain".into()))
}

/// Walks a chain holding `len` bytes starting at `first`, calling `each(page, bytes)` on each
/// page in order, after checking it (O2).
fn walk<R: PageRead>(
    pages: &R,
    first: PageNo,
    len: usize,
    mut each: impl FnMut(PageNo, &[u8]) -> Result<()>,
) -> Result<()> {
    let room = per_page(pages.page_size().bytes());
    let (mut no, mut left) = (first, len);
    while left > 0 {
        if no == META_PAGE {
            return Err(corrupt(format!("chain ends {left} bytes early"), no));
        }
        let page = pages.page(no)?;
        if page.len() != room + OVERFLOW_HEADER {
            return Err(corrupt(format!("page of {} bytes", page.len()), no));
        }
        let (used, next) = (usize::from(u16_at(&page, 2)), u32_at(&page, 4));
        let want = left.min(room);
        if page[0] != KIND_OVERFLOW || used != want {
            return Err(corrupt(
                format!("kind {} with {used} bytes, {want} expected", page[0]),
                no,
            ));
        }
        each(no, &page[OVERFLOW_HEADER..OVERFLOW_HEADER + used])?;
        left -= used;
        if left == 0 && next != 0 {
            return Err(corrupt("chain longer than its value", no));
        }
        no = next;
    }
    Ok(())
}

/// Appends the `len` bytes of the chain at `first` to `out`.
pub(crate) fn read_chain<R: PageRead>(
    pages: &R,
    first: PageNo,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.reserve(len);
    walk(pages, first, len, |_, bytes| {
        out.extend_from_slice(bytes);
        Ok(())
    })
}

/// The page numbers of the chain at `first` holding `len` bytes (for checks).
pub(crate) fn chain_pages<R: PageRead>(
    pages: &R,
    first: PageNo,
    len: usize,
) -> Result<Vec<PageNo>> {
    let mut nos = Vec::new();
    walk(pages, first, len, |no, _| {
        nos.push(no);
        Ok(())
    })?;
    Ok(nos)
}

/// Frees the chain at `first` holding `len` bytes (O1). The chain is checked whole before
/// any page is freed.
pub(crate) fn free_chain<W: PageWrite>(pages: &mut W, first: PageNo, len: usize) -> Result<()> {
    for no in chain_pages(pages, first, len)? {
        pages.free(no)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::paged::pages::{MemPages, PageSize};

    #[test]
    fn chains_round_trip_and_free() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        for len in [1, 503, 504, 505, 2000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let first = write_chain(&mut p, &data).unwrap();
            let mut out = Vec::new();
            read_chain(&p, first, len, &mut out).unwrap();
            assert_eq!(out, data, "{len}");
            assert_eq!(chain_pages(&p, first, len).unwrap().len(), len.div_ceil(504));
            free_chain(&mut p, first, len).unwrap();
            assert_eq!(p.free_count() + 1, p.page_count(), "every page freed");
        }
    }

    #[test]
    fn damaged_chains_are_corrupted() {
        let mut p = MemPages::new(PageSize::new(512).unwrap());
        let first = write_chain(&mut p, &[1u8; 1200]).unwrap();
        let mut out = Vec::new();
        // Wrong length both ways, and a cycle.
        assert!(matches!(read_chain(&p, first, 1300, &mut out), Err(Error::Corrupted { .. })));
        assert!(matches!(read_chain(&p, first, 800, &mut out), Err(Error::Corrupted { .. })));
        let second = u32_at(&p.page(first).unwrap(), 4);
        put_u32(p.page_mut(second).unwrap(), 4, first);
        assert!(matches!(read_chain(&p, first, 1200, &mut out), Err(Error::Corrupted { .. })));
        p.page_mut(first).unwrap()[0] = 0;
        assert!(matches!(free_chain(&mut p, first, 1200), Err(Error::Corrupted { .. })));
    }
}
