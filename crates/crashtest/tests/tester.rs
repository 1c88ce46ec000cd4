//! The tester on its seeded-defect toys and on self-test targets: every defect is found (the
//! missing fence only with the stash), every twin passes, failures replay from the saved
//! image, recovery panics and hangs are failures with precise messages, the call-stack policy
//! halves, the budget holds, and a seed reproduces its run.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrite_crashtest::{
    Config, Ctx, Expect, Mode, ModelOp, ModelView, MutationOutcome, Stop, Target, Verdict, find,
    registry,
};
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::sim::WritebackOrder;
use ferrite_pmem::{CrashImage, Options, Pool};

mod common;

/// Runs here are bounded by their image budget only, never by seconds: a time cap would make
/// how much a run checks (and so whether it reaches its image floor) depend on how loaded the
/// machine is. Every run below finishes its budget in a few seconds.
fn cfg(dir: &TestDir) -> Config {
    Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(5_000),
        time: None,
        ..Config::default()
    }
}

/// The mode that is one step weaker than `m` (what must NOT find a defect `m` finds).
fn weaker(m: Mode) -> Option<Mode> {
    match m {
        Mode::Base | Mode::Threads => None,
        Mode::Stash => Some(Mode::Base),
        Mode::Evict | Mode::Tear | Mode::Nested => Some(Mode::Stash),
    }
}

#[test]
fn each_defect_is_found_by_its_mode_and_not_by_weaker_ones() {
    let dir = TestDir::new("crashtest-modes");
    let mut defects = 0;
    for t in registry() {
        let Expect::FoundBy(mode) = t.expect() else { continue };
        defects += 1;
        let with = Config { exhaustive: true, ..Config::for_mode(mode) };
        let r = t.explore(&Config { out_dir: dir.path().to_path_buf(), ..with });
        assert!(!r.passed(), "{} is not found by {mode:?}:\n{r}", t.name());
        if let Some(w) = weaker(mode) {
            let without = Config {
                exhaustive: true,
                out_dir: dir.path().to_path_buf(),
                ..Config::for_mode(w)
            };
            let r = t.explore(&without);
            assert!(r.passed(), "{} is found by the weaker mode {w:?}:\n{r}", t.name());
        }
    }
    assert!(defects >= 8, "only {defects} seeded defects registered");
}

/// The paged engine's registered targets (`db-paged-journal`, `db-paged-wal`, `db-paged-fash`,
/// `db-paged-fast`, `db-paged-nvwal`, `db-paged-fast-m2`, and the `-file` twins of the
/// journal, the WAL and NVWAL on the file store) are left to `tests/paged.rs`, which
/// runs them exhaustively, with nested and corrupt images and with the
/// mutation check on budgets of their own: running them here too would double their CI time.
/// SOFORT's two-thread targets (`db-sofort-threads`, `db-sofort-threads-parked`) are left to
/// `tests/db_threads.rs`, which runs them on budgets of their own, the parked schedule under
/// both write-back orders. `db-sofort-stale` is run by `tests/db.rs` (with nested and
/// corrupted images, and its mutation check).
fn run_elsewhere(name: &str) -> bool {
    name.starts_with("db-paged-")
        || name.starts_with("db-sofort-threads")
        || name == "db-sofort-stale"
}

#[test]
fn every_correct_target_passes_a_bounded_smoke_run_with_every_mode() {
    let dir = TestDir::new("crashtest-smoke");
    for t in registry().into_iter().filter(|t| !run_elsewhere(t.name())) {
        let r = t.explore(&Config {
            corrupt_samples: 2,
            budget: Some(3_000),
            time: None, // images, not seconds, bound the run (see `cfg`)
            out_dir: dir.path().to_path_buf(),
            ..Config::default()
        });
        match t.expect() {
            Expect::Pass => {
                assert_eq!(r.smoke_problem(t.min_images()), None, "{}:\n{r}", t.name());
                assert!(r.nested_images > 0 && r.corrupt_images > 0, "{}:\n{r}", t.name());
            }
            Expect::FoundBy(_) => assert!(!r.passed(), "{} passed its smoke run:\n{r}", t.name()),
        }
    }
}

#[test]
fn mutation_checks_detect_every_dropped_persist_of_the_twins() {
    let dir = TestDir::new("crashtest-mutate");
    for t in registry()
        .into_iter()
        .filter(|t| t.name().starts_with("toy-") && t.expect() == Expect::Pass)
    {
        let m = t.mutate(&Config { out_dir: dir.path().to_path_buf(), ..cfg(&dir) });
        assert!(m.passed(), "{m}");
        assert!(m.sites.len() >= 3, "{m}");
        // Every toy but the block-file one creates a pool (rule P-PM-1); that one's syncs
        // must each be needed instead.
        let needed: &[&str] = if t.name() == "toy-missing-fsync-fixed" {
            &["#P-TOY-9", "#P-TOY-10"]
        } else {
            &["P-PM-1"]
        };
        for rule in needed {
            assert!(
                m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
                "{rule} not detected:\n{m}"
            );
        }
        if t.name() == "toy-recovery-unsafe-fixed" {
            // Its recovery's redo persists run only inside recovery: dropping either is found
            // by a crash inside recovery (mutation checks reach recovery).
            let redo: Vec<_> = m
                .recovery_only()
                .filter(|(s, o)| s.ends_with("#P-TOY-7") && *o == MutationOutcome::Detected)
                .collect();
            assert_eq!(redo.len(), 2, "{m}");
        }
    }
}

/// Axiom M6 made the default domain more precise (a line's write-backs land in coherence
/// order); the model before it is kept as `WritebackOrder::Strict`. Every seeded defect is
/// found under both: the default order is what the other tests here run, this runs the strict
/// one, each defect with the mode that finds it, exhaustively.
#[test]
fn every_seeded_defect_is_found_under_the_strict_writeback_order_too() {
    let dir = TestDir::new("crashtest-strict");
    let mut defects = 0;
    for t in registry() {
        let Expect::FoundBy(mode) = t.expect() else { continue };
        defects += 1;
        let r = t.explore(&Config {
            exhaustive: true,
            writebacks: WritebackOrder::Strict,
            out_dir: dir.path().to_path_buf(),
            ..Config::for_mode(mode)
        });
        assert!(!r.passed(), "{} is not found under the strict order:\n{r}", t.name());
    }
    assert!(defects >= 8, "only {defects} seeded defects registered");
}

#[test]
fn every_seeded_defect_is_found_and_replays() {
    let dir = TestDir::new("crashtest-toys");
    for t in registry() {
        let Expect::FoundBy(_) = t.expect() else { continue };
        let name = t.name();
        let r = t.explore(&Config { exhaustive: true, nested_rate: 1.0, ..cfg(&dir) });
        assert!(!r.passed(), "{name} was not found:\n{r}");
        assert!(r.workload_error.is_none(), "{r}");
        let f = &r.failures[0];
        assert!(f.message.contains("expected"), "{name}: imprecise message {}", f.message);
        let saved = f.saved.as_ref().expect("failure image saved");
        assert!(f.replay.contains(name) && f.replay.contains("--replay"), "{}", f.replay);
        // Replaying the saved image reproduces the failure, from the image alone.
        let again = t.replay(saved, Duration::from_secs(10)).expect_err("replay passed");
        assert_eq!(again, f.message, "{name}: replay found something else");
    }
}

#[test]
fn every_twin_passes_exhaustively() {
    let dir = TestDir::new("crashtest-twins");
    for t in registry()
        .into_iter()
        .filter(|t| t.name().starts_with("toy-") && t.name().ends_with("-fixed"))
    {
        let r = t.explore(&Config { exhaustive: true, ..cfg(&dir) });
        assert!(r.passed(), "{}", r);
        assert!(!r.stopped_early, "{}: budget too small for an exhaustive run", t.name());
        assert_eq!(r.crashed, r.visited, "exhaustive mode crashes at every visit");
        assert!(r.images > 20, "{r}");
    }
}

#[test]
fn call_stack_policy_halves_and_exhaustive_does_not() {
    let dir = TestDir::new("crashtest-policy");
    let t = find("toy-wrong-order-fixed").unwrap();
    let halving = t.explore(&cfg(&dir));
    let exhaustive = t.explore(&Config { exhaustive: true, ..cfg(&dir) });
    assert!(halving.passed() && exhaustive.passed());
    assert_eq!(halving.visited, exhaustive.visited, "the same workload visits the same points");
    for (key, s) in &halving.keys {
        assert!(s.crashes >= 1, "{key}: first visit must crash");
        if s.visits >= 8 {
            // Probability 2^-k after k crashes: far fewer crashes than visits.
            assert!(s.crashes < s.visits / 2, "{key}: {s:?}");
        }
    }
    assert!(halving.images < exhaustive.images, "{} vs {}", halving.images, exhaustive.images);
}

#[test]
fn a_seed_reproduces_its_run_and_the_budget_holds() {
    let dir = TestDir::new("crashtest-seed");
    let t = find("toy-commit-first-fixed").unwrap();
    let a = t.explore(&Config { seed: 77, ..cfg(&dir) });
    let b = t.explore(&Config { seed: 77, ..cfg(&dir) });
    assert_eq!((a.visited, a.crashed, a.images), (b.visited, b.crashed, b.images));
    assert_eq!(a.keys, b.keys);
    let small = t.explore(&Config { budget: Some(7), ..cfg(&dir) });
    assert_eq!(small.images, 7);
    assert!(small.stopped_early, "{small}");
}

/// A run stopped by its budget or time before the end of the workload is not a pass: it says
/// how many of the crash points the workload reached it checked, and never prints PASSED.
#[test]
fn a_stopped_run_reports_what_it_checked_and_does_not_pass() {
    let dir = TestDir::new("crashtest-stopped");
    let t = find("toy-commit-first-fixed").unwrap();
    let full = t.explore(&Config { budget: None, time: None, ..cfg(&dir) });
    assert_eq!(full.verdict(), Verdict::Passed, "{full}");
    assert_eq!((full.unexamined, full.examined()), (0, full.visited));
    let small = t.explore(&Config { budget: Some(7), ..cfg(&dir) });
    assert_eq!(small.verdict(), Verdict::Stopped(Stop::Budget), "{small}");
    assert!(!small.passed() && !small.failed(), "{small}");
    // The workload still runs to its end: every crash point is counted, most unexamined.
    assert_eq!(small.visited, full.visited, "{small}");
    assert!(small.unexamined > 0 && small.examined() < full.examined(), "{small}");
    let text = small.to_string();
    assert!(!text.contains("PASSED"), "{text}");
    let line =
        format!("STOPPED (budget): checked {} of {} crash points", small.examined(), small.visited);
    assert!(text.contains(&line), "{text}");
    let timed = t.explore(&Config { budget: None, time: Some(Duration::ZERO), ..cfg(&dir) });
    assert_eq!(timed.verdict(), Verdict::Stopped(Stop::Time), "{timed}");
    assert!(timed.to_string().contains("STOPPED (time)"), "{timed}");
}

// ----- self-test targets: recovery that panics or hangs -----

#[derive(Clone, Debug)]
struct Step(u64);
impl ModelOp for Step {
    fn encode(&self) -> String {
        self.0.to_string()
    }
    fn decode(s: &str) -> Option<Self> {
        s.parse().ok().map(Step)
    }
}

/// Persists a counter correctly; its recovery misbehaves once the counter reaches 2.
struct Misbehaving {
    hang: bool,
}

impl Target for Misbehaving {
    type Op = Step;
    type Recovered = u64;
    fn name(&self) -> &'static str {
        "selftest-misbehaving-recovery"
    }
    fn summary(&self) -> &'static str {
        "recovery panics or hangs"
    }
    fn workload(&self, ctx: &mut Ctx<Step>) -> Result<(), String> {
        let p = ctx.create_pool(16 * 1024, &Options::default())?;
        for i in 1..=4 {
            let t = ctx.begin(Step(i));
            p.store_u64(0, i, Ordering::Release).map_err(|e| e.to_string())?;
            p.persist(0, 8).map_err(|e| e.to_string())?; // ORDER(P-T-1): a test target's step durable before it is done
            ctx.done(t);
        }
        Ok(())
    }
    fn recover(&self, image: &CrashImage) -> Result<u64, String> {
        let n = match Pool::open_sim(image, &Options::default()) {
            Ok(p) => p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string())?,
            Err(_) => 0,
        };
        if n >= 2 {
            if self.hang {
                loop {
                    // A deliberately hung recovery for the watchdog: nothing ever unparks this
                    // thread (the loop absorbs spurious wake-ups).
                    std::thread::park();
                }
            }
            panic!("recovery cannot handle counter {n}");
        }
        Ok(n)
    }
    fn check(&self, n: &u64, m: &ModelView<Step>) -> Result<(), String> {
        let c = m.committed.len() as u64;
        if *n < c { Err(format!("expected at least {c}, found {n}")) } else { Ok(()) }
    }
}

#[test]
fn recovery_panics_and_hangs_are_failures() {
    let dir = TestDir::new("crashtest-self");
    let r = ferrite_crashtest::explore(Arc::new(Misbehaving { hang: false }), &cfg(&dir));
    assert!(!r.passed());
    assert!(
        r.failures[0].message.contains("panicked") && r.failures[0].message.contains("counter 2"),
        "{}",
        r.failures[0].message
    );
    let r = ferrite_crashtest::explore(
        Arc::new(Misbehaving { hang: true }),
        &Config { watchdog: Duration::from_millis(300), ..cfg(&dir) },
    );
    assert!(!r.passed());
    assert!(r.failures[0].message.contains("did not finish"), "{}", r.failures[0].message);
}

#[test]
fn registry_names_are_unique_and_summarised() {
    let names: Vec<&str> = registry().iter().map(|t| t.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate target names: {names:?}");
    assert!(
        registry()
            .iter()
            .all(|t| !t.summary().is_empty() && !t.name().contains(char::is_whitespace))
    );
}

// ----- self-test target: a redundant persist that no crash can reveal -----

/// Persists a counter, then persists it again at a second site. Dropping the first persist is
/// invisible (the second still persists the word): the mutation check must report it as
/// undetected unless the target explains it as benign. The second never writes anything new
/// (the word is already durable): the tester sees that itself and reports it as having no
/// effect.
struct Redundant {
    explained: bool,
}

impl Target for Redundant {
    type Op = Step;
    type Recovered = u64;
    fn name(&self) -> &'static str {
        "selftest-redundant-persist"
    }
    fn summary(&self) -> &'static str {
        "a second, redundant persist of the same word"
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        if self.explained {
            &[
                ("#P-SELF-1", "the same word is persisted again at P-SELF-2"),
                ("#P-SELF-2", "P-SELF-1 already persisted it"),
            ]
        } else {
            &[]
        }
    }
    fn workload(&self, ctx: &mut Ctx<Step>) -> Result<(), String> {
        let p = ctx.create_pool(16 * 1024, &Options::default())?;
        for i in 1..=4 {
            let t = ctx.begin(Step(i));
            p.store_u64(0, i, Ordering::Release).map_err(|e| e.to_string())?;
            p.persist_rule("P-SELF-1", 0, 8).map_err(|e| e.to_string())?; // ORDER(P-SELF-1): a test target's first named persist
            p.persist_rule("P-SELF-2", 0, 8).map_err(|e| e.to_string())?; // ORDER(P-SELF-2): the same line again, under a second rule
            ctx.done(t);
        }
        Ok(())
    }
    fn recover(&self, image: &CrashImage) -> Result<u64, String> {
        match Pool::open_sim(image, &Options::default()) {
            Ok(p) => p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string()),
            Err(ferrite_pmem::Error::Incomplete { .. }) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }
    fn check(&self, n: &u64, m: &ModelView<Step>) -> Result<(), String> {
        let c = m.committed.len() as u64;
        let max = c + m.in_flight.len() as u64;
        if *n < c || *n > max { Err(format!("expected {c}..={max}, found {n}")) } else { Ok(()) }
    }
}

#[test]
fn an_undetectable_persist_is_reported_unless_explained() {
    let dir = TestDir::new("crashtest-redundant");
    let m = ferrite_crashtest::mutate(Arc::new(Redundant { explained: false }), &cfg(&dir));
    assert!(!m.passed(), "{m}");
    let undetected: Vec<&String> =
        m.sites.iter().filter(|(_, o)| *o == MutationOutcome::Undetected).map(|(s, _)| s).collect();
    assert_eq!(undetected.len(), 1, "{m}");
    assert!(undetected[0].ends_with("#P-SELF-1"), "{m}");
    let outcome = |m: &ferrite_crashtest::MutationReport, rule: &str| {
        m.sites.iter().find(|(s, _)| s.ends_with(rule)).map(|(_, o)| o.clone())
    };
    assert_eq!(outcome(&m, "#P-SELF-2"), Some(MutationOutcome::NoEffect), "{m}");
    let m = ferrite_crashtest::mutate(Arc::new(Redundant { explained: true }), &cfg(&dir));
    assert!(m.passed(), "{m}");
    assert!(matches!(outcome(&m, "#P-SELF-1"), Some(MutationOutcome::Benign(_))), "{m}");
}

/// A correct counter whose recovery panics (instead of returning a typed error) when the data
/// area holds anything but the counter: crash images never do, corrupted images do.
struct PanicsOnGarbage;

impl Target for PanicsOnGarbage {
    type Op = Step;
    type Recovered = u64;
    fn name(&self) -> &'static str {
        "selftest-panics-on-garbage"
    }
    fn summary(&self) -> &'static str {
        "recovery asserts instead of validating"
    }
    fn workload(&self, ctx: &mut Ctx<Step>) -> Result<(), String> {
        Redundant { explained: true }.workload(ctx)
    }
    fn recover(&self, image: &CrashImage) -> Result<u64, String> {
        let p = match Pool::open_sim(image, &Options::default()) {
            Ok(p) => p,
            Err(ferrite_pmem::Error::Incomplete { .. }) => return Ok(0),
            Err(e) => return Err(e.to_string()),
        };
        let mut data = vec![0u8; p.size() as usize];
        p.read_into(0, &mut data).map_err(|e| e.to_string())?;
        assert!(data[8..].iter().all(|&b| b == 0), "garbage in the data area");
        p.load_u64(0, Ordering::Acquire).map_err(|e| e.to_string())
    }
    fn check(&self, n: &u64, m: &ModelView<Step>) -> Result<(), String> {
        Redundant { explained: true }.check(n, m)
    }
}

#[test]
fn corrupt_images_must_give_typed_errors_not_panics() {
    let dir = TestDir::new("crashtest-corrupt");
    let plain = ferrite_crashtest::explore(Arc::new(PanicsOnGarbage), &cfg(&dir));
    assert!(plain.passed(), "without corruption the target is correct:\n{plain}");
    let r = ferrite_crashtest::explore(
        Arc::new(PanicsOnGarbage),
        &Config { corrupt_samples: 8, exhaustive: true, ..cfg(&dir) },
    );
    assert!(!r.passed(), "{r}");
    let f = &r.failures[0];
    assert!(f.message.contains("panicked") && f.spec.contains("bit flips"), "{f:?}");
    assert!(r.corrupt_images > 0);
}

#[test]
fn fptree_target_passes_and_every_persist_site_is_needed() {
    // Runs to the end of the workload (a stopped run is no pass): bounded by images only, so
    // the machine's load cannot change what is checked.
    let m = common::mutate("fptree-fixed", "crashtest-fptree");
    assert!(m.passed(), "{m}");
    assert!(m.sites.len() >= 20, "{m}");
    // Sites only recoveries reach are mutated too: the allocator's disarm after a replay (named
    // benign with its reason; toy-recovery-unsafe-fixed shows recovery-only sites detected).
    assert!(
        m.recovery_only().any(|(s, o)| s.contains("#P-ALLOC-3")
            && matches!(o, MutationOutcome::Benign(_) | MutationOutcome::Detected)),
        "{m}"
    );
}

#[test]
fn alloc_target_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-alloc");
    let t = find("alloc-small").expect("registered");
    // Its benign sites make no mutated run (`common::excuse`): they cannot change the verdict.
    let m = t.mutate(&Config {
        out_dir: dir.path().to_path_buf(),
        excused: Some(common::excuse(|_| false)),
        ..cfg(&dir)
    });
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.passed(), "{m}");
    // Every P-ALLOC rule the target declares has a site whose drop was detected.
    for rule in ["P-ALLOC-1", "P-ALLOC-2", "P-ALLOC-3", "P-ALLOC-4", "P-ALLOC-5"] {
        assert!(m.to_string().contains(rule), "{rule} not exercised:\n{m}");
    }
}

// ----- self-test target: a missing fence inside recovery (depth-2 stash) -----

/// Persists a counter `n` correctly. Recovery copies it into a cache word `C` and sets a
/// marker `M = n` meaning "C is current" — flushing both in one epoch with one fence (the
/// seeded defect: M may become durable without C). A later recovery that finds `M == n`
/// trusts `C`. Only a crash inside recovery that persists the subset {M} without {C} shows
/// it: none of the recovery's lines, or all of them, are both fine.
struct RecoveryMissingFence;

const CACHE: u64 = 64;
const MARK: u64 = 128;

impl Target for RecoveryMissingFence {
    type Op = Step;
    type Recovered = (u64, u64);
    fn name(&self) -> &'static str {
        "selftest-recovery-missing-fence"
    }
    fn summary(&self) -> &'static str {
        "recovery flushes a cache word and its marker in one epoch"
    }
    fn workload(&self, ctx: &mut Ctx<Step>) -> Result<(), String> {
        Misbehaving { hang: false }.workload(ctx)
    }
    fn recover(&self, image: &CrashImage) -> Result<(u64, u64), String> {
        let p = match Pool::open_sim(image, &Options::default()) {
            Ok(p) => p,
            Err(ferrite_pmem::Error::Incomplete { .. }) => return Ok((0, 0)),
            Err(e) => return Err(e.to_string()),
        };
        let e = |e: ferrite_pmem::Error| e.to_string();
        let n = p.load_u64(0, Ordering::Acquire).map_err(e)?;
        if p.load_u64(MARK, Ordering::Acquire).map_err(e)? != n {
            p.store_u64(CACHE, n, Ordering::Relaxed).map_err(e)?;
            p.store_u64(MARK, n, Ordering::Release).map_err(e)?;
            p.flush(CACHE, 8).map_err(e)?; // ORDER(P-T-2): the seeded defect's cache word, fenced below
            p.flush(MARK, 8).map_err(e)?; // ORDER(P-T-2): the marker, wrongly in the same epoch
            p.fence(); // ORDER(P-T-2): BUG: the marker needs its own epoch after the cache word
        }
        Ok((n, p.load_u64(CACHE, Ordering::Acquire).map_err(e)?))
    }
    fn check(&self, &(n, cache): &(u64, u64), m: &ModelView<Step>) -> Result<(), String> {
        Misbehaving { hang: false }.check(&n, m)?;
        if cache != n {
            return Err(format!("expected the cache word to equal the counter {n}, found {cache}"));
        }
        Ok(())
    }
}

/// Crashes inside recovery try subsets of the recovery's pending lines, as at the top level
/// (they used to try only "none" and "all", which cannot find this defect).
#[test]
fn crashes_inside_recovery_explore_stash_subsets() {
    let dir = TestDir::new("crashtest-nested-stash");
    let with_stash = Config { out_dir: dir.path().to_path_buf(), ..Config::for_mode(Mode::Nested) };
    let r = ferrite_crashtest::explore(Arc::new(RecoveryMissingFence), &with_stash);
    assert!(r.failed(), "{r}");
    assert!(r.failures[0].key.starts_with("nested "), "{r}");
    assert!(r.failures[0].message.contains("cache word"), "{r}");
    let without = Config { stash: false, ..with_stash };
    let r = ferrite_crashtest::explore(Arc::new(RecoveryMissingFence), &without);
    assert!(r.passed(), "only a subset of the recovery's pending lines shows it:\n{r}");
}

/// The block-file toy on its own (the tests above run it with every toy): the twin passes every
/// mode, exhaustively and with nested crashes; the defect (one sync for record and commit word)
/// is found by the subsets of unsynced sectors and not by "none or all"; its failure names the
/// torn or lost record and replays from the saved image, block file included.
#[test]
fn the_block_file_toy_is_explored_at_its_syncs() {
    let dir = TestDir::new("crashtest-fsync");
    let fixed = find("toy-missing-fsync-fixed").unwrap();
    for mode in [Mode::Base, Mode::Stash, Mode::Nested, Mode::Threads] {
        let r = fixed.explore(&Config { exhaustive: true, ..Config::for_mode(mode).with(&dir) });
        assert!(r.passed(), "{mode:?}:\n{r}");
        assert_eq!(r.smoke_problem(fixed.min_images()), None, "{mode:?}:\n{r}");
        assert!(r.syncs > 0 && r.to_string().contains(" syncs,"), "{r}");
        assert!(r.images > 20, "{mode:?}:\n{r}");
        if mode == Mode::Nested {
            assert!(r.nested_images > 0, "{r}");
        }
    }
    let buggy = find("toy-missing-fsync").unwrap();
    let base =
        buggy.explore(&Config { exhaustive: true, ..Config::for_mode(Mode::Base).with(&dir) });
    assert!(base.passed(), "none-or-all finds the missing sync:\n{base}");
    let r = buggy.explore(&Config { exhaustive: true, ..Config::for_mode(Mode::Stash).with(&dir) });
    assert!(!r.passed(), "{r}");
    let f = &r.failures[0];
    assert!(f.message.contains("expected") && f.message.contains("record"), "{}", f.message);
    assert!(f.spec.contains("unsynced block-file choices"), "{}", f.spec);
    let saved = f.saved.as_ref().expect("failure image saved");
    let img = CrashImage::load(saved).unwrap();
    assert!(img.block("log").is_some() && img.files.is_empty(), "{img:?}");
    let again = buggy.replay(saved, Duration::from_secs(10)).expect_err("replay passed");
    assert_eq!(again, f.message);
}

trait WithDir {
    fn with(self, dir: &TestDir) -> Config;
}

impl WithDir for Config {
    /// This configuration writing into `dir`, bounded like `cfg`.
    fn with(self, dir: &TestDir) -> Config {
        Config { out_dir: dir.path().to_path_buf(), budget: Some(5_000), time: None, ..self }
    }
}
