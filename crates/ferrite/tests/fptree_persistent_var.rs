//! The fully persistent FPTree with byte keys (`FPTreeVar` created with
//! `TreeOptions::persistent()`: v2 leaves and the persistent index of byte separators) against a
//! `BTreeMap<Vec<u8>, u64>` model with reopens, at index fan-out 4 and 32, with keys of every
//! form (empty, inline, key blocks up to the 4 096-byte limit, long shared prefixes so that
//! separators go out of line); the leak check (leaves, key blocks, index nodes and separator
//! blocks) against the allocator; the leaf-level leak rule run lazily at a leaf's first lock
//! (P-FPT-35); the head re-key regression; the stored fixture.
//!
//! Random tests print their seed; set `FERRITE_TEST_SEED` to replay one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferrite::alloc::PAllocator;
use ferrite::fptree::persistent::{PVNODE_SIZE, PVNODE_TAG};
use ferrite::fptree::{
    EMPTY_SLOT, FPTree, FPTreeVar, INCOMPAT_BYTE_KEYS, INCOMPAT_PERSISTENT_INDEX, IndexPlacement,
    MAX_KEY_LEN, R_INDEX, ROOT_SIZE, RootHeader, TreeOptions,
};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PPtr, PoolSet, SplitMix64};
use ferrite::storage::StorageError as Error;

mod common;
use common::fptree::{
    assert_allocated, close_tree, create_alloc, leave_interrupted_key_block_work, open_alloc, seed,
    var_head_leaf, var_slot_words, write_fixture,
};

const SEG: u64 = 4 << 20;

fn opts() -> Options {
    Options::default().layout("fptree-pvar-test").segment_size(SEG)
}

fn popts(fanout: u32) -> TreeOptions {
    TreeOptions { index: IndexPlacement::Persistent, index_fanout: fanout }
}

fn new_tree(dir: &TestDir, fanout: u32) -> FPTreeVar {
    let a = create_alloc(dir, &opts());
    let slot = a.root_location();
    let t = FPTreeVar::create_with(a, slot, popts(fanout)).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent);
    t
}

/// Drops `t` without a clean close (as after a crash) and opens everything again.
fn reopen(dir: &TestDir, t: FPTreeVar) -> FPTreeVar {
    drop(t);
    let a = open_alloc(dir, &opts());
    let slot = a.root_location();
    let t = FPTreeVar::open(a, slot).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent, "the placement is read from the root");
    t
}

type Model = BTreeMap<Vec<u8>, u64>;

fn assert_no_leak(t: &FPTreeVar) {
    assert_allocated(t.allocator(), t.blocks(), "allocated blocks differ from the tree's blocks");
}

fn all(t: &FPTreeVar) -> Vec<(Vec<u8>, u64)> {
    let top = vec![0xFF; MAX_KEY_LEN];
    t.range(&[], &top, usize::MAX).unwrap().into_iter().map(|(k, v)| (k.into_vec(), v)).collect()
}

fn assert_same(t: &FPTreeVar, model: &Model) {
    let want: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(all(t), want);
    assert_eq!(t.len(), model.len() as u64);
    let c = t.check().unwrap();
    assert_eq!(c.keys, model.len() as u64);
    assert_eq!(c.leaves, t.leaves());
    assert_no_leak(t);
}

/// Key `i` of a space of every form: the empty key, 4-byte keys, the 23/24-byte edges, keys
/// sharing a 200-byte stem (their leaf bounds and index separators are long), the 4 096-byte
/// limit.
fn key(i: u64) -> Vec<u8> {
    if i == 0 {
        return Vec::new();
    }
    let tail: [u8; 8] = std::array::from_fn(|j| (i >> (56 - 8 * j)) as u8);
    let mut k = match i % 7 {
        0 => Vec::new(),
        1 => vec![b'm'; 15],
        2 => vec![b'n'; 16],
        3..=5 => vec![b'p'; 200],
        _ => vec![b'z'; MAX_KEY_LEN - 8],
    };
    k.extend_from_slice(&tail);
    if i.is_multiple_of(7) {
        k.drain(..4);
    }
    k
}

fn random_run(seed: u64, fanout: u32, ops: usize, keys: u64, reopen_every: usize) {
    println!("seed {seed:#x} fan-out {fanout}");
    let dir = TestDir::new("fptree-pvar-model");
    let mut t = new_tree(&dir, fanout);
    let mut model = Model::new();
    let mut rng = SplitMix64::new(seed);
    let mut most_leaves = 0;
    for i in 0..ops {
        let grow = (i / 600) % 2 == 0;
        let k = key(rng.next_u64() % keys);
        let v = rng.next_u64();
        let ctx = format!("op {i}, {}-byte key (seed {seed:#x})", k.len());
        match rng.next_u64() % 10 {
            0..=4 if grow => {
                assert_eq!(t.insert(&k, v).unwrap(), !model.contains_key(&k), "{ctx}");
                model.entry(k).or_insert(v);
            }
            0..=4 => {
                assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some(), "{ctx}");
            }
            5 => {
                let present = model.contains_key(&k);
                assert_eq!(t.update(&k, v).unwrap(), present, "{ctx}");
                if present {
                    model.insert(k, v);
                }
            }
            6 => {
                assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some(), "{ctx}");
            }
            _ => assert_eq!(t.get(&k).unwrap(), model.get(&k).copied(), "{ctx}"),
        }
        most_leaves = most_leaves.max(t.leaves());
        if (i + 1) % reopen_every == 0 {
            assert_same(&t, &model);
            t = reopen(&dir, t);
            assert_same(&t, &model);
        }
    }
    assert_same(&t, &model);
    let ks: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in ks {
        assert!(t.delete(&k).unwrap());
    }
    model.clear();
    assert_same(&t, &model);
    println!("most leaves {most_leaves}");
    assert!(most_leaves > 10, "the run never grew past {most_leaves} leaves");
}

#[test]
fn random_operations_with_reopens_match_the_model_at_fanout_4() {
    random_run(seed(), 4, 4000, 700, 700);
}

#[test]
fn random_operations_with_reopens_match_the_model_at_fanout_32() {
    random_run(seed() ^ 0x32, 32, 3000, 1500, 1000);
}

/// The leaf-level leak rule without a walk at open (P-FPT-35): the images a crash leaves inside
/// a long-key insert (a block in an invalid slot) and inside an update (a block named by a
/// valid and an invalid slot) stay after open — the tree's blocks include the orphan, so the
/// leak check holds and `check()` accepts the leaf, whose rule is pending — and the first lock
/// of the leaf in the open frees the orphan and drops the stale reference before the change.
#[test]
fn the_leaf_leak_rule_runs_at_the_first_lock_after_open() {
    let dir = TestDir::new("fptree-pvar-lazy");
    let t = new_tree(&dir, 4);
    let mut model = Model::new();
    let (_, lost) = leave_interrupted_key_block_work(&t, &mut model);
    let set = t.allocator().pool().clone();
    let leaf = var_head_leaf(&t);
    let orphan = PPtr::new(var_slot_words(&set, leaf, 1)[0], var_slot_words(&set, leaf, 1)[1]);
    drop(set);
    let t = reopen(&dir, t);
    let set = t.allocator().pool().clone();
    let leaf = var_head_leaf(&t);
    // Open walked no leaf: the orphan is still named, and it is the tree's.
    assert_eq!(var_slot_words(&set, leaf, 1)[0], orphan.segment);
    assert!(t.blocks().contains(&orphan));
    assert_same(&t, &model);
    assert_eq!(t.get(&lost).unwrap(), None);
    // The first change of the leaf runs its leak rule first.
    t.insert(b"another", 4).unwrap();
    model.insert(b"another".to_vec(), 4);
    // The new key took the first free slot (0, whose stale reference was dropped); slot 1's
    // orphan was freed from it. The leaf is of this open's epoch now: `check()` holds it to
    // V1 (no invalid slot names a block), and the leak check no longer counts the orphan.
    assert_eq!(var_slot_words(&set, leaf, 1)[0], EMPTY_SLOT[0], "the orphan block is freed");
    assert!(var_slot_words(&set, leaf, 0)[0] >> 63 == 1, "slot 0 holds the inline key");
    assert!(!t.blocks().contains(&orphan));
    assert_same(&t, &model);
    drop(set);
    let t = reopen(&dir, t);
    assert_same(&t, &model);
}

/// Regression (P-FPT-36, found by the crash target `fptree-persistent-var`): a byte-key leaf
/// deletion freed the leaf's key blocks before it removed the leaf's index entry and made its
/// bitmap empty durably. A crash after such a free left delete recovery, which routes the
/// leaf's last key to its entry while the bitmap holds it, a valid slot whose block was freed
/// (the allocator nulls the slot in the free's transaction): the open failed. Here the middle
/// leaf of a simulated pool is emptied down to one 40-byte key (in a key block), and the
/// durable image at every fence of the delete that removes the leaf is captured — among them
/// the fences inside the free of that key's block — and recovered: each opens, passes
/// `check()` and the leak check, and holds the model with or without that key. (Reverting the
/// order — the bitmap's persist after the frees — fails at the free's first fence.)
#[test]
fn every_crash_inside_a_byte_key_leaf_deletion_recovers() {
    use ferrite::fptree::{L_BITMAP, L_NEXT};
    use ferrite::pmem::sim::{Event, EventKind};
    use ferrite::pmem::{CrashImage, ImageSpec, SimDomain};
    use std::sync::Mutex;

    let o = Options::default().layout("fptree-pvar-test").segment_size(1 << 20);
    let o = o.max_pool_size(8 << 20);
    let domain = Arc::new(SimDomain::new(false));
    let set = PoolSet::create_sim_with(domain.clone(), &o).unwrap();
    let a = Arc::new(PAllocator::create(Arc::new(set), 1).unwrap());
    let t = FPTreeVar::create_with(a.clone(), a.root_location(), popts(4)).unwrap();
    let key = |i: u64| {
        let mut k = format!("victim-{i:04}").into_bytes();
        k.resize(40, b'.');
        k
    };
    let mut model = Model::new();
    for i in 0..80u64 {
        t.insert(&key(i), i).unwrap();
        model.insert(key(i), i);
    }
    // The second leaf's keys (values are the ids), by its valid slots.
    let set = t.allocator().pool().clone();
    let second = set.resolve(set.load_pptr(var_head_leaf(&t) + L_NEXT).unwrap()).unwrap();
    let bitmap = set.load_u64(second + L_BITMAP, Ordering::Acquire).unwrap();
    let mut ids: Vec<u64> = (0..32)
        .filter(|s| bitmap & (1 << s) != 0)
        .map(|s| var_slot_words(&set, second, s)[2])
        .collect();
    ids.sort_unstable();
    assert!(ids.len() > 1 && set.load_pptr(second + L_NEXT).is_ok_and(|n| !n.is_null()));
    let last = ids.pop().unwrap();
    for &i in &ids {
        assert!(t.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
    let leaves = t.leaves();
    let images: Arc<Mutex<Vec<CrashImage>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let images = images.clone();
        domain.set_hook(Some(Arc::new(move |d: &SimDomain, e: &Event| {
            if e.kind == EventKind::Fence {
                images.lock().unwrap().push(d.capture(&ImageSpec::durable()));
            }
        })));
    }
    assert!(t.delete(&key(last)).unwrap());
    domain.set_hook(None);
    assert_eq!(t.leaves(), leaves - 1, "the last key's delete removed its leaf");
    let images = std::mem::take(&mut *images.lock().unwrap());
    assert!(images.len() > 4, "{} fences", images.len());
    let with: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    model.remove(&key(last));
    let without: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    for (n, image) in images.iter().enumerate() {
        let set = PoolSet::open_sim(image, &o).unwrap();
        let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
        let r = FPTreeVar::open(a.clone(), a.root_location())
            .unwrap_or_else(|e| panic!("image at fence {n}: the open failed: {e}"));
        r.check().unwrap_or_else(|e| panic!("image at fence {n}: {e}"));
        assert_allocated(&a, r.blocks(), &format!("image at fence {n}: a leak"));
        let got = all(&r);
        assert!(got == with || got == without, "image at fence {n}: {} pairs", got.len());
    }
}

/// Regression (as `keys_below_the_old_bound_of_a_new_head_stay_reachable_*` of the `u64`
/// tree): when the head leaf is deleted, the next leaf's entry must be re-keyed to the empty
/// key. Left at its own (here long, out-of-line) bound, keys below it routed to that leaf,
/// whose next split could produce a separator below its own bound: keys from the old bound up
/// would route to the wrong leaf. The re-key of a key-block bound frees the block in the same
/// allocator transaction that makes the slot the empty key.
fn keys_below_the_old_bound_of_a_new_head_stay_reachable(reopen_between: bool) {
    let dir = TestDir::new("fptree-pvar-head");
    let mut t = new_tree(&dir, 4);
    let mut model = Model::new();
    let long = |i: u64, c: u8| {
        let mut k = vec![c; 120];
        k.extend_from_slice(format!("{i:05}").as_bytes());
        k
    };
    for i in 0..60u64 {
        assert!(t.insert(&long(i, b'q'), i).unwrap());
        model.insert(long(i, b'q'), i);
    }
    let leaves = t.leaves();
    let mut i = 0;
    while t.leaves() == leaves {
        assert!(t.delete(&long(i, b'q')).unwrap(), "key {i}");
        model.remove(&long(i, b'q'));
        i += 1;
    }
    t.check().unwrap();
    if reopen_between {
        t = reopen(&dir, t);
    }
    // Keys far below the new head's old bound, enough to split it several times.
    for i in (0..300u64).rev() {
        let k = if i % 2 == 0 { long(i, b'a') } else { format!("b{i}").into_bytes() };
        assert!(t.insert(&k, i + 7).unwrap(), "key {i}");
        model.insert(k, i + 7);
    }
    for (k, v) in &model {
        assert_eq!(t.get(k).unwrap(), Some(*v), "a {}-byte key lost", k.len());
    }
    assert_same(&t, &model);
    let t = reopen(&dir, t);
    assert_same(&t, &model);
}

#[test]
fn keys_below_the_old_bound_of_a_new_head_stay_reachable_bytes() {
    keys_below_the_old_bound_of_a_new_head_stay_reachable(false);
}

#[test]
fn keys_below_the_old_bound_of_a_new_head_stay_reachable_bytes_after_a_reopen() {
    keys_below_the_old_bound_of_a_new_head_stay_reachable(true);
}

/// Flags 0b11 in the root; the fixed-key handle refuses the kind; separators go out of line
/// when keys share long prefixes; the index's nodes are the byte form's.
#[test]
fn the_root_records_both_flags_and_long_separators_go_out_of_line() {
    let dir = TestDir::new("fptree-pvar-flags");
    let t = new_tree(&dir, 4);
    for i in 0..400u64 {
        let mut k = vec![b's'; 100];
        k.extend_from_slice(format!("{i:04}").as_bytes());
        t.insert(&k, i).unwrap();
    }
    let s = t.allocator().pool().clone();
    let r = s.resolve_range(t.root(), ROOT_SIZE).unwrap();
    let h: RootHeader = s.read_struct(r).unwrap();
    assert_eq!(h.incompat, INCOMPAT_BYTE_KEYS | INCOMPAT_PERSISTENT_INDEX);
    let ix_root = s.load_pptr(r + R_INDEX).unwrap();
    let node_blocks: Vec<PPtr> = t
        .blocks()
        .into_iter()
        .filter(|p| {
            s.resolve_range(*p, PVNODE_SIZE)
                .ok()
                .and_then(|g| s.load_u64(g, Ordering::Relaxed).ok())
                .is_some_and(|tag| tag == PVNODE_TAG)
        })
        .collect();
    assert!(node_blocks.len() > 3, "a deep index: {} nodes", node_blocks.len());
    assert!(!ix_root.is_null());
    t.check().unwrap();
    assert_no_leak(&t);
    drop((t, s));
    let a = open_alloc(&dir, &opts());
    let slot = a.root_location();
    assert!(matches!(FPTree::open(a.clone(), slot), Err(Error::Incompatible { .. })));
    let t = FPTreeVar::open(a, slot).unwrap();
    assert_eq!(t.len(), 400);
}

// ----- the stored fixture -----

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fptree-v1-bytekeys-pindex/pool-set.hex")
}

const FIXTURE_SEG: u64 = 10 * 64 * 1024 + 4096;

fn fixture_opts() -> Options {
    Options::default().layout("fptree-fixture").segment_size(FIXTURE_SEG)
}

/// The fixture's keys: key 0 is the empty key; key `i` > 0 is a 40-byte stem (`i % 3` picks
/// one of three) then `i` in three decimal digits, padded with `b'a' + i % 26` to
/// `43 + (i × 13) % 30` bytes: every key in a key block, bounds and separators long.
fn fixture_key(i: u64) -> Vec<u8> {
    if i == 0 {
        return Vec::new();
    }
    let mut k = vec![b"fgh"[(i % 3) as usize]; 40];
    k.extend_from_slice(format!("{i:03}").as_bytes());
    k.resize(43 + ((i * 13) % 30) as usize, b'a' + (i % 26) as u8);
    k
}

/// Every key inserted in a scrambled order, then `i % 5 == 0` deleted, `i % 3 == 0` updated.
fn fixture_model() -> Model {
    common::fptree::var_fixture_model(160, fixture_key)
}

/// Regenerates the fixture (run by hand, only for a new format version:
/// `cargo test -p ferrite --test fptree_persistent_var -- --ignored generate`). A committed
/// fixture never changes.
#[test]
#[ignore = "writes the stored fixture; run by hand for a new format version"]
fn generate_fptree_bytekeys_pindex_fixture() {
    let dir = TestDir::new("fptree-pvar-fixture-gen");
    let t = {
        let a = create_alloc(&dir, &fixture_opts());
        let slot = a.root_location();
        let t = FPTreeVar::create_with(a, slot, popts(4)).unwrap();
        common::fptree::fill_var_fixture(&t, 160, fixture_key);
        assert_same(&t, &fixture_model());
        t
    };
    close_tree(t);
    write_fixture(
        &dir.join("set"),
        "# FPTree root v1 + INCOMPAT_BYTE_KEYS + INCOMPAT_PERSISTENT_INDEX fixture: a pool set (PAllocator anchor, one byte-key tree with a persistent index of byte separators, fan-out 4, in the anchor's root).\n# Generated by `generate_fptree_bytekeys_pindex_fixture` in crates/ferrite/tests/fptree_persistent_var.rs; never edit.\n",
        &fixture_path(),
    );
}

#[test]
fn the_bytekeys_pindex_fixture_opens_with_its_content() {
    let dir = TestDir::new("fptree-pvar-fixture");
    let path = dir.join("set");
    common::fptree::unpack_fixture(&fixture_path(), &path);
    let set = PoolSet::open(&path, &fixture_opts()).unwrap();
    let a = Arc::new(PAllocator::open(Arc::new(set)).unwrap());
    let slot = a.root_location();
    let s = a.pool();
    let root = s.load_pptr(s.resolve(slot).unwrap()).unwrap();
    let r = s.resolve_range(root, ROOT_SIZE).unwrap();
    let h: RootHeader = s.read_struct(r).unwrap();
    assert_eq!(h.incompat, INCOMPAT_BYTE_KEYS | INCOMPAT_PERSISTENT_INDEX);
    let t = FPTreeVar::open(a.clone(), slot).unwrap();
    assert_eq!(t.placement(), IndexPlacement::Persistent);
    assert_same(&t, &fixture_model());
    assert!(t.leaves() > 5, "{} leaves", t.leaves());
    // It stays writable: a modification after open, checked again.
    t.insert(b"zzz", 1).unwrap();
    let mut m = fixture_model();
    m.insert(b"zzz".to_vec(), 1);
    assert_same(&t, &m);
}
