//! A B+-tree of slotted pages ([`super::page`]) over the page interface ([`super::pages`]).
//!
//! Keys live in leaves with their values; interior pages hold separators and child page
//! numbers (SQLite's index b-tree shape, spec §0.1, with all entries in leaves). There are no
//! sibling pointers: a split or merge touches only the pages on the path from the root and
//! one sibling, and scans keep a stack of the path instead ([`Cursor`]).
//!
//! # Invariants ([`BTree::check`] verifies T2, T3 and the chains of T6)
//! - T1: the root page number never changes. A root split moves the root's records into two
//!   new pages and makes the root an interior page over them; when the root is an interior
//!   page with one child, the child's content moves up into the root and the child is freed.
//! - T2: every leaf is at the same depth; the keys of the subtree under child `i` of an
//!   interior page lie in `[key[i-1], key[i])` (open ends at the page's own bounds), and
//!   every separator lies strictly inside its page's bounds. So keys increase across leaves.
//! - T3: no page is reachable twice (through children or overflow chains); page 0 never.
//! - T4: splits choose the point by bytes: the two halves are as close in size as the records
//!   allow, and both fit (records are at most 3/8 of a page, [`Limits`]). A leaf split
//!   promotes the shortest prefix of the right half's first key that still separates the
//!   halves (suffix truncation). On a split the new page takes the lower half and the old
//!   page keeps the upper half in place (its records stay where they are and only its offset
//!   array loses the lower half's, spec §2.3.6), so the parent only gains one record: its
//!   pointer to the old page stays valid and none of its records changes.
//! - T5: after a delete (or a shrinking update), a non-root page using under a quarter of its
//!   bytes merges with a sibling under the same parent if both fit one page (the left page's
//!   records move into the right one; the left page is freed and its parent record
//!   removed), or else redistributes the records of the pair by bytes (if the parent's new
//!   separator fits; otherwise it stays as it is). Hence an empty non-root leaf is freed
//!   whenever it has a sibling. Merges propagate up; the root shrinks (T1).
//! - T6: a value longer than [`Limits::max_inline`] lives in an overflow chain, written on
//!   insert and freed whole on delete, update, and [`BTree::drop_tree`].
//!
//! Not yet: FAST's cap of 28 records per leaf (so a leaf's slot header fits one cache
//! line, spec §2.2) is not enforced; the FAST protocol will need the tree to split at a
//! record count as well as at bytes. Splits and merges write fresh page images (a
//! compaction) into the pages' private copies; FAST's copy-on-write of a defragmented page
//! into a new page (§2.3.8) is a choice of the layer below.
//!
//! # Ordering, concurrency
//! None here: see [`super`] (P1, P5). A tree value is only a root page number; operations
//! take the page view they run in.

use std::collections::HashSet;
use std::ops::Bound;

use crate::error::{Error, Result};
use crate::query::Direction;

use super::overflow;
use super::page::{self, Header, Kind, LeafCell, LeafValue, Limits};
use super::pages::{PageNo, PageRead, PageWrite};

/// The deepest tree walked; a deeper path means a cycle in damaged pages. (With 32-bit page
/// numbers and the fanouts splits and merges keep, real trees stay far shallower.)
const MAX_DEPTH: usize = 32;

fn corrupt(what: impl Into<String>, page: PageNo) -> Error {
    Error::Corrupted { what: what.into(), at: format!("b-tree page {page}") }
}

/// Page `no`, checked to have the store's page size.
fn fetch<R: PageRead>(pages: &R, no: PageNo) -> Result<R::Page> {
    let page = pages.page(no)?;
    if page.len() != pages.page_size().bytes() {
        return Err(corrupt(format!("page of {} bytes", page.len()), no));
    }
    Ok(page)
}

/// An interior page on a path from the root, and the child index taken.
#[derive(Clone, Copy, Debug)]
struct Frame {
    no: PageNo,
    idx: usize,
}

/// Counts returned by [`BTree::check`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TreeStats {
    /// Key/value pairs.
    pub entries: u64,
    /// Levels (1: the root is a leaf).
    pub height: usize,
    /// Leaf pages.
    pub leaves: u64,
    /// Interior pages.
    pub interiors: u64,
    /// Overflow pages.
    pub overflow: u64,
}

impl TreeStats {
    /// Every page the tree holds.
    pub(crate) fn pages(&self) -> u64 {
        self.leaves + self.interiors + self.overflow
    }
}

/// How a write treats an existing key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Leave it (report that it exists).
    Insert,
    /// Replace its value.
    Put,
}

/// A B+-tree, named by its root page (T1). Cheap to copy; every operation takes the page
/// view to run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BTree {
    root: PageNo,
}

impl BTree {
    /// Creates an empty tree: one empty root leaf.
    pub(crate) fn create<W: PageWrite>(pages: &mut W) -> Result<BTree> {
        let root = pages.allocate()?;
        page::init(pages.page_mut(root)?, Kind::Leaf, 0)?;
        Ok(BTree { root })
    }

    /// The tree whose root is `root` (as returned by [`BTree::root`] at creation).
    pub(crate) fn open(root: PageNo) -> BTree {
        BTree { root }
    }

    /// The root page number, fixed for the tree's life.
    pub(crate) fn root(&self) -> PageNo {
        self.root
    }

    /// The limits of keys and values in `pages`.
    pub(crate) fn limits<R: PageRead>(pages: &R) -> Limits {
        Limits::of(pages.page_size())
    }

    /// The path from the root to the leaf whose range covers `key`, and that leaf.
    fn descend<R: PageRead>(&self, pages: &R, key: &[u8]) -> Result<(Vec<Frame>, PageNo, R::Page)> {
        let mut path = Vec::new();
        let mut no = self.root;
        loop {
            let buf = fetch(pages, no)?;
            let h = Header::read(&buf)?;
            if h.kind == Kind::Leaf {
                return Ok((path, no, buf));
            }
            if path.len() >= MAX_DEPTH {
                return Err(corrupt("tree deeper than any tree can be (a cycle?)", no));
            }
            let idx = page::child_index(&buf, &h, key)?;
            let child = page::child_at(&buf, &h, idx)?;
            path.push(Frame { no, idx });
            no = child;
        }
    }

    /// The value of `key`, if present (a key longer than the limit is never present).
    pub(crate) fn get<R: PageRead>(&self, pages: &R, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > Self::limits(pages).max_key {
            return Ok(None);
        }
        let (_, _, buf) = self.descend(pages, key)?;
        let h = Header::read(&buf)?;
        match page::search(&buf, &h, key)? {
            Ok(i) => Ok(Some(load_value(pages, page::leaf_cell(&buf, &h, i)?)?)),
            Err(_) => Ok(None),
        }
    }

    /// Inserts `key` with `value` unless the key is present. Returns `false` (and changes
    /// nothing) if it is.
    pub(crate) fn insert<W: PageWrite>(
        &self,
        pages: &mut W,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        Ok(!self.write(pages, key, value, Mode::Insert)?)
    }

    /// Inserts or replaces `key`'s value. Returns whether the key was present.
    pub(crate) fn put<W: PageWrite>(
        &self,
        pages: &mut W,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        self.write(pages, key, value, Mode::Put)
    }

    /// Deletes `key`. Returns whether it was present.
    pub(crate) fn delete<W: PageWrite>(&self, pages: &mut W, key: &[u8]) -> Result<bool> {
        if key.len() > Self::limits(pages).max_key {
            return Ok(false);
        }
        let (path, leaf, buf) = self.descend(pages, key)?;
        let h = Header::read(&buf)?;
        let i = match page::search(&buf, &h, key)? {
            Ok(i) => i,
            Err(_) => return Ok(false),
        };
        let old = page::cell_bytes(&buf, &h, i)?.to_vec();
        drop(buf);
        page::remove_cell(pages.page_mut(leaf)?, i)?;
        free_value(pages, &old)?;
        self.rebalance(pages, path, leaf)?;
        Ok(true)
    }

    fn check_input(limits: &Limits, key: &[u8], value: &[u8]) -> Result<()> {
        if key.len() > limits.max_key {
            return Err(Error::InvalidArgument(format!(
                "a key of {} bytes exceeds the limit of {} bytes for pages of {} bytes",
                key.len(),
                limits.max_key,
                limits.page
            )));
        }
        if u32::try_from(value.len()).is_err() {
            return Err(Error::InvalidArgument(format!(
                "a value of {} bytes exceeds the limit of {} bytes",
                value.len(),
                u32::MAX
            )));
        }
        Ok(())
    }

    /// Insert or put; returns whether the key was present.
    fn write<W: PageWrite>(
        &self,
        pages: &mut W,
        key: &[u8],
        value: &[u8],
        mode: Mode,
    ) -> Result<bool> {
        let limits = Self::limits(pages);
        Self::check_input(&limits, key, value)?;
        let (path, leaf, buf) = self.descend(pages, key)?;
        let h = Header::read(&buf)?;
        match page::search(&buf, &h, key)? {
            Ok(_) if mode == Mode::Insert => Ok(true),
            Ok(i) => {
                let old = page::cell_bytes(&buf, &h, i)?.to_vec();
                drop(buf);
                let cell = make_cell(pages, &limits, key, value)?;
                let in_place = page::replace_cell(pages.page_mut(leaf)?, i, &cell)?;
                if !in_place {
                    page::remove_cell(pages.page_mut(leaf)?, i)?;
                    self.split_insert(pages, path.clone(), leaf, i, cell)?;
                }
                free_value(pages, &old)?;
                if in_place {
                    // The new value may be shorter (T5); after a split the path is stale and
                    // the pages are at least half full anyway.
                    self.rebalance(pages, path, leaf)?;
                }
                Ok(true)
            }
            Err(i) => {
                drop(buf);
                let cell = make_cell(pages, &limits, key, value)?;
                if pages.defrag_by_copy() && self.insert_by_copy(pages, &path, leaf, i, &cell)? {
                    return Ok(false);
                }
                if !page::insert_cell(pages.page_mut(leaf)?, i, &cell)? {
                    self.split_insert(pages, path, leaf, i, cell)?;
                }
                Ok(false)
            }
        }
    }

    /// Copy-on-write defragmentation (spec §2.3.8): if record `cell` fits leaf `leaf` only
    /// after compacting it, the leaf's records and the new one are written to a new page, the
    /// parent's pointer is moved to it (a new record in the parent's free space, or the
    /// right-most child in its header), and the leaf is freed; no record of the committed
    /// leaf moves. Returns whether it did so: not for the root (its number is fixed, T1), nor
    /// when the record fits as it is or not even after compaction, nor when the parent has no
    /// room for the repointed record.
    fn insert_by_copy<W: PageWrite>(
        &self,
        pages: &mut W,
        path: &[Frame],
        leaf: PageNo,
        i: usize,
        cell: &[u8],
    ) -> Result<bool> {
        let Some(parent) = path.last().copied() else { return Ok(false) };
        let buf = fetch(pages, leaf)?;
        let h = Header::read(&buf)?;
        if page::fits_as_is(&buf, cell.len())? || page::free_bytes(&buf, &h)? < cell.len() + 2 {
            return Ok(false);
        }
        let mut cells = page::cells(&buf, &h)?;
        drop(buf);
        if i > cells.len() {
            return Err(corrupt(format!("insert at {i} of {} records", cells.len()), leaf));
        }
        cells.insert(i, cell.to_vec());
        let refs: Vec<&[u8]> = cells.iter().map(Vec::as_slice).collect();
        let copy = pages.allocate()?;
        page::build(pages.page_mut(copy)?, h.kind, &refs, h.right)?;
        let pbuf = pages.page_mut(parent.no)?;
        let ph = Header::read(pbuf)?;
        if parent.idx < ph.count {
            let key = page::interior_cell(pbuf, &ph, parent.idx)?.key.to_vec();
            if page::interior_cell(pbuf, &ph, parent.idx)?.child != leaf {
                return Err(corrupt("the path's parent does not point to the leaf", parent.no));
            }
            if !page::replace_cell(pbuf, parent.idx, &page::encode_interior(copy, &key))? {
                pages.free(copy)?;
                return Ok(false);
            }
        } else {
            page::set_right(pbuf, copy)?;
        }
        pages.free(leaf)?;
        Ok(true)
    }

    /// Inserts `cell` as record `i` of page `no`, which has no room for it: splits the page
    /// (T4) and inserts the separator into the parent, splitting upward as needed.
    fn split_insert<W: PageWrite>(
        &self,
        pages: &mut W,
        mut path: Vec<Frame>,
        mut no: PageNo,
        mut i: usize,
        mut cell: Vec<u8>,
    ) -> Result<()> {
        let size = pages.page_size().bytes();
        loop {
            let buf = fetch(pages, no)?;
            let h = Header::read(&buf)?;
            let mut cells = page::cells(&buf, &h)?;
            drop(buf);
            if i > cells.len() {
                return Err(corrupt(format!("insert at {i} of {} records", cells.len()), no));
            }
            cells.insert(i, cell);
            let split = Split::choose(h.kind, size, cells, h.right)
                .ok_or_else(|| corrupt("no split point fits both halves", no))?;
            if no == self.root {
                let (l, r) = (pages.allocate()?, pages.allocate()?);
                split.write_left(pages.page_mut(l)?, h.kind)?;
                split.write_right(pages.page_mut(r)?, h.kind)?;
                let sep = page::encode_interior(l, &split.sep);
                return page::build(pages.page_mut(no)?, Kind::Interior, &[&sep], r);
            }
            let l = pages.allocate()?;
            split.write_left(pages.page_mut(l)?, h.kind)?;
            split.keep_right(pages.page_mut(no)?, h.kind, i)?;
            let parent = path.pop().ok_or_else(|| corrupt("non-root page without a parent", no))?;
            let sep = page::encode_interior(l, &split.sep);
            if page::insert_cell(pages.page_mut(parent.no)?, parent.idx, &sep)? {
                return Ok(());
            }
            (no, i, cell) = (parent.no, parent.idx, sep);
        }
    }

    /// Restores T5 from page `no` upward after it lost bytes; `path` leads to it.
    fn rebalance<W: PageWrite>(
        &self,
        pages: &mut W,
        mut path: Vec<Frame>,
        mut no: PageNo,
    ) -> Result<()> {
        let size = pages.page_size().bytes();
        loop {
            let buf = fetch(pages, no)?;
            let h = Header::read(&buf)?;
            if no == self.root {
                if h.kind == Kind::Interior && h.count == 0 {
                    // One child left: it moves up into the root (T1).
                    let child = fetch(pages, h.right)?;
                    drop(buf);
                    pages.page_mut(no)?.copy_from_slice(&child);
                    drop(child);
                    pages.free(h.right)?;
                    continue;
                }
                return Ok(());
            }
            if page::used_bytes(&buf, &h)? >= size / 4 {
                return Ok(());
            }
            drop(buf);
            let parent = path.pop().ok_or_else(|| corrupt("non-root page without a parent", no))?;
            let pbuf = fetch(pages, parent.no)?;
            let ph = Header::read(&pbuf)?;
            if ph.count == 0 {
                // An only child: nothing to merge with here; the parent is nearly empty
                // itself and is merged one level up.
                no = parent.no;
                continue;
            }
            // The pair (j, j+1) around the page, separated by record j.
            let j = parent.idx.saturating_sub(1).min(ph.count - 1);
            let (left, right) =
                (page::child_at(&pbuf, &ph, j)?, page::child_at(&pbuf, &ph, j + 1)?);
            let sep = page::interior_cell(&pbuf, &ph, j)?.key.to_vec();
            drop(pbuf);
            let (lbuf, rbuf) = (fetch(pages, left)?, fetch(pages, right)?);
            let (lh, rh) = (Header::read(&lbuf)?, Header::read(&rbuf)?);
            if lh.kind != rh.kind {
                return Err(corrupt("siblings of different kinds", parent.no));
            }
            let kind = lh.kind;
            let mut cells = page::cells(&lbuf, &lh)?;
            if kind == Kind::Interior {
                cells.push(page::encode_interior(lh.right, &sep));
            }
            cells.extend(page::cells(&rbuf, &rh)?);
            drop((lbuf, rbuf));
            let total: usize = cells.iter().map(Vec::len).sum();
            if page::fits(kind, size, cells.len(), total) {
                let refs: Vec<&[u8]> = cells.iter().map(Vec::as_slice).collect();
                page::build(pages.page_mut(right)?, kind, &refs, rh.right)?;
                pages.free(left)?;
                page::remove_cell(pages.page_mut(parent.no)?, j)?;
                no = parent.no;
                continue;
            }
            if let Some(split) = Split::choose(kind, size, cells, rh.right) {
                let sep = page::encode_interior(left, &split.sep);
                if page::replace_cell(pages.page_mut(parent.no)?, j, &sep)? {
                    split.write_left(pages.page_mut(left)?, kind)?;
                    split.write_right(pages.page_mut(right)?, kind)?;
                }
            }
            return Ok(());
        }
    }

    /// An ordered scan of the keys between `lo` and `hi`, in direction `dir`.
    pub(crate) fn range<'a, R: PageRead>(
        &self,
        pages: &'a R,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
    ) -> Result<Cursor<'a, R>> {
        Cursor::seek(pages, self.root, lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec), dir)
    }

    /// Frees every page of the tree, overflow chains and the root included. The tree is
    /// walked (and checked for pages reachable twice) before anything is freed.
    pub(crate) fn drop_tree<W: PageWrite>(self, pages: &mut W) -> Result<()> {
        let mut all = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![(self.root, 0usize)];
        while let Some((no, depth)) = stack.pop() {
            if depth > MAX_DEPTH || !seen.insert(no) {
                return Err(corrupt("page reachable twice or tree too deep", no));
            }
            all.push(no);
            let buf = fetch(pages, no)?;
            let h = Header::read(&buf)?;
            match h.kind {
                Kind::Leaf => {
                    for i in 0..h.count {
                        if let Some((first, len)) = chain_of(page::leaf_cell(&buf, &h, i)?)? {
                            for p in overflow::chain_pages(pages, first, len)? {
                                if !seen.insert(p) {
                                    return Err(corrupt("overflow page reachable twice", p));
                                }
                                all.push(p);
                            }
                        }
                    }
                }
                Kind::Interior => {
                    for i in 0..=h.count {
                        stack.push((page::child_at(&buf, &h, i)?, depth + 1));
                    }
                }
            }
        }
        for no in all {
            pages.free(no)?;
        }
        Ok(())
    }

    /// Verifies the whole tree (T2, T3, every page by [`page::check`], every overflow chain)
    /// and counts it.
    pub(crate) fn check<R: PageRead>(&self, pages: &R) -> Result<TreeStats> {
        let mut c = Checker { pages, seen: HashSet::new(), stats: TreeStats::default() };
        c.visit(self.root, None, None, 1)?;
        Ok(c.stats)
    }
}

/// The chain `(first page, bytes in the chain)` of an overflowed leaf record.
fn chain_of(cell: LeafCell<'_>) -> Result<Option<(PageNo, usize)>> {
    match cell.value {
        LeafValue::Inline(_) => Ok(None),
        LeafValue::Overflow { total, first, local } => {
            let rest = (total as usize).checked_sub(local.len()).ok_or_else(|| {
                corrupt(
                    format!("overflow value of {total} bytes with {} local", local.len()),
                    first,
                )
            })?;
            Ok(Some((first, rest)))
        }
    }
}

/// A leaf record's whole value.
fn load_value<R: PageRead>(pages: &R, cell: LeafCell<'_>) -> Result<Vec<u8>> {
    match (cell.value, chain_of(cell)?) {
        (LeafValue::Overflow { local, .. }, Some((first, rest))) => {
            let mut out = local.to_vec();
            overflow::read_chain(pages, first, rest, &mut out)?;
            Ok(out)
        }
        (LeafValue::Inline(v), _) => Ok(v.to_vec()),
        (LeafValue::Overflow { first, .. }, None) => Err(corrupt("overflow record", first)),
    }
}

/// The leaf record for `key` and `value`, writing an overflow chain if the value is long.
fn make_cell<W: PageWrite>(
    pages: &mut W,
    limits: &Limits,
    key: &[u8],
    value: &[u8],
) -> Result<Vec<u8>> {
    if value.len() <= limits.max_inline {
        return Ok(page::encode_leaf(key, LeafValue::Inline(value)));
    }
    let (local, rest) = value.split_at(limits.local);
    let first = overflow::write_chain(pages, rest)?;
    // `check_input` bounded the length by u32::MAX.
    let total = value.len() as u32;
    Ok(page::encode_leaf(key, LeafValue::Overflow { total, first, local }))
}

/// Frees the overflow chain of a leaf record (as [`page::cell_bytes`] returned it), if any.
fn free_value<W: PageWrite>(pages: &mut W, cell: &[u8]) -> Result<()> {
    match chain_of(page::decode_leaf(cell)?)? {
        Some((first, len)) => overflow::free_chain(pages, first, len),
        None => Ok(()),
    }
}

/// The shortest prefix of `b` greater than `a` (`a < b`): a separator between them.
fn separator(a: &[u8], b: &[u8]) -> Vec<u8> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    b[..(common + 1).min(b.len())].to_vec()
}

/// Records divided between two pages, and the separator between them.
struct Split {
    left: Vec<Vec<u8>>,
    /// The left page's right-most child (interior pages).
    left_right: PageNo,
    sep: Vec<u8>,
    right: Vec<Vec<u8>>,
    right_right: PageNo,
}

impl Split {
    /// Divides `cells` (in key order; `right` the right-most child of an interior page) at
    /// the point that balances the two pages' bytes best while both fit (T4). A leaf split
    /// keeps every record and promotes a separator; an interior split promotes the middle
    /// record's key and makes its child the left page's right-most child. `None` if no point
    /// fits (not with records within [`Limits`]).
    fn choose(kind: Kind, size: usize, cells: Vec<Vec<u8>>, right: PageNo) -> Option<Split> {
        let header = match kind {
            Kind::Leaf => page::LEAF_HEADER,
            Kind::Interior => page::INTERIOR_HEADER,
        };
        let room = size - header;
        let bytes: Vec<usize> = cells.iter().map(|c| c.len() + 2).collect();
        let total: usize = bytes.iter().sum();
        let mut best: Option<(usize, usize)> = None;
        let mut before = 0;
        for (m, &b) in bytes.iter().enumerate() {
            let (l, r) = match kind {
                // Left takes cells[..m], right cells[m..]; both non-empty.
                Kind::Leaf => (before, total - before),
                // Left takes cells[..m], cells[m] moves up, right takes cells[m+1..].
                Kind::Interior => (before, total - before - b),
            };
            before += b;
            if kind == Kind::Leaf && m == 0 {
                continue;
            }
            if l <= room && r <= room {
                let diff = l.abs_diff(r);
                if best.is_none_or(|(_, d)| diff < d) {
                    best = Some((m, diff));
                }
            }
        }
        let (m, _) = best?;
        let mut left = cells;
        let mut right_cells = left.split_off(m);
        match kind {
            Kind::Leaf => {
                let a = page::decode_leaf(left.last()?).ok()?.key;
                let b = page::decode_leaf(right_cells.first()?).ok()?.key;
                let sep = separator(a, b);
                Some(Split { left, left_right: 0, sep, right: right_cells, right_right: 0 })
            }
            Kind::Interior => {
                let mid = right_cells.remove(0);
                let c = page::decode_interior(&mid).ok()?;
                Some(Split {
                    left,
                    left_right: c.child,
                    sep: c.key.to_vec(),
                    right: right_cells,
                    right_right: right,
                })
            }
        }
    }

    fn write_left(&self, buf: &mut [u8], kind: Kind) -> Result<()> {
        let refs: Vec<&[u8]> = self.left.iter().map(Vec::as_slice).collect();
        page::build(buf, kind, &refs, self.left_right)
    }

    fn write_right(&self, buf: &mut [u8], kind: Kind) -> Result<()> {
        let refs: Vec<&[u8]> = self.right.iter().map(Vec::as_slice).collect();
        page::build(buf, kind, &refs, self.right_right)
    }

    /// Makes `buf`, the page that split (its records before the insert of record `i`), the
    /// right page in place (spec §2.3.6): the records that moved left (or up) leave its offset
    /// array, the rest stay where they are, and the inserted record joins if it belongs
    /// right. So the in-place protocols change only its header (and write the new record
    /// into free space). Falls back to a fresh image if the record does not fit.
    fn keep_right(&self, buf: &mut [u8], kind: Kind, i: usize) -> Result<()> {
        let boundary = self.left.len() + usize::from(kind == Kind::Interior);
        let gone = boundary - usize::from(i < boundary);
        page::drop_first(buf, gone)?;
        if i >= boundary {
            let cell = self.right.get(i - boundary).ok_or_else(|| Error::Corrupted {
                what: "split lost its new record".into(),
                at: "b-tree split".into(),
            })?;
            if !page::insert_cell(buf, i - boundary, cell)? {
                return self.write_right(buf, kind);
            }
        }
        Ok(())
    }
}

/// The walk of [`BTree::check`].
struct Checker<'a, R: PageRead> {
    pages: &'a R,
    seen: HashSet<PageNo>,
    stats: TreeStats,
}

impl<R: PageRead> Checker<'_, R> {
    /// Checks the subtree at `no`, whose keys must lie in `[lo, hi)`, at `depth` (root 1).
    fn visit(
        &mut self,
        no: PageNo,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: usize,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(corrupt("tree deeper than any tree can be (a cycle?)", no));
        }
        if !self.seen.insert(no) {
            return Err(corrupt("page reachable twice", no));
        }
        let buf = fetch(self.pages, no)?;
        let h = page::check(&buf)?;
        let in_bounds = |k: &[u8], strict_lo: bool| {
            lo.is_none_or(|l| if strict_lo { l < k } else { l <= k }) && hi.is_none_or(|u| k < u)
        };
        match h.kind {
            Kind::Leaf => {
                if self.stats.height == 0 {
                    self.stats.height = depth;
                } else if self.stats.height != depth {
                    return Err(corrupt(
                        format!("leaf at depth {depth}, others at {}", self.stats.height),
                        no,
                    ));
                }
                self.stats.leaves += 1;
                self.stats.entries += h.count as u64;
                for i in 0..h.count {
                    let cell = page::leaf_cell(&buf, &h, i)?;
                    if !in_bounds(cell.key, false) {
                        return Err(corrupt(format!("key {i} outside its parent's bounds"), no));
                    }
                    if let Some((first, len)) = chain_of(cell)? {
                        for p in overflow::chain_pages(self.pages, first, len)? {
                            if !self.seen.insert(p) {
                                return Err(corrupt("overflow page reachable twice", p));
                            }
                            self.stats.overflow += 1;
                        }
                    }
                }
            }
            Kind::Interior => {
                self.stats.interiors += 1;
                let mut child_lo = lo;
                for i in 0..=h.count {
                    let child = page::child_at(&buf, &h, i)?;
                    let child_hi = if i < h.count {
                        let k = page::interior_cell(&buf, &h, i)?.key;
                        if !in_bounds(k, true) {
                            return Err(corrupt(
                                format!("separator {i} outside the page's bounds"),
                                no,
                            ));
                        }
                        Some(k)
                    } else {
                        hi
                    };
                    self.visit(child, child_lo, child_hi, depth + 1)?;
                    child_lo = child_hi;
                }
            }
        }
        Ok(())
    }
}

/// A leaf page and the scan's position in it.
struct LeafPos<P> {
    page: P,
    h: Header,
    /// Ascending: the next record to return. Descending: one past it.
    pos: usize,
}

/// An ordered scan: the path from the root to the current leaf (no sibling pointers), the
/// leaf, and the bounds. Yields owned `(key, value)` pairs; after an error it yields
/// nothing more.
pub(crate) struct Cursor<'a, R: PageRead> {
    pages: &'a R,
    /// Interior pages from the root, each with the child index the scan is in.
    stack: Vec<(R::Page, Header, usize)>,
    leaf: Option<LeafPos<R::Page>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    dir: Direction,
}

impl<R: PageRead> std::fmt::Debug for Cursor<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("depth", &self.stack.len())
            .field("lo", &self.lo)
            .field("hi", &self.hi)
            .field("dir", &self.dir)
            .finish()
    }
}

impl<'a, R: PageRead> Cursor<'a, R> {
    fn seek(
        pages: &'a R,
        root: PageNo,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        dir: Direction,
    ) -> Result<Cursor<'a, R>> {
        let mut c = Cursor { pages, stack: Vec::new(), leaf: None, lo, hi, dir };
        // The bound the scan starts from.
        let start = match dir {
            Direction::Ascending => c.lo.as_ref().map(Vec::as_slice),
            Direction::Descending => c.hi.as_ref().map(Vec::as_slice),
        };
        let start = start.map(<[u8]>::to_vec);
        let mut no = root;
        loop {
            let buf = fetch(pages, no)?;
            let h = Header::read(&buf)?;
            if h.kind == Kind::Leaf {
                let pos = match (dir, start.as_ref().map(Vec::as_slice)) {
                    (Direction::Ascending, Bound::Unbounded) => 0,
                    (Direction::Ascending, Bound::Included(k)) => {
                        page::search(&buf, &h, k)?.unwrap_or_else(|i| i)
                    }
                    (Direction::Ascending, Bound::Excluded(k)) => {
                        page::search(&buf, &h, k)?.map_or_else(|i| i, |i| i + 1)
                    }
                    (Direction::Descending, Bound::Unbounded) => h.count,
                    (Direction::Descending, Bound::Included(k)) => {
                        page::search(&buf, &h, k)?.map_or_else(|i| i, |i| i + 1)
                    }
                    (Direction::Descending, Bound::Excluded(k)) => {
                        page::search(&buf, &h, k)?.unwrap_or_else(|i| i)
                    }
                };
                c.leaf = Some(LeafPos { page: buf, h, pos });
                return Ok(c);
            }
            let idx = match (dir, start.as_ref().map(Vec::as_slice)) {
                (Direction::Ascending, Bound::Unbounded) => 0,
                (Direction::Descending, Bound::Unbounded) => h.count,
                (_, Bound::Included(k) | Bound::Excluded(k)) => page::child_index(&buf, &h, k)?,
            };
            let child = page::child_at(&buf, &h, idx)?;
            c.push(no, buf, h, idx)?;
            no = child;
        }
    }

    /// Pushes interior page `no` onto the path.
    fn push(&mut self, no: PageNo, buf: R::Page, h: Header, idx: usize) -> Result<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(corrupt("tree deeper than any tree can be (a cycle?)", no));
        }
        self.stack.push((buf, h, idx));
        Ok(())
    }

    /// Moves to the next leaf in the scan's direction; `false` at the end.
    fn next_leaf(&mut self) -> Result<bool> {
        let asc = self.dir == Direction::Ascending;
        // Climb to the first ancestor with a next child.
        let mut no = loop {
            let Some((buf, h, idx)) = self.stack.last_mut() else {
                return Ok(false);
            };
            let more = if asc { *idx < h.count } else { *idx > 0 };
            if more {
                *idx = if asc { *idx + 1 } else { *idx - 1 };
                break page::child_at(buf, h, *idx)?;
            }
            self.stack.pop();
        };
        // Descend along the nearest edge.
        loop {
            let buf = fetch(self.pages, no)?;
            let h = Header::read(&buf)?;
            if h.kind == Kind::Leaf {
                let pos = if asc { 0 } else { h.count };
                self.leaf = Some(LeafPos { page: buf, h, pos });
                return Ok(true);
            }
            let idx = if asc { 0 } else { h.count };
            let child = page::child_at(&buf, &h, idx)?;
            self.push(no, buf, h, idx)?;
            no = child;
        }
    }

    fn step(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let asc = self.dir == Direction::Ascending;
        loop {
            let Some(leaf) = self.leaf.as_mut() else {
                return Ok(None);
            };
            let i = if asc {
                (leaf.pos < leaf.h.count).then(|| {
                    leaf.pos += 1;
                    leaf.pos - 1
                })
            } else {
                (leaf.pos > 0).then(|| {
                    leaf.pos -= 1;
                    leaf.pos
                })
            };
            let Some(i) = i else {
                if !self.next_leaf()? {
                    self.leaf = None;
                }
                continue;
            };
            let cell = page::leaf_cell(&leaf.page, &leaf.h, i)?;
            let inside = if asc {
                match &self.hi {
                    Bound::Included(u) => cell.key <= u.as_slice(),
                    Bound::Excluded(u) => cell.key < u.as_slice(),
                    Bound::Unbounded => true,
                }
            } else {
                match &self.lo {
                    Bound::Included(l) => cell.key >= l.as_slice(),
                    Bound::Excluded(l) => cell.key > l.as_slice(),
                    Bound::Unbounded => true,
                }
            };
            if !inside {
                self.leaf = None;
                return Ok(None);
            }
            return Ok(Some((cell.key.to_vec(), load_value(self.pages, cell)?)));
        }
    }
}

impl<R: PageRead> Iterator for Cursor<'_, R> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step() {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.leaf = None;
                self.stack.clear();
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::paged::bytes::put_u32;
    use crate::engine::paged::pages::{MemPages, PageSize};

    fn store(size: usize) -> MemPages {
        MemPages::new(PageSize::new(size).unwrap())
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    /// Copy-on-write defragmentation (spec §2.3.8): a record that fits a non-root leaf only
    /// after compaction goes with the leaf's records to a new page; the parent points there and
    /// the old leaf, unchanged, is freed.
    #[test]
    fn a_scattered_leaf_is_copied_not_compacted() {
        let mut p = store(512);
        p.cow = true;
        let t = BTree::create(&mut p).unwrap();
        let mut next = 0;
        let put = |p: &mut MemPages, k: u32, len: usize| {
            t.insert(p, &key(k), &vec![k as u8; len]).unwrap()
        };
        while page::Header::read(&p.page(t.root()).unwrap()).unwrap().kind == Kind::Leaf {
            put(&mut p, next, 30);
            next += 1;
        }
        let right = |p: &MemPages| page::Header::read(&p.page(t.root()).unwrap()).unwrap().right;
        let leaf = right(&p);
        // Append to the right leaf until its gap is nearly used up (44-byte records).
        while page::fits_as_is(&p.page(leaf).unwrap(), 2 * 44).unwrap() {
            put(&mut p, next, 30);
            next += 1;
        }
        assert_eq!(right(&p), leaf, "no split yet");
        // Two holes of one record each, apart.
        assert!(t.delete(&mut p, &key(next - 2)).unwrap());
        assert!(t.delete(&mut p, &key(next - 4)).unwrap());
        let buf = p.page(leaf).unwrap();
        let h = page::Header::read(&buf).unwrap();
        let big = 70; // a 84-byte record: wider than either hole and the gap, not their sum
        assert!(!page::fits_as_is(&buf, big + 14).unwrap());
        assert!(page::free_bytes(&buf, &h).unwrap() >= big + 16);
        drop(buf);
        put(&mut p, next, big);
        let copy = right(&p);
        assert_ne!(copy, leaf, "the parent points to the copy");
        assert!(p.page(leaf).is_err(), "the old leaf is free");
        assert_eq!(t.get(&p, &key(next)).unwrap(), Some(vec![next as u8; big]));
        t.check(&p).unwrap();
    }

    fn scan(
        t: &BTree,
        p: &MemPages,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
    ) -> Vec<Vec<u8>> {
        t.range(p, lo, hi, dir).unwrap().map(|r| r.unwrap().0).collect()
    }

    #[test]
    fn separators_are_shortest_prefixes() {
        assert_eq!(separator(b"abc", b"abd"), b"abd");
        assert_eq!(separator(b"abc", b"b"), b"b");
        assert_eq!(separator(b"ab", b"abc"), b"abc");
        assert_eq!(separator(b"a", b"azzz"), b"az");
        assert_eq!(separator(b"", b"x"), b"x");
    }

    #[test]
    fn insert_get_delete_across_splits_and_merges() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        let root = t.root();
        for i in 0..2000 {
            assert!(t.insert(&mut p, &key(i * 7 % 2000), &i.to_le_bytes()).unwrap());
        }
        let s = t.check(&p).unwrap();
        assert_eq!(s.entries, 2000);
        assert!(s.height >= 3, "{s:?}");
        assert_eq!(t.root(), root, "the root page never changes");
        assert!(!t.insert(&mut p, &key(5), b"dup").unwrap(), "duplicate refused");
        for i in 0..2000 {
            let want = (0..2000u32).find(|j| j * 7 % 2000 == i).unwrap();
            assert_eq!(t.get(&p, &key(i)).unwrap(), Some(want.to_le_bytes().to_vec()));
        }
        for i in (0..2000).rev() {
            assert!(t.delete(&mut p, &key(i)).unwrap());
            assert!(!t.delete(&mut p, &key(i)).unwrap());
            if i % 97 == 0 {
                t.check(&p).unwrap();
            }
        }
        let s = t.check(&p).unwrap();
        assert_eq!((s.entries, s.height, s.pages()), (0, 1, 1), "shrunk back to one leaf");
        assert_eq!(p.free_count() + 2, p.page_count(), "every other page freed");
    }

    #[test]
    fn put_replaces_and_overflow_values_are_freed() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        let big: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        assert!(!t.put(&mut p, b"a", &big).unwrap());
        assert_eq!(t.get(&p, b"a").unwrap().as_deref(), Some(&big[..]));
        let s = t.check(&p).unwrap();
        assert_eq!(s.overflow, (3000usize - 16).div_ceil(504) as u64);
        assert!(t.put(&mut p, b"a", b"small").unwrap());
        assert_eq!(t.check(&p).unwrap().overflow, 0, "the old chain was freed");
        assert_eq!(t.get(&p, b"a").unwrap().as_deref(), Some(&b"small"[..]));
        assert!(t.put(&mut p, b"a", &big[..129]).unwrap());
        assert_eq!(t.get(&p, b"a").unwrap().as_deref(), Some(&big[..129]));
        assert!(t.delete(&mut p, b"a").unwrap());
        assert_eq!(p.free_count() + 2, p.page_count());
    }

    #[test]
    fn scans_in_both_directions_with_bounds() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        for i in (0..600).step_by(2) {
            t.insert(&mut p, &key(i), b"v").unwrap();
        }
        use Bound::*;
        let (k10, k11, k20) = (key(10), key(11), key(20));
        let asc = scan(&t, &p, Included(&k10), Excluded(&k20), Direction::Ascending);
        assert_eq!(asc, [10, 12, 14, 16, 18].map(key));
        let desc = scan(&t, &p, Excluded(&k10), Included(&k20), Direction::Descending);
        assert_eq!(desc, [20, 18, 16, 14, 12].map(key));
        let odd = scan(&t, &p, Included(&k11), Included(&k11), Direction::Ascending);
        assert!(odd.is_empty());
        assert_eq!(scan(&t, &p, Unbounded, Unbounded, Direction::Ascending).len(), 300);
        let all_desc = scan(&t, &p, Unbounded, Unbounded, Direction::Descending);
        assert_eq!(all_desc.len(), 300);
        assert!(all_desc.windows(2).all(|w| w[0] > w[1]));
        assert!(scan(&t, &p, Included(&k20), Included(&k10), Direction::Ascending).is_empty());
    }

    #[test]
    fn oversized_keys_and_values_are_refused() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        let long = vec![1u8; 59];
        assert!(matches!(t.insert(&mut p, &long, b"v"), Err(Error::InvalidArgument(_))));
        assert!(matches!(t.put(&mut p, &long, b"v"), Err(Error::InvalidArgument(_))));
        assert_eq!(t.get(&p, &long).unwrap(), None);
        assert!(!t.delete(&mut p, &long).unwrap());
        assert!(t.insert(&mut p, &long[..58], b"v").unwrap(), "the limit itself is fine");
        assert_eq!(p.dirty_count(), 1, "the refused writes changed nothing");
    }

    /// The leaves' key counts under the root, left to right.
    fn leaf_counts(t: &BTree, p: &MemPages) -> Vec<usize> {
        let root = p.page(t.root()).unwrap();
        let h = Header::read(&root).unwrap();
        (0..=h.count)
            .map(|i| {
                let leaf = p.page(page::child_at(&root, &h, i).unwrap()).unwrap();
                Header::read(&leaf).unwrap().count
            })
            .collect()
    }

    #[test]
    fn underflow_redistributes_when_a_merge_does_not_fit() {
        // 109-byte records (offset included): four fit a 512-byte leaf, five do not.
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        let k = |i: u8| format!("k{i:02}").into_bytes();
        for i in 0..5 {
            t.insert(&mut p, &k(i), &[i; 100]).unwrap();
        }
        assert_eq!(leaf_counts(&t, &p), [2, 3], "the split balances bytes");
        t.insert(&mut p, &k(5), &[5; 100]).unwrap();
        assert_eq!(leaf_counts(&t, &p), [2, 4]);
        // The left leaf drops under a quarter page; 1 + 4 records do not fit one page.
        t.delete(&mut p, &k(0)).unwrap();
        assert_eq!(leaf_counts(&t, &p), [2, 3], "redistributed, not merged");
        t.check(&p).unwrap();
        let keys = scan(&t, &p, Bound::Unbounded, Bound::Unbounded, Direction::Ascending);
        assert_eq!(keys, (1..6).map(k).collect::<Vec<_>>());
        // Now a merge fits: the root takes the merged leaf's content (height 1).
        t.delete(&mut p, &k(1)).unwrap();
        t.delete(&mut p, &k(2)).unwrap();
        let s = t.check(&p).unwrap();
        assert_eq!((s.height, s.entries), (1, 3));
        assert_eq!(p.free_count() + 2, p.page_count());
    }

    #[test]
    fn drop_frees_every_page() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        for i in 0..500 {
            let v = vec![i as u8; (i as usize * 13) % 700];
            t.insert(&mut p, &key(i), &v).unwrap();
        }
        assert!(t.check(&p).unwrap().overflow > 0);
        t.drop_tree(&mut p).unwrap();
        assert_eq!(p.free_count() + 1, p.page_count());
    }

    #[test]
    fn corrupt_trees_are_reported() {
        let mut p = store(512);
        let t = BTree::create(&mut p).unwrap();
        for i in 0..200 {
            t.insert(&mut p, &key(i), b"value").unwrap();
        }
        p.commit();
        // A child pointer to the root: a cycle.
        let root = p.page(t.root()).unwrap();
        let h = Header::read(&root).unwrap();
        assert_eq!(h.kind, Kind::Interior);
        let mut cyc = root.to_vec();
        put_u32(&mut cyc, 8, t.root());
        p.poke(t.root(), &cyc);
        assert!(matches!(t.check(&p), Err(Error::Corrupted { .. })));
        assert!(matches!(t.get(&p, &key(199)), Err(Error::Corrupted { .. })));
        let scanned: Vec<_> = t
            .range(&p, Bound::Unbounded, Bound::Unbounded, Direction::Ascending)
            .unwrap()
            .collect();
        assert!(scanned.iter().any(|r| matches!(r, Err(Error::Corrupted { .. }))));
        p.rollback();
        // A leaf's key moved out of its parent's bounds.
        let leaf = page::child_at(&root, &h, 0).unwrap();
        let mut lb = p.page(leaf).unwrap().to_vec();
        let lh = Header::read(&lb).unwrap();
        let off = page::slot(&lb, &lh, 0).unwrap();
        lb[off + 4] = b'z';
        p.poke(leaf, &lb);
        assert!(matches!(t.check(&p), Err(Error::Corrupted { .. })));
        p.rollback();
        // Two children naming the same page.
        let mut dup = root.to_vec();
        let second = page::child_at(&root, &h, 1).unwrap();
        put_u32(&mut dup, 8, second);
        p.poke(t.root(), &dup);
        assert!(matches!(t.check(&p), Err(Error::Corrupted { .. })));
        p.rollback();
        t.check(&p).unwrap();
    }
}
