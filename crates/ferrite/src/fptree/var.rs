//! The byte-key tree's leaf steps (v2 leaf, `layout_var.rs`): keys of up to 23 bytes inline in
//! the slot, longer keys in a key block allocated through PAllocator's leak-free interface into
//! the slot itself. Design: `docs/design/fptree.md`, "Variable-size keys (part II)".
//!
//! # Invariants
//! - V1: in a quiescent leaf an invalid slot holds no key-block pointer (its `w0` is null or an
//!   inline tag), so a later pointer insert can allocate into it.
//! - V2: a key block is named by exactly one valid slot of one leaf.
//! - V3: a pointer slot's block is allocated and holds `len` key bytes, 24 ≤ `len` ≤ 4 096; an
//!   inline key has at most 23 bytes (S2 of the layout: the form is canonical, so equal keys
//!   have equal slot words).
//!
//! # Ordering (rules of `docs/design/persistence.md`)
//! - P-FPT-1: an inline key's slot and fingerprint are persisted before the bitmap commit.
//! - P-FPT-20: a long key's block is allocated into the free slot (the allocator's redo
//!   transaction makes the pointer durable); from then a crash leaves a pointer in an invalid
//!   slot, which the rebuild frees.
//! - P-FPT-21: the key bytes, the slot's value and length words and the fingerprint are
//!   persisted (one fence) before the bitmap commit (P-FPT-2).
//! - P-FPT-22: a deleted key's block is freed after the bitmap commit (P-FPT-9), by the
//!   allocator, which durably nulls the slot in the same transaction.
//! - P-FPT-26: an update of a key-block key copies the slot's pointer into a free slot with
//!   the offset, value and length words and the fingerprint durable first (P-FPT-1's fence),
//!   then stores the segment word and persists it before the bitmap commit: no torn copy can
//!   read as a pointer.
//! - P-FPT-23: after an update's commit the old slot's `w0` is nulled and persisted (the new
//!   slot names the same block); the rebuild does the same for an interrupted update.
//! - P-FPT-24: a split writes the new leaf whole (only the upper half's slots, every other
//!   slot empty) and persists it before the old leaf's bitmap changes (P-FPT-6).
//! - P-FPT-25: after P-FPT-6, the old leaf's slots moved to the new leaf have `w0` nulled and
//!   flushed (each line once); the link's persist (P-FPT-7) fences them, before the disarm
//!   (P-FPT-8).
//!
//! # Concurrency
//! Every step runs under the leaf's lock (`mod.rs`, "Concurrency"); lock-free readers copy
//! slots and validate the leaf's version after. Key blocks are freed only under the leaf's
//! lock, before its unlock, so a reader that followed a freed pointer fails its validation
//! (reads stay inside the mapped pool set and are bounds-checked). Every slot word is read and written whole (conventions §2
//! rule 3); `w0` alone decides the slot's form, so no torn slot reads as a pointer.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use ferrite_pmem::{PPtr, PoolSet};

use super::key::fingerprint_bytes;
use super::layout::{FULL, L_FP, M};
use super::layout_var::{
    EMPTY_SLOT, KeyForm, SlotKey, VAR_LEAF_SIZE, VarLeafImage, decode_slot, encode_inline,
    key_form, var_slot_offset,
};
use super::{ByteKey, Leaf, LeafSummary, Tree, corrupt, field, resolve_block};
use crate::storage::{StorageError, StorageResult};

type T = Tree<ByteKey>;
/// An owned byte key (the DRAM form).
type Owned = Box<[u8]>;

/// Bytes compared per step when a key is checked against its block (a stack buffer).
const CHUNK: usize = 256;

/// The leaf's pointer for messages (`NULL` if `g` no longer resolves).
fn at(t: &T, g: u64) -> PPtr {
    t.set.to_pptr(g).unwrap_or(PPtr::NULL)
}

fn read_slot(set: &PoolSet, leaf: u64, slot: usize) -> StorageResult<[u64; 4]> {
    let s = leaf + var_slot_offset(slot);
    let mut w = [0u64; 4];
    for (i, x) in w.iter_mut().enumerate() {
        *x = set.load_u64(s + 8 * i as u64, Ordering::Acquire)?;
    }
    Ok(w)
}

fn read_leaf(t: &T, leaf: Leaf) -> StorageResult<VarLeafImage> {
    t.set.read_struct(leaf.g).map_err(|e| corrupt(format!("unreadable leaf: {e}"), leaf.p))
}

fn decode(w: [u64; 4], slot: usize, at: PPtr) -> StorageResult<(SlotKey, u64)> {
    decode_slot(w).map_err(|e| corrupt(format!("slot {slot}: {e}"), at))
}

/// The global offset of a key block of `len` bytes (validated: aligned, inside a segment).
fn key_block(set: &PoolSet, block: PPtr, len: u64) -> StorageResult<u64> {
    resolve_block(set, block, len, "key block")
}

/// Appends the bytes of a (non-empty) slot key to `buf`.
fn key_bytes(set: &PoolSet, k: &SlotKey, buf: &mut Vec<u8>) -> StorageResult<()> {
    match k {
        SlotKey::Empty => {}
        SlotKey::Inline { .. } => buf.extend_from_slice(k.inline().unwrap_or_default()),
        SlotKey::Pointer { block, len, .. } => {
            let g = key_block(set, *block, u64::from(*len))?;
            let start = buf.len();
            buf.resize(start + usize::from(*len), 0);
            set.read_into(g, &mut buf[start..])?;
        }
    }
    Ok(())
}

/// The key of a valid slot as an owned copy; a valid slot without a key is damage.
fn owned_key(set: &PoolSet, w: [u64; 4], slot: usize, at: PPtr) -> StorageResult<Box<[u8]>> {
    let (k, _) = decode(w, slot, at)?;
    if k.is_empty() {
        return Err(corrupt(format!("valid slot {slot} holds no key"), at));
    }
    let mut buf = Vec::with_capacity(k.len());
    key_bytes(set, &k, &mut buf)?;
    Ok(buf.into())
}

/// The fingerprint word of `slot` with its byte set to `fp`.
fn store_fp(set: &PoolSet, leaf: u64, slot: usize, fp: u8) -> StorageResult<u64> {
    let word = leaf + L_FP + (slot as u64 / 8) * 8;
    let mut bytes = set.load_u64(word, Ordering::Acquire)?.to_le_bytes();
    bytes[slot % 8] = fp;
    set.store_u64(word, u64::from_le_bytes(bytes), Ordering::Relaxed)?;
    Ok(word)
}

/// Stores a slot's four words (`w0` last; the slot is invisible until the bitmap commit).
fn store_slot(set: &PoolSet, s: u64, w: [u64; 4]) -> StorageResult<()> {
    for i in (1..4).rev() {
        set.store_u64(s + 8 * i as u64, w[i], Ordering::Relaxed)?;
    }
    set.store_u64(s, w[0], Ordering::Release)?;
    Ok(())
}

/// Whether the key block at `g` holds exactly `key` (compared in chunks, no heap buffer).
fn block_equals(set: &PoolSet, g: u64, key: &[u8]) -> StorageResult<bool> {
    let mut buf = [0u8; CHUNK];
    for (i, chunk) in key.chunks(CHUNK).enumerate() {
        let b = &mut buf[..chunk.len()];
        set.read_into(g + (i * CHUNK) as u64, b)?;
        if b != chunk {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The length-and-prefix word (`w3`) of a pointer slot holding `key` (S3).
fn pointer_w3(key: &[u8]) -> u64 {
    let mut w3 = [0u8; 8];
    w3[..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    w3[2..].copy_from_slice(&key[..6]);
    u64::from_le_bytes(w3)
}

pub(super) fn find(t: &T, leaf: u64, key: &[u8]) -> StorageResult<Option<usize>> {
    let set = t.set();
    let mut line0 = [0u8; 40];
    set.read_into(leaf, &mut line0)?;
    let mut bm = [0u8; 8];
    bm.copy_from_slice(&line0[32..40]);
    let bitmap = u64::from_le_bytes(bm);
    let f = fingerprint_bytes(key);
    // Keys are stored in their canonical form (S2): an inline key matches iff its three key
    // words are equal; a long key iff the length-and-prefix word and then the block match.
    let inline = encode_inline(key, 0);
    let w3 = if inline.is_none() { pointer_w3(key) } else { 0 };
    for (slot, &fp) in line0[..M].iter().enumerate() {
        if bitmap & (1 << slot) == 0 || fp != f {
            continue;
        }
        let w = read_slot(set, leaf, slot)?;
        let hit = match inline {
            Some(e) => w[0] == e[0] && w[1] == e[1] && w[3] == e[3],
            None => {
                key_form(w[0]) == KeyForm::Pointer && w[3] == w3 && {
                    let g = key_block(set, PPtr::new(w[0], w[1]), key.len() as u64)
                        .map_err(|_| corrupt(format!("slot {slot}: bad key block"), at(t, leaf)))?;
                    block_equals(set, g, key)?
                }
            }
        };
        if hit {
            return Ok(Some(slot));
        }
    }
    Ok(None)
}

pub(super) fn value(t: &T, leaf: u64, slot: usize) -> StorageResult<u64> {
    Ok(t.set().load_u64(leaf + var_slot_offset(slot) + 16, Ordering::Acquire)?)
}

pub(super) fn write_new(
    t: &T,
    leaf: u64,
    slot: usize,
    key: &[u8],
    value: u64,
) -> StorageResult<()> {
    let set = t.set();
    let s = leaf + var_slot_offset(slot);
    if let Some(w) = encode_inline(key, value) {
        store_slot(set, s, w)?;
        let word = store_fp(set, leaf, slot, fingerprint_bytes(key))?;
        return persist_slot(set, s, word);
    }
    // V1: the free slot's w0 is null or inline; the allocator needs null. Not persisted: a
    // durable inline w0 in an invalid slot is ignored by recovery.
    if set.load_u64(s, Ordering::Acquire)? != EMPTY_SLOT[0] {
        set.store_u64(s, EMPTY_SLOT[0], Ordering::Release)?;
    }
    let len = key.len() as u64;
    let lp = t.leaf_at(leaf)?.p;
    // P-FPT-20: the allocator's redo transaction makes the block's pointer durable in the slot
    // (a crash from here on leaves a pointer in an invalid slot: the rebuild frees it).
    let block = t.alloc.allocate(len, field(lp, var_slot_offset(slot)))?;
    let bg = key_block(set, block, len)?;
    set.write_bytes(bg, key)?;
    set.store_u64(s + 16, value, Ordering::Relaxed)?;
    set.store_u64(s + 24, pointer_w3(key), Ordering::Relaxed)?;
    let word = store_fp(set, leaf, slot, fingerprint_bytes(key))?;
    set.flush_rule("P-FPT-21", bg, len)?; // ORDER(P-FPT-21): the key bytes before the bitmap
    set.flush_rule("P-FPT-21", s, 32)?; // ORDER(P-FPT-21): value, length and prefix before the bitmap
    set.flush_rule("P-FPT-21", word, 8)?; // ORDER(P-FPT-21): the fingerprint before the bitmap
    set.fence_rule("P-FPT-21"); // ORDER(P-FPT-21): all durable before the commit store
    Ok(())
}

pub(super) fn write_moved(
    t: &T,
    leaf: u64,
    slot: usize,
    from: usize,
    value: u64,
) -> StorageResult<()> {
    let set = t.set();
    let mut w = read_slot(set, leaf, from)?;
    w[2] = value;
    let s = leaf + var_slot_offset(slot);
    let fp = set.load_u64(leaf + L_FP + (from as u64 / 8) * 8, Ordering::Acquire)?.to_le_bytes()
        [from % 8];
    if key_form(w[0]) == KeyForm::Pointer {
        // A copied pointer goes null → valid in an invalid slot, which recovery reads: its
        // offset word must be durable before its segment word, or a torn copy (new segment, old
        // offset) would read as a pointer the rebuild frees. By V1 the slot's durable `w0` is
        // null or inline until the second store below.
        for (i, &x) in w.iter().enumerate().skip(1) {
            set.store_u64(s + 8 * i as u64, x, Ordering::Relaxed)?;
        }
        let word = store_fp(set, leaf, slot, fp)?;
        persist_slot(set, s, word)?;
        set.store_u64(s, w[0], Ordering::Release)?;
        set.persist_rule("P-FPT-26", s, 8)?; // ORDER(P-FPT-26): the segment word after the offset word, before the bitmap commit
        return Ok(());
    }
    store_slot(set, s, w)?;
    let word = store_fp(set, leaf, slot, fp)?;
    persist_slot(set, s, word)
}

/// P-FPT-1 for a slot written in place (inline insert, update) or in part (the first step of a
/// pointer update, P-FPT-26): its words and its fingerprint word durable, one fence.
fn persist_slot(set: &PoolSet, s: u64, fp_word: u64) -> StorageResult<()> {
    set.flush_rule("P-FPT-1", s, 32)?; // ORDER(P-FPT-1): the slot's words before the bitmap (P-FPT-26: before a copied segment word)
    set.flush_rule("P-FPT-1", fp_word, 8)?; // ORDER(P-FPT-1): its fingerprint before the bitmap
    set.fence_rule("P-FPT-1"); // ORDER(P-FPT-1): both durable before the commit store
    Ok(())
}

pub(super) fn release_moved(t: &T, leaf: u64, from: usize) -> StorageResult<()> {
    let set = t.set();
    let s = leaf + var_slot_offset(from);
    if key_form(set.load_u64(s, Ordering::Acquire)?) == KeyForm::Pointer {
        set.store_u64(s, EMPTY_SLOT[0], Ordering::Release)?;
        set.persist_rule("P-FPT-23", s, 8)?; // ORDER(P-FPT-23): the old slot gives up the block (V1, V2)
    }
    Ok(())
}

pub(super) fn release_deleted(t: &T, leaf: u64, slot: usize) -> StorageResult<()> {
    let off = var_slot_offset(slot);
    if key_form(t.set().load_u64(leaf + off, Ordering::Acquire)?) == KeyForm::Pointer {
        let lp = t.leaf_at(leaf)?.p;
        // P-FPT-22: after the commit; the allocator nulls the slot in the same transaction.
        t.alloc.deallocate(field(lp, off))?;
    }
    Ok(())
}

/// Frees the key block named by slot `slot` of `leaf` (an invalid slot at recovery, or any
/// slot of a leaf being deleted); a pointer that names no allocated block is damage.
fn free_slot_block(t: &T, leaf: Leaf, slot: usize) -> StorageResult<()> {
    // P-FPT-22: the allocator frees the block and durably nulls the slot in one transaction.
    t.alloc.deallocate(field(leaf.p, var_slot_offset(slot))).map_err(|e| match e {
        StorageError::InvalidArgument(why) => {
            corrupt(format!("slot {slot} names no allocated key block: {why}"), leaf.p)
        }
        e => e,
    })
}

pub(super) fn release_leaf_keys(t: &T, leaf: Leaf) -> StorageResult<()> {
    let set = t.set();
    // P-FPT-36 (persistent index): the last key's slot becomes invalid (durably) before any
    // block is freed, so that delete recovery, which routes that key to the leaf's index entry,
    // never finds a valid slot without its key, and an empty bitmap tells it that the entry is
    // gone (the caller removed it first). The hybrid tree's recovery routes nothing.
    let bm = leaf.g + super::L_BITMAP;
    if matches!(t.index, super::Index::Persistent(_)) && set.load_u64(bm, Ordering::Acquire)? != 0 {
        set.store_u64(bm, 0, Ordering::Release)?;
        set.persist_rule("P-FPT-36", bm, 8)?; // ORDER(P-FPT-36): the last key invalid before its block is freed
    }
    let mut freed: Vec<(u64, u64)> = Vec::new();
    for slot in 0..M {
        let w = read_slot(set, leaf.g, slot)?;
        match key_form(w[0]) {
            KeyForm::Pointer if freed.contains(&(w[0], w[1])) => {
                // A second reference (an update interrupted before P-FPT-23): drop it only.
                let s = leaf.g + var_slot_offset(slot);
                set.store_u64(s, EMPTY_SLOT[0], Ordering::Release)?;
                set.persist_rule("P-FPT-23", s, 8)?; // ORDER(P-FPT-23): never free one block twice
            }
            KeyForm::Pointer => {
                free_slot_block(t, leaf, slot)?;
                freed.push((w[0], w[1]));
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn split_copy(t: &T, leaf: Leaf, new: Leaf) -> StorageResult<(Owned, Owned, u64)> {
    let set = t.set();
    let l = read_leaf(t, leaf)?;
    if l.bitmap != FULL {
        return Err(corrupt("splitting a leaf that is not full", leaf.p));
    }
    let mut keys: Vec<(Box<[u8]>, usize)> = Vec::with_capacity(M);
    for slot in l.valid() {
        keys.push((owned_key(set, l.slots[slot], slot, leaf.p)?, slot));
    }
    keys.sort_unstable();
    let right = keys[M / 2..].iter().fold(0u64, |b, (_, s)| b | (1 << s));
    // DEFECT-3: the new leaf names only the upper half's blocks; every other slot is empty
    // (no reference shared with the old leaf, nothing left from the block's previous owner).
    let mut n = VarLeafImage::empty();
    n.next = l.next;
    n.bitmap = right;
    for (_, s) in &keys[M / 2..] {
        n.slots[*s] = l.slots[*s];
        n.fp[*s] = l.fp[*s];
    }
    set.write_struct(new.g, &n)?;
    set.persist_rule("P-FPT-24", new.g, VAR_LEAF_SIZE)?; // ORDER(P-FPT-24): the new leaf, whole, before the logical split
    let right_min = keys.swap_remove(M / 2).0;
    let left_max = keys.swap_remove(M / 2 - 1).0;
    Ok((left_max, right_min, right))
}

pub(super) fn after_logical_split(t: &T, leaf: Leaf, right: u64) -> StorageResult<()> {
    let set = t.set();
    // Two slots share a line: each line is flushed once, after both of its slots are written.
    let mut pending: Option<u64> = None;
    for slot in (0..M).filter(|s| right & (1 << s) != 0) {
        let s = leaf.g + var_slot_offset(slot);
        if key_form(set.load_u64(s, Ordering::Acquire)?) == KeyForm::Pointer {
            set.store_u64(s, EMPTY_SLOT[0], Ordering::Release)?;
            let line = s & !63;
            if let Some(l) = pending.filter(|&l| l != line) {
                set.flush_rule("P-FPT-25", l, 64)?; // ORDER(P-FPT-25): the moved slots give up their blocks
            }
            pending = Some(line);
        }
    }
    if let Some(l) = pending {
        set.flush_rule("P-FPT-25", l, 64)?; // ORDER(P-FPT-25): the moved slots give up their blocks
    }
    // No fence of its own: the link's persist (P-FPT-7) fences these flushes before the
    // disarm (P-FPT-8), and until the disarm a crash redoes them.
    Ok(())
}

/// The leak rule (V1) on a leaf's image `l`: an invalid slot naming a block that a valid slot
/// of this leaf names is an interrupted update (drop the reference, P-FPT-23); any other is an
/// interrupted insert or delete (free the block, P-FPT-22). P-FPT-25 guarantees no other leaf
/// names it.
fn repair_image(t: &T, leaf: Leaf, l: &VarLeafImage) -> StorageResult<()> {
    let set = t.set();
    let named = |w0: u64, w1: u64| l.valid().any(|v| l.slots[v][0] == w0 && l.slots[v][1] == w1);
    for slot in 0..M {
        let w = l.slots[slot];
        let valid = l.bitmap & (1 << slot) != 0;
        match key_form(w[0]) {
            KeyForm::Invalid => {
                return Err(corrupt(
                    format!("slot {slot}: damaged first word {:#x}", w[0]),
                    leaf.p,
                ));
            }
            KeyForm::Pointer if !valid => {
                if named(w[0], w[1]) {
                    let s = leaf.g + var_slot_offset(slot);
                    set.store_u64(s, EMPTY_SLOT[0], Ordering::Release)?;
                    set.persist_rule("P-FPT-23", s, 8)?; // ORDER(P-FPT-23): finish an interrupted update
                } else {
                    // Validate before freeing: the length word may not be written yet, so only
                    // the pointer itself (aligned, inside the pool) can be checked here.
                    key_block(set, PPtr::new(w[0], w[1]), 24)?;
                    free_slot_block(t, leaf, slot)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The leak rule of one leaf, at its first lock in an open of a tree with a persistent index
/// (P-FPT-35: before any change to the leaf in this open; the hybrid tree runs it in its
/// rebuild walk). Runs under the leaf's lock: readers ignore invalid slots.
pub(super) fn repair_leaf(t: &T, leaf: Leaf) -> StorageResult<()> {
    let l = read_leaf(t, leaf)?;
    if l.bitmap & !FULL != 0 {
        return Err(corrupt(format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap), leaf.p));
    }
    repair_image(t, leaf, &l)
}

/// The blocks [`repair_leaf`] would free: invalid slots naming a block that no valid slot of
/// the leaf names (each once).
pub(super) fn pending_blocks(t: &T, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()> {
    let l = read_leaf(t, leaf)?;
    let named = |w0: u64, w1: u64| l.valid().any(|v| l.slots[v][0] == w0 && l.slots[v][1] == w1);
    let start = out.len();
    for slot in (0..M).filter(|s| l.bitmap & (1 << s) == 0) {
        let w = l.slots[slot];
        if key_form(w[0]) == KeyForm::Pointer && !named(w[0], w[1]) {
            let p = PPtr::new(w[0], w[1]);
            if !out[start..].contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(())
}

pub(super) fn rebuild_leaf(t: &T, leaf: Leaf) -> StorageResult<LeafSummary<Box<[u8]>>> {
    let set = t.set();
    // The lock word is left as it is (as the fixed-key rebuild does): a word of an earlier
    // open reads unlocked in this open's epoch (VL5, P-FPT-30), and no recovery writes one.
    let l = read_leaf(t, leaf)?;
    if l.bitmap & !FULL != 0 {
        return Err(corrupt(format!("bitmap {:#x} has bits beyond slot {M}", l.bitmap), leaf.p));
    }
    repair_image(t, leaf, &l)?;
    // The key range: every valid slot is decoded and its key block resolved (V3), but a block
    // is read only where the inline bytes or the 6-byte prefixes cannot decide an order (a
    // restart reads about two key blocks per leaf instead of every one), and only the
    // smallest and the largest key are copied out.
    let mut bufs = (Vec::new(), Vec::new());
    let mut min_max: Option<((SlotKey, usize), (SlotKey, usize))> = None;
    for slot in l.valid() {
        let (k, _) = decode(l.slots[slot], slot, leaf.p)?;
        match k {
            SlotKey::Empty => {
                return Err(corrupt(format!("valid slot {slot} holds no key"), leaf.p));
            }
            SlotKey::Pointer { block, len, .. } => {
                key_block(set, block, u64::from(len))?;
            }
            SlotKey::Inline { .. } => {}
        }
        min_max = Some(match min_max {
            None => ((k, slot), (k, slot)),
            Some((mn, mx)) => {
                if slot_key_cmp(set, &k, &mn.0, &mut bufs)?.is_lt() {
                    ((k, slot), mx)
                } else if slot_key_cmp(set, &k, &mx.0, &mut bufs)?.is_gt() {
                    (mn, (k, slot))
                } else {
                    (mn, mx)
                }
            }
        });
    }
    let min_max = match min_max {
        None => None,
        Some(((_, a), (_, b))) => {
            Some((owned_key(set, l.slots[a], a, leaf.p)?, owned_key(set, l.slots[b], b, leaf.p)?))
        }
    };
    Ok(LeafSummary { next: l.next, count: u64::from(l.bitmap.count_ones()), min_max })
}

/// The bytes of a slot key known without reading its block, and whether they are the whole
/// key (inline) or only its first six bytes (a key block's prefix, S3).
fn known_bytes(k: &SlotKey) -> (&[u8], bool) {
    match k {
        SlotKey::Inline { .. } => (k.inline().unwrap_or_default(), true),
        SlotKey::Pointer { prefix, .. } => (&prefix[..], false),
        SlotKey::Empty => (&[], true),
    }
}

/// The bytewise order of two (non-empty) slot keys (K1), reading key blocks into `bufs` only
/// when the known bytes tie and one of them is only a prefix.
fn slot_key_cmp(
    set: &PoolSet,
    a: &SlotKey,
    b: &SlotKey,
    bufs: &mut (Vec<u8>, Vec<u8>),
) -> StorageResult<std::cmp::Ordering> {
    let ((ka, fa), (kb, fb)) = (known_bytes(a), known_bytes(b));
    let c = ka.len().min(kb.len());
    match ka[..c].cmp(&kb[..c]) {
        std::cmp::Ordering::Equal => {}
        o => return Ok(o),
    }
    // Equal over `c` bytes. A whole key that ends there is a prefix of the other (or equal).
    if fa && ka.len() == c {
        return Ok(if fb && kb.len() == c {
            std::cmp::Ordering::Equal
        } else {
            std::cmp::Ordering::Less
        });
    }
    if fb && kb.len() == c {
        return Ok(std::cmp::Ordering::Greater);
    }
    bufs.0.clear();
    bufs.1.clear();
    key_bytes(set, a, &mut bufs.0)?;
    key_bytes(set, b, &mut bufs.1)?;
    Ok(bufs.0.cmp(&bufs.1))
}

pub(super) fn leaf_pairs(
    t: &T,
    leaf: Leaf,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    out: &mut Vec<(Box<[u8]>, u64)>,
) -> StorageResult<()> {
    use std::ops::RangeBounds;
    let set = t.set();
    let l = read_leaf(t, leaf)?;
    let start = out.len();
    for slot in l.valid() {
        let k = owned_key(set, l.slots[slot], slot, leaf.p)?;
        if bounds.contains(&*k) {
            out.push((k, l.slots[slot][2]));
        }
    }
    out[start..].sort_unstable();
    Ok(())
}

pub(super) fn check_leaf(t: &T, leaf: Leaf, pending: bool) -> StorageResult<()> {
    let set = t.set();
    let l = read_leaf(t, leaf)?;
    for slot in 0..M {
        let w = l.slots[slot];
        if l.bitmap & (1 << slot) == 0 {
            match key_form(w[0]) {
                // A leaf whose leak rule is pending in this open (P-FPT-35) may still name
                // blocks from invalid slots: they are the tree's (`Tree::blocks`).
                KeyForm::Pointer if pending => continue,
                KeyForm::Pointer => {
                    return Err(corrupt(
                        format!("V1: invalid slot {slot} names a key block"),
                        leaf.p,
                    ));
                }
                KeyForm::Invalid => {
                    return Err(corrupt(format!("slot {slot}: damaged first word"), leaf.p));
                }
                _ => continue,
            }
        }
        // V3 (lengths, through `decode`; the block resolves, through `owned_key`) and T2.
        let k = owned_key(set, w, slot, leaf.p)?;
        if l.fp[slot] != fingerprint_bytes(&k) {
            return Err(corrupt(format!("slot {slot}: the fingerprint is wrong"), leaf.p));
        }
    }
    Ok(())
}

pub(super) fn key_blocks(t: &T, leaf: Leaf, out: &mut Vec<PPtr>) -> StorageResult<()> {
    let l = read_leaf(t, leaf)?;
    out.extend(
        l.valid()
            .filter(|&s| key_form(l.slots[s][0]) == KeyForm::Pointer)
            .map(|s| PPtr::new(l.slots[s][0], l.slots[s][1])),
    );
    Ok(())
}
