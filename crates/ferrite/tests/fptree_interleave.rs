//! Step-by-step interleavings of the concurrent FPTree (`docs/design/fptree.md`, "The
//! concurrent tree", "Tests and what they catch"): a thread is stopped at a named point of the
//! tree's code (`ferrite::fptree::hooks`, cargo feature `test-hooks`, which this test target
//! requires) and other operations run there, in the same thread (nothing is locked at that
//! point) or in another thread that the test drives through channels. No sleeps, no timing:
//! every interleaving is forced, so each test fails every time the check it is for is
//! removed (the mutations each one caught are listed in the design document).
//!
//! Every scenario runs on `u64` keys with the DRAM and the persistent index and on byte keys
//! (DRAM; every third key long enough to live in a key block). The trees are built from
//! ascending keys `10 * i`, `i = 1..=65`, which gives four leaves (a full leaf splits into
//! halves of 16): leaf 1 holds keys 10..=160, leaf 2 170..=320, leaf 3 330..=480, leaf 4
//! 490..=650.
//!
//! Run: `cargo test -p ferrite --profile ci --features test-hooks --test fptree_interleave`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ops::Bound::{self, Unbounded};
use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;

use ferrite::alloc::PAllocator;
use ferrite::fptree::hooks::{self, Point};
use ferrite::fptree::{CheckReport, Direction, FPTree, FPTreeVar, TreeOptions};
use ferrite::pmem::internals::testing::TestDir;
use ferrite::pmem::{Options, PoolSet};

/// One of the two key kinds behind one interface of logical keys `n: u64` (byte keys are
/// `n` as 8 decimal digits, long ones followed by 30 dashes: their order is `n`'s).
trait Kind: Sized + Send + Sync + 'static {
    fn create(dir: &TestDir, topts: TreeOptions) -> Self;
    fn insert(&self, n: u64, v: u64) -> bool;
    fn delete(&self, n: u64) -> bool;
    fn get(&self, n: u64) -> Option<u64>;
    /// A full scan in `dir` order, keys as logical keys (a key that does not decode is
    /// `u64::MAX`: a torn copy).
    fn scan_all(&self, dir: Direction) -> Vec<(u64, u64)>;
    fn check(&self) -> CheckReport;
    /// The global offsets of the leaves, in key order.
    fn leaf_offsets(&self) -> Vec<u64>;
    fn leaf_count(&self) -> u64 {
        self.leaf_offsets().len() as u64
    }
}

fn alloc(dir: &TestDir) -> Arc<PAllocator> {
    let o = Options::default().layout("fptree-interleave-test").segment_size(1 << 20);
    let set = PoolSet::create(dir.join("set"), &o).unwrap();
    Arc::new(PAllocator::create(Arc::new(set), 1).unwrap())
}

/// The byte key of logical key `n` (every third one long: a key block).
fn byte_key(n: u64) -> Vec<u8> {
    let mut k = format!("{n:08}").into_bytes();
    if n.is_multiple_of(3) {
        k.extend_from_slice(&[b'-'; 30]);
    }
    k
}

fn logical(k: &[u8]) -> u64 {
    std::str::from_utf8(&k[..k.len().min(8)]).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX)
}

macro_rules! leaf_offsets {
    ($t:expr, $size:expr) => {{
        let set = $t.allocator().pool();
        let n = $t.leaves() as usize;
        $t.blocks()[1..=n].iter().map(|&p| set.resolve_range(p, $size).unwrap()).collect()
    }};
}

impl Kind for FPTree {
    fn create(dir: &TestDir, topts: TreeOptions) -> Self {
        let a = alloc(dir);
        let slot = a.root_location();
        FPTree::create_with(a, slot, topts).unwrap()
    }
    fn insert(&self, n: u64, v: u64) -> bool {
        FPTree::insert(self, n, v).unwrap()
    }
    fn delete(&self, n: u64) -> bool {
        FPTree::delete(self, n).unwrap()
    }
    fn get(&self, n: u64) -> Option<u64> {
        FPTree::get(self, n).unwrap()
    }
    fn scan_all(&self, dir: Direction) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.scan(.., dir, usize::MAX, |k, v| {
            out.push((k, v));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }
    fn check(&self) -> CheckReport {
        FPTree::check(self).unwrap()
    }
    fn leaf_offsets(&self) -> Vec<u64> {
        leaf_offsets!(self, ferrite::fptree::LEAF_SIZE)
    }
}

impl Kind for FPTreeVar {
    fn create(dir: &TestDir, topts: TreeOptions) -> Self {
        let a = alloc(dir);
        let slot = a.root_location();
        FPTreeVar::create_with(a, slot, topts).unwrap()
    }
    fn insert(&self, n: u64, v: u64) -> bool {
        FPTreeVar::insert(self, &byte_key(n), v).unwrap()
    }
    fn delete(&self, n: u64) -> bool {
        FPTreeVar::delete(self, &byte_key(n)).unwrap()
    }
    fn get(&self, n: u64) -> Option<u64> {
        FPTreeVar::get(self, &byte_key(n)).unwrap()
    }
    fn scan_all(&self, dir: Direction) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let all: (Bound<&[u8]>, Bound<&[u8]>) = (Unbounded, Unbounded);
        self.scan(all, dir, usize::MAX, |k, v| {
            out.push((logical(k), v));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }
    fn check(&self) -> CheckReport {
        FPTreeVar::check(self).unwrap()
    }
    fn leaf_offsets(&self) -> Vec<u64> {
        leaf_offsets!(self, ferrite::fptree::VAR_LEAF_SIZE)
    }
}

/// Runs every case (each to its end, under `catch_unwind`), then fails naming every case that
/// failed: one run shows which variants a mutation breaks.
fn run_cases(cases: Vec<(String, Box<dyn FnOnce()>)>) {
    let failed: Vec<String> = cases
        .into_iter()
        .filter_map(|(name, case)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(case)).is_err().then_some(name)
        })
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

/// Runs `$scenario::<Kind>(options, what, arg)` for `u64` keys in both placements and byte
/// keys, for each `arg` (the scan direction; `()` where there is none).
macro_rules! every_variant {
    ($scenario:ident) => {
        every_variant!($scenario, [()])
    };
    ($scenario:ident, [$($arg:expr),*]) => {{
        let mut cases: Vec<(String, Box<dyn FnOnce()>)> = Vec::new();
        for arg in [$($arg),*] {
            for (topts, kind) in [
                (TreeOptions::default(), "u64 keys, DRAM index"),
                (TreeOptions::persistent(), "u64 keys, persistent index"),
            ] {
                let what = format!("{kind} {arg:?}");
                let f = move || $scenario::<FPTree>(topts, &what, arg);
                cases.push((format!("{kind} {arg:?}"), Box::new(f)));
            }
            let what = format!("byte keys, DRAM index {arg:?}");
            let f = move || $scenario::<FPTreeVar>(TreeOptions::default(), &what, arg);
            cases.push((format!("byte keys, DRAM index {arg:?}"), Box::new(f)));
        }
        run_cases(cases);
    }};
}

/// A tree and its model: every change goes through both.
struct Fixture<T: Kind> {
    _dir: TestDir,
    t: Arc<T>,
    model: Rc<std::cell::RefCell<BTreeMap<u64, u64>>>,
}

/// The value written for key `n` by write number `w` (distinct per write).
fn val(n: u64, w: u64) -> u64 {
    n * 1000 + w
}

impl<T: Kind> Fixture<T> {
    /// The four-leaf tree of the module docs (keys `10 * i`, values `val(key, 0)`).
    fn four_leaves(topts: TreeOptions) -> Self {
        let dir = TestDir::new("fptree-interleave");
        let t = Arc::new(T::create(&dir, topts));
        let f = Fixture { _dir: dir, t, model: Rc::default() };
        for i in 1..=65 {
            f.insert(10 * i, val(10 * i, 0));
        }
        assert_eq!(f.t.leaf_count(), 4, "the fixture's shape");
        f
    }

    /// A handle for a hook (the same tree and model).
    fn handle(&self) -> Handle<T> {
        Handle { t: self.t.clone(), model: self.model.clone() }
    }

    fn insert(&self, n: u64, v: u64) {
        self.handle().insert(n, v);
    }

    /// The final state: `check()` passes, both scans and every `get` equal the model.
    fn assert_matches_model(&self, what: &str) {
        let model: Vec<(u64, u64)> = self.model.borrow().iter().map(|(&k, &v)| (k, v)).collect();
        let r = self.t.check();
        assert_eq!(r.keys, model.len() as u64, "{what}: keys");
        assert_eq!(self.t.scan_all(Direction::Forward), model, "{what}: forward scan");
        let mut back = model.clone();
        back.reverse();
        assert_eq!(self.t.scan_all(Direction::Backward), back, "{what}: backward scan");
        for &(k, v) in &model {
            assert_eq!(self.t.get(k), Some(v), "{what}: get({k})");
        }
    }
}

/// The tree and the model, for code that runs inside a hook.
struct Handle<T: Kind> {
    t: Arc<T>,
    model: Rc<std::cell::RefCell<BTreeMap<u64, u64>>>,
}

impl<T: Kind> Handle<T> {
    fn insert(&self, n: u64, v: u64) {
        assert!(self.t.insert(n, v), "insert {n}");
        self.model.borrow_mut().insert(n, v);
    }

    fn delete(&self, n: u64) {
        assert!(self.t.delete(n), "delete {n}");
        self.model.borrow_mut().remove(&n);
    }

    /// Fills leaf 2 (keys 170..=320; its range ends below leaf 3's bound, 321) to 32 keys
    /// with 171 and `10 * i + 5`, `i = 17..=31`.
    fn fill_leaf_2(&self) {
        self.insert(171, val(171, 1));
        for i in 17..=31 {
            self.insert(10 * i + 5, val(10 * i + 5, 1));
        }
    }

    /// Splits leaf 2 (filled first, then 172 inserted): its upper half (keys from 245) moves
    /// to a new leaf.
    fn split_leaf_2(&self) {
        self.fill_leaf_2();
        self.insert(172, val(172, 1));
    }

    /// Deletes every key of leaf 2 (the leaf goes), puts `readd` back (now in leaf 1, with
    /// value `val(readd, 2)`), then splits leaf 4 until the block of leaf 2 (`g`) is a leaf
    /// again; asserts that it is.
    fn delete_leaf_2_and_reuse_it(&self, g: u64, readd: Option<u64>) {
        let before = self.t.leaf_count();
        for i in 17..=32 {
            self.delete(10 * i);
        }
        assert_eq!(self.t.leaf_count(), before - 1, "leaf 2 was deleted");
        if let Some(n) = readd {
            self.insert(n, val(n, 2));
        }
        // Leaf 4 (keys 490..=650) fills to 32 and splits: the new leaf takes the freed block.
        for i in 66..=81 {
            self.insert(10 * i, val(10 * i, 2));
        }
        assert!(self.t.leaf_offsets().contains(&g), "the freed leaf's block was not reused");
    }
}

impl<T: Kind> Fixture<T> {
    /// Runs `op` on the tree with `interfere` run (by this thread, unhooked) the first time
    /// the thread passes `at` (about leaf `leaf`, or any leaf if `None`); asserts that it ran
    /// and returns `op`'s result and the leaf the point was about.
    fn hooked<R>(
        &self,
        at: Point,
        leaf: Option<u64>,
        interfere: impl FnOnce(&Handle<T>, u64) + 'static,
        op: impl FnOnce(&T) -> R,
    ) -> (R, u64) {
        let fired = Rc::new(Cell::new(None));
        let seen = fired.clone();
        let h = self.handle();
        let mut interfere = Some(interfere);
        let guard = hooks::install(move |p, g| {
            if p == at
                && leaf.is_none_or(|l| l == g)
                && let Some(f) = interfere.take()
            {
                seen.set(Some(g));
                f(&h, g);
            }
        });
        let r = op(&self.t);
        drop(guard);
        let g = fired.get().unwrap_or_else(|| panic!("the operation never passed {at:?}"));
        (r, g)
    }
}

// ----- writers -----

/// A split of the writer's leaf between its index lookup and its lock: the writer locks the
/// old leaf, whose range no longer holds its key; the pin recheck fails and the writer starts
/// again, landing the key in the new leaf. (Without the recheck the key is written into the
/// old leaf, where the index does not route it: `check()` and `get` fail.)
#[test]
fn a_split_between_a_writers_lookup_and_lock_sends_the_key_to_the_new_leaf() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, _: ()) {
        let f = Fixture::<T>::four_leaves(topts);
        let leaf2 = f.t.leaf_offsets()[1];
        let split = |h: &Handle<T>, _| h.split_leaf_2();
        let (_, g) = f.hooked(Point::WriterRouted, None, split, |_| f.insert(301, val(301, 9)));
        assert_eq!(g, leaf2, "{what}: the writer was routed to leaf 2");
        assert_eq!(f.t.leaf_count(), 5, "{what}");
        assert_ne!(f.t.leaf_offsets()[2], leaf2, "{what}: the new leaf follows leaf 2");
        f.assert_matches_model(what);
    }
    every_variant!(scenario);
}

/// The writer's leaf is deleted between its lookup and its lock: (a) the block stays free: the
/// leaf's word is obsolete, `try_lock` refuses it and the writer starts again; (b) the block
/// is reused by a split before the writer gets there: the lock succeeds on a leaf of another
/// range and only the pin recheck sends the writer back (without it the key lands in the
/// wrong leaf). Either way the key ends in leaf 1, which took over leaf 2's range.
#[test]
fn a_leaf_deleted_between_a_writers_lookup_and_lock_is_left_for_the_right_leaf() {
    /// `reuse`: whether the freed block becomes a leaf again before the writer locks it.
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, reuse: bool) {
        let f = Fixture::<T>::four_leaves(topts);
        let leaf2 = f.t.leaf_offsets()[1];
        let delete = move |h: &Handle<T>, g| {
            if reuse {
                h.delete_leaf_2_and_reuse_it(g, None);
            } else {
                for i in 17..=32 {
                    h.delete(10 * i);
                }
            }
        };
        let (_, g) = f.hooked(Point::WriterRouted, None, delete, |_| f.insert(205, val(205, 9)));
        assert_eq!(g, leaf2, "{what}: the writer was routed to leaf 2");
        f.assert_matches_model(what);
    }
    every_variant!(scenario, [false, true]);
}

/// A write aimed at the new leaf of a split whose log is still armed waits: the splitter is
/// stopped after the link and the index insert (the new leaf is reachable) and before the
/// disarm; a writer of a key of the new leaf's range must find the leaf locked (it must not
/// write into it: split recovery would recompute the old leaf's bitmap from the new leaf's and
/// lose or revive keys). Released, both finish and the tree equals the model.
#[test]
fn a_write_to_a_split_new_leaf_waits_until_the_split_log_is_disarmed() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, _: ()) {
        let f = Fixture::<T>::four_leaves(topts);
        f.handle().fill_leaf_2();
        let (linked_tx, linked_rx) = mpsc::channel::<u64>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let splitter = {
            let t = f.t.clone();
            std::thread::spawn(move || {
                let mut once = Some((linked_tx, go_rx));
                let _g = hooks::install(move |p, g| {
                    if p == Point::SplitLinked
                        && let Some((tx, rx)) = once.take()
                    {
                        tx.send(g).unwrap();
                        rx.recv().unwrap();
                    }
                });
                assert!(t.insert(172, val(172, 1)));
            })
        };
        let new_leaf = linked_rx.recv().unwrap();
        let (ev_tx, ev_rx) = mpsc::channel::<(Point, u64)>();
        let writer = {
            let t = f.t.clone();
            std::thread::spawn(move || {
                let mut tx = Some(ev_tx);
                let _g = hooks::install(move |p, g| {
                    if matches!(p, Point::WriterBusy | Point::WriterLocked)
                        && let Some(tx) = tx.take()
                    {
                        tx.send((p, g)).unwrap();
                    }
                });
                assert!(t.insert(301, val(301, 9)));
            })
        };
        // The writer's first attempt on a leaf, while the splitter is stopped.
        let first = ev_rx.recv().unwrap();
        go_tx.send(()).unwrap();
        splitter.join().unwrap();
        writer.join().unwrap();
        assert_eq!(
            first,
            (Point::WriterBusy, new_leaf),
            "{what}: the writer must find the new leaf locked before the split log is disarmed"
        );
        f.model.borrow_mut().insert(172, val(172, 1));
        f.model.borrow_mut().insert(301, val(301, 9));
        f.assert_matches_model(what);
    }
    every_variant!(scenario);
}

// ----- readers -----

/// A reader's leaf changes between its search and its validation: the slot it found is freed
/// and reused by another key, so the value it then loads is that key's. The validation fails
/// and the reader starts again: the key is absent. (Without the validation the reader
/// returns the other key's value for a deleted key.)
#[test]
fn a_leaf_change_between_a_readers_search_and_validation_makes_it_retry() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, _: ()) {
        let f = Fixture::<T>::four_leaves(topts);
        // Leaf 2 full: the next insert takes the lowest free slot, the one key 200 frees.
        f.handle().fill_leaf_2();
        let change = |h: &Handle<T>, _| {
            h.delete(200);
            h.insert(201, val(201, 2));
        };
        let (got, _) = f.hooked(Point::ReaderSearched, None, change, |t| t.get(200));
        assert_eq!(got, None, "{what}: key 200 was deleted while the reader read it");
        f.assert_matches_model(what);
    }
    every_variant!(scenario);
}

/// A reader's leaf is deleted and its block reused as another leaf between the reader's index
/// lookup and the leaf snapshot: the snapshot and the validation both succeed on the new leaf
/// (its word is live and unchanged between them); only the pin check sees that the key no
/// longer routes there. The key (put back in leaf 1 meanwhile) is found. (Without the pin
/// check: "absent".)
#[test]
fn a_leaf_deleted_and_reused_between_a_readers_lookup_and_snapshot_is_not_read() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, _: ()) {
        let f = Fixture::<T>::four_leaves(topts);
        let reuse = |h: &Handle<T>, g| h.delete_leaf_2_and_reuse_it(g, Some(200));
        let (got, _) = f.hooked(Point::ReaderRouted, None, reuse, |t| t.get(200));
        assert_eq!(got, Some(val(200, 2)), "{what}: key 200, put back in leaf 1");
        f.assert_matches_model(what);
    }
    every_variant!(scenario);
}

// ----- scans -----

/// Runs a full scan in `dir` with `interfere` run at `at` about leaf 2 (once, when the scan
/// has visited the leaves before it: leaf 1 forward, leaves 4 and 3 backward). The scan must
/// return every key present throughout once, in order; and, since a failed check re-reads
/// the step, exactly the visited leaves' keys as they were before the interference and the
/// others' as they are after it.
fn scan_with<T: Kind>(
    f: &Fixture<T>,
    dir: Direction,
    at: Point,
    interfere: impl FnOnce(&Handle<T>, u64) + 'static,
    what: &str,
) {
    let before = f.model.borrow().clone();
    let leaf2 = f.t.leaf_offsets()[1];
    let (got, _) = f.hooked(at, Some(leaf2), interfere, |t| t.scan_all(dir));
    let keys: Vec<u64> = got.iter().map(|e| e.0).collect();
    let ordered = match dir {
        Direction::Forward => keys.windows(2).all(|w| w[0] < w[1]),
        Direction::Backward => keys.windows(2).all(|w| w[0] > w[1]),
    };
    assert!(ordered, "{what}: {dir:?} scan out of order or repeated: {keys:?}");
    let after = f.model.borrow().clone();
    for k in before.keys().filter(|k| after.contains_key(k)) {
        assert!(keys.contains(k), "{what}: stable key {k} missing from the {dir:?} scan");
    }
    // Leaf 2's range is 161..=320 (u64 bounds; byte keys split between the same keys).
    let visited = |k: &u64| match dir {
        Direction::Forward => *k < 170,
        Direction::Backward => *k > 320,
    };
    let mut want: Vec<(u64, u64)> = before
        .iter()
        .filter(|e| visited(e.0))
        .chain(after.iter().filter(|e| !visited(e.0)))
        .map(|(&k, &v)| (k, v))
        .collect();
    want.sort_unstable();
    if dir == Direction::Backward {
        want.reverse();
    }
    assert_eq!(got, want, "{what}: the {dir:?} scan re-reads the step it could not validate");
    f.assert_matches_model(what);
}

/// The scan's current leaf splits between its copy and its validation: the validation fails
/// and the step is read again (forward: from the index, which now names the new leaf next;
/// backward: the reach check also sends it to the new leaf first). Every key once, in order.
#[test]
fn a_split_of_a_scans_leaf_between_copy_and_validation_is_read_again() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, dir: Direction) {
        let f = Fixture::<T>::four_leaves(topts);
        scan_with(&f, dir, Point::ScanCopied, |h, _| h.split_leaf_2(), what);
    }
    every_variant!(scenario, [Direction::Forward, Direction::Backward]);
}

/// The scan's current leaf changes (values updated, a key deleted, another inserted) between
/// its copy and its validation: the step is read again and the scan returns the leaf's new
/// state.
#[test]
fn a_change_of_a_scans_leaf_between_copy_and_validation_is_read_again() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, dir: Direction) {
        let f = Fixture::<T>::four_leaves(topts);
        let change = |h: &Handle<T>, _| {
            h.delete(200);
            h.insert(205, val(205, 3));
            assert!(h.t.delete(300) && h.t.insert(300, val(300, 3)));
            h.model.borrow_mut().insert(300, val(300, 3));
        };
        scan_with(&f, dir, Point::ScanCopied, change, what);
    }
    every_variant!(scenario, [Direction::Forward, Direction::Backward]);
}

/// The scan's next leaf is deleted and its block reused as another leaf between the step's
/// index lookup and the leaf's snapshot: only the pin check sees it (the new leaf's word is
/// live and stays unchanged). Without it a forward scan emits the foreign leaf's keys and
/// then skips every key below them.
#[test]
fn a_leaf_deleted_and_reused_under_a_scan_step_is_not_read() {
    fn scenario<T: Kind>(topts: TreeOptions, what: &str, dir: Direction) {
        let f = Fixture::<T>::four_leaves(topts);
        let reuse = |h: &Handle<T>, g| h.delete_leaf_2_and_reuse_it(g, None);
        scan_with(&f, dir, Point::ScanRouted, reuse, what);
    }
    every_variant!(scenario, [Direction::Forward, Direction::Backward]);
}

/// Byte keys: a key block named by the scan's copy of a leaf is freed and reused by another
/// key of the same length (in another leaf) before the scan reads it: the copy is torn (a
/// slot of leaf 2 with another leaf's key bytes). The validation fails and the step is read
/// again. (Without it the scan emits another leaf's key in leaf 2's place, and forward skips
/// every key below it.)
#[test]
fn a_key_block_reused_under_a_byte_key_scans_copy_is_not_emitted() {
    let case = |dir: Direction| -> (String, Box<dyn FnOnce()>) {
        let f = move || {
            let f = Fixture::<FPTreeVar>::four_leaves(TreeOptions::default());
            let reuse = move |h: &Handle<FPTreeVar>, _| {
                // Leaf 2's long keys go (their blocks are freed) and long keys of a leaf the
                // scan has yet to visit take the blocks (leaf 4 forward, leaf 1 backward), so
                // that only the validation can refuse the torn copy.
                for n in (170..=320).step_by(10).filter(|n| n % 3 == 0) {
                    let other = match dir {
                        Direction::Forward => n + 333,
                        Direction::Backward => n - 177,
                    };
                    h.delete(n);
                    h.insert(other, val(other, 4));
                }
            };
            scan_with(&f, dir, Point::ScanKeyBlock, reuse, "byte keys");
        };
        (format!("byte keys {dir:?}"), Box::new(f))
    };
    run_cases(vec![case(Direction::Forward), case(Direction::Backward)]);
}
