//! The paged engine's crash targets (`db-paged-journal`, `db-paged-wal`, `db-paged-fash`,
//! `db-paged-fast`, `db-paged-nvwal`, `db-paged-fast-m2`; the journal, the WAL and NVWAL also
//! on the file store, NVWAL's with its log in a simulated pool set): each protocol's
//! generic `Database` target run exhaustively on a small workload, with nested crashes, and
//! the mutation check that drops each of its persist sites in turn (`docs/design/paged.md`
//! §10). Each target's run is a test of its own (`exhaustive::wal`, `nested::wal`,
//! `mutation::wal`, ...), so a test runner spreads them over the cores; a name filter runs one
//! protocol (`cargo test --profile ci -p ferrite-crashtest --test paged wal`).

use std::sync::Arc;
use std::time::Duration;

use ferrite::EngineKind;
use ferrite_crashtest::db::DbTarget;
use ferrite_crashtest::{Config, MutationOutcome, Target};
use ferrite_pmem::internals::testing::TestDir;

const SAFETY: Duration = Duration::from_secs(600);

/// One test per target and run: the module's name is the run, the test's the target.
macro_rules! per_target {
    ($($id:ident: $name:literal),* $(,)?) => {
        /// The targets, in the order of [`targets`].
        const NAMES: &[&str] = &[$($name),*];
        mod exhaustive {
            $( #[test] fn $id() { super::small_workload_passes_exhaustively($name) } )*
        }
        mod nested {
            $( #[test] fn $id() { super::nested_crashes_inside_recovery_find_no_failure($name) } )*
        }
        mod mutation {
            $( #[test] fn $id() { super::every_persist_site_is_needed($name) } )*
        }
    };
}

per_target! {
    journal: "db-paged-journal",
    wal: "db-paged-wal",
    fash: "db-paged-fash",
    fast: "db-paged-fast",
    nvwal: "db-paged-nvwal",
    fast_m2: "db-paged-fast-m2",
    journal_file: "db-paged-journal-file",
    wal_file: "db-paged-wal-file",
    nvwal_file: "db-paged-nvwal-file",
}

/// Each protocol's target on the PM store, FAST's same-line (M2) variant, then each protocol's
/// target on the file store (block files; NVWAL's log in a pool set), with a workload of
/// `txns` transactions (`file_txns` on the file store).
fn targets(txns: u64, file_txns: u64) -> Vec<DbTarget> {
    let paged = || EngineKind::PAGED.iter().copied();
    paged()
        .map(|k| DbTarget::with_txns(k, txns))
        .chain(paged().any(|k| k.name() == "paged-fast").then(|| DbTarget::fast_same_line(txns)))
        .chain(paged().filter(on_files).map(|k| DbTarget::paged_files(k, file_txns)))
        .collect()
}

/// The target named `name` (see [`targets`]).
fn target(name: &str, txns: u64, file_txns: u64) -> Arc<DbTarget> {
    let t = targets(txns, file_txns).into_iter().find(|t| t.name() == name);
    Arc::new(t.unwrap_or_else(|| panic!("{name} is not a paged crash target")))
}

/// Whether protocol `k` runs on the file store (FASH and FAST keep their pages in PM).
fn on_files(k: &EngineKind) -> bool {
    !matches!(k.name(), "paged-fash" | "paged-fast")
}

fn cfg(dir: &TestDir, budget: u64) -> Config {
    Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(budget),
        time: Some(SAFETY),
        ..Config::default()
    }
}

#[test]
fn every_protocol_is_a_crash_target() {
    let names: Vec<&str> = targets(1, 1).iter().map(|t| t.name()).collect();
    assert_eq!(names, NAMES, "a paged target without its tests here (or the reverse)");
}

/// Every crash point of a 6-transaction workload, without nested crashes (the next test runs
/// them): the rollback journal's commit has about 200 pending lines per crash point, each
/// explored as none, all, singletons, all-but-one and seeded subsets.
fn small_workload_passes_exhaustively(name: &str) {
    let dir = TestDir::new("crashtest-paged-exhaustive");
    let t = target(name, 6, 6);
    let r = ferrite_crashtest::explore(
        t.clone(),
        &Config { exhaustive: true, nested_rate: 0.0, ..cfg(&dir, 20_000) },
    );
    eprint!("{r}");
    assert!(r.passed(), "{r}");
    assert!(!r.stopped_early, "{}: budget too small for an exhaustive run:\n{r}", t.name());
    assert_eq!(r.crashed, r.visited, "exhaustive mode crashes at every visit");
    assert!(r.images >= t.min_images(), "{r}");
}

/// Sampled crash points with a quarter of the recoveries crashed again (the hot-journal
/// rollback and the WAL scan crashed in the middle) and two corrupted images per crash point
/// (which must give typed errors, never panics), bounded by an image budget: no failure in
/// what was explored. (This is also the smoke run of the registered `db-paged-*` targets, which
/// `tests/tester.rs` leaves to this file.)
fn nested_crashes_inside_recovery_find_no_failure(name: &str) {
    let dir = TestDir::new("crashtest-paged-nested");
    let t = target(name, 12, 12);
    let r = ferrite_crashtest::explore(
        t.clone(),
        &Config { nested_rate: 0.25, corrupt_samples: 2, ..cfg(&dir, 6_000) },
    );
    eprint!("{r}");
    assert!(!r.failed(), "{r}");
    assert!(r.images >= 500, "{r}");
    assert!(r.nested_images > 0 && r.corrupt_images > 0, "{r}");
}

/// Sites a target's mutation check may leave undetected, each shown needed elsewhere:
/// - The WAL restart's sync on PM: its loss shows only in the first commit after a checkpoint,
///   in an image that keeps a line of a new frame but not the header's line; the sampled run
///   of `db-paged-wal` does not reach one, `db-paged-wal-file` does (its block-file crashes
///   keep single sectors), and the two share the line.
/// - NVWAL's generation fence (P-PG-45) on the file store: its loss shows only in an image of
///   the first commit after a checkpoint that keeps a new frame's line over an old frame past
///   the old generation's first commit, but not the header's line. `db-paged-nvwal` (PM)
///   reaches such an image and detects it (since a page's diff is split into several frames,
///   2026-11-29); `db-paged-nvwal-file` detects the generation word's flush but not its
///   fence; the unit test `nvwal::tests::a_lost_generation_word_replays_an_older_prefix`
///   builds the image.
///
/// They make no mutated run (nor do the target's benign sites): their outcome cannot change
/// the verdict; `ferrite crashtest NAME --mutate` runs them.
fn shown_elsewhere(target: &str, site: &str) -> bool {
    let names = |pat: &str| ferrite_crashtest::names_site(pat, site);
    (target == "db-paged-wal"
        && names("protocol/wal.rs@ORDER(P-PG-22): the new header durable before a frame"))
        || (target == "db-paged-nvwal-file"
            && names("protocol/nvwal.rs@ORDER(P-PG-45): the new generation durable before a frame"))
}

/// Every persist site the target reaches is needed: dropping it makes the tester find a
/// failure (or it is benign with the target's reason, or shown needed elsewhere).
fn every_persist_site_is_needed(name: &str) {
    let dir = TestDir::new("crashtest-paged-mutate");
    // The file targets' images are cheap (a crash point per sync, not per flush): 40
    // transactions, crashed at every visit (without nested crashes but in the mutants of
    // recovery-only sites), so that several commits follow a WAL restart and each is crashed
    // (P-PG-22).
    let t = target(name, 12, 40);
    // The M2 target too: its images are few (no torn lines), and a sampled run may miss the
    // one crash point after a commit where the word's lost flush shows.
    let exhaustive = t.name().ends_with("-file") || t.name().ends_with("-m2");
    let owner = name.to_owned();
    let m = ferrite_crashtest::mutate(
        t.clone(),
        &Config {
            // Recovery-only sites are mutated with every recovery crashed anyway.
            nested_rate: if exhaustive { 0.0 } else { 0.25 },
            exhaustive,
            excused: Some(Arc::new(move |s: &str| {
                shown_elsewhere(&owner, s).then(|| "shown needed elsewhere (see the test)".into())
            })),
            ..cfg(&dir, 20_000)
        },
    );
    eprint!("{}{m}", m.base);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.base.passed(), "{m}");
    for (s, o) in &m.sites {
        assert!(
            matches!(
                o,
                MutationOutcome::Detected
                    | MutationOutcome::Benign(_)
                    | MutationOutcome::Excused(_)
                    | MutationOutcome::NoEffect
            ) || (shown_elsewhere(name, s) && *o == MutationOutcome::Undetected),
            "{s}: {o:?}\n{m}"
        );
    }
    // Every rule of the protocol has a site whose loss was detected.
    let rules: &[&str] = match t.name() {
        n if n.contains("journal") => &["P-PG-10", "P-PG-11", "P-PG-12", "P-PG-13", "P-PG-14"],
        n if n.contains("nvwal") => &["P-PG-41", "P-PG-42", "P-PG-43", "P-PG-44", "P-PG-45"],
        n if n.contains("wal") => &["P-PG-20", "P-PG-21", "P-PG-22"],
        "db-paged-fash" => &["P-PG-30", "P-PG-31", "P-PG-32", "P-PG-33"],
        _ => &["P-PG-30", "P-PG-31", "P-PG-32", "P-PG-33", "P-PG-34", "P-PG-35"],
    };
    for rule in rules {
        assert!(
            m.sites.iter().any(|(s, o)| s.ends_with(rule) && *o == MutationOutcome::Detected)
                || m.sites
                    .iter()
                    .any(|(s, o)| s.contains(&format!("#{rule} "))
                        && *o == MutationOutcome::Detected),
            "{}: no site of {rule} detected\n{m}",
            t.name()
        );
    }
}
