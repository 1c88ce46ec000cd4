//! The conformance suite every Ferrite engine must pass.
//!
//! `tests/engines.rs` runs it on every engine of this build ([`engines`]: one [`Subject`] per
//! `ferrite::EngineKind::ALL`, persistent engines with an `open` factory), so a new engine is
//! tested without touching this suite:
//!
//! ```ignore
//! mod conformance;
//! conformance_suite!(subjects = conformance::engines());
//! ```
//!
//! That generates one `#[test]` per group (`operations`, `errors`, `scans`, `isolation`,
//! `durability`, `model_serial`, `model_interleaved`). A group runs every case of its list on
//! every subject (each case gets a fresh database), then fails listing every case that failed,
//! with the engine's name. Cases are plain functions returning `Result<(), String>`, so that a
//! test can also assert that a case *fails* (see `tests/broken_engine.rs`: the reference engine
//! with validation switched off must fail the isolation cases).
//!
//! Cases that need two read-write transactions open at once run only on engines whose
//! [`ferrite::Concurrency`] lets writers `Proceed`; cases that read while a writer is open need
//! readers that `Proceed`. On other engines such a case checks the documented `Busy` behaviour
//! instead, or reports itself skipped (`Block` cannot be driven from one thread).
#![allow(dead_code)]

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use ferrite::pmem::internals::testing::TestDir;
use ferrite::{Database, EngineKind, Error, Options, Row, WhileWriting};

/// The outcome of a case: `Err` carries what went wrong.
pub type Outcome = Result<(), String>;

/// Creates or opens a database in a directory.
pub type Factory = Arc<dyn Fn(&Path) -> ferrite::Result<Database> + Send + Sync>;

/// The engine under test.
#[derive(Clone)]
pub struct Subject {
    /// Name used in messages and directory names.
    pub name: &'static str,
    /// Creates a fresh database in the (empty) directory.
    pub create: Factory,
    /// Opens the database `create` made in the directory; `None` for engines that keep nothing.
    pub open: Option<Factory>,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("name", &self.name)
            .field("reopens", &self.open.is_some())
            .finish()
    }
}

/// One subject per engine of this build (`EngineKind::ALL`): the database lives at `db` in the
/// case's directory, built with `options` and the engine chosen; persistent engines reopen it.
pub fn engines_with(options: impl Fn() -> Options + Send + Sync + Clone + 'static) -> Vec<Subject> {
    EngineKind::all()
        .map(|kind| {
            let (o1, o2) = (options.clone(), options.clone());
            let create: Factory =
                Arc::new(move |dir: &Path| Database::create(dir.join("db"), o1().engine(kind)));
            let open: Option<Factory> = kind.is_persistent().then(|| -> Factory {
                Arc::new(move |dir: &Path| Database::open(dir.join("db"), o2().engine(kind)))
            });
            Subject { name: kind.name(), create, open }
        })
        .collect()
}

/// [`engines_with`] default options, with small pool segments (2 MiB: test pools live in RAM).
pub fn engines() -> Vec<Subject> {
    engines_with(|| Options::new().pmem(ferrite::pmem::Options::new().segment_size(2 << 20)))
}

/// SOFORT with every index in PM: `sofort-hybrid` (FPTrees with DRAM inner nodes) and
/// `sofort-persistent` (FPTrees with PM inner nodes), both reopened like `sofort`
/// (`tests/engines_placement.rs`; `engines()` keeps one subject per engine kind).
pub fn sofort_placements() -> Vec<Subject> {
    use ferrite::{SofortConfig, SofortIndexPlacement as P};
    [("sofort-hybrid", P::Hybrid), ("sofort-persistent", P::Persistent)]
        .into_iter()
        .map(|(name, p)| {
            let options = move || {
                Options::new()
                    .engine(EngineKind::Sofort)
                    .pmem(ferrite::pmem::Options::new().segment_size(2 << 20))
                    .sofort(SofortConfig::default().default_placement(p))
            };
            let (o1, o2) = (options, options);
            let create: Factory =
                Arc::new(move |dir: &Path| Database::create(dir.join("db"), o1()));
            let open: Factory = Arc::new(move |dir: &Path| Database::open(dir.join("db"), o2()));
            Subject { name, create, open: Some(open) }
        })
        .collect()
}

/// One named case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The case's name.
    pub name: &'static str,
    /// The case.
    pub run: fn(&Subject) -> Outcome,
}

/// A fresh database and the directory that holds it (removed on drop).
#[derive(Debug)]
pub struct Fixture {
    /// The database.
    pub db: Database,
    /// Its directory.
    pub dir: TestDir,
}

impl Subject {
    /// A fresh database in a fresh directory.
    pub fn fresh(&self, tag: &str) -> Result<Fixture, String> {
        let dir = TestDir::new(&format!("{}-{tag}", self.name));
        let db = (self.create)(dir.path()).map_err(|e| format!("create database: {e}"))?;
        Ok(Fixture { db, dir })
    }
}

/// Runs every case of a group on every subject; panics listing the failures of all of them.
pub fn run_group(subjects: &[Subject], group: &str, cases: &[Case]) {
    assert!(!subjects.is_empty(), "{group}: no engine to test");
    let mut list = Vec::new();
    for subject in subjects {
        for (n, e) in run_cases(subject, cases) {
            list.push(format!("  {} {n}: {e}", subject.name));
        }
    }
    if !list.is_empty() {
        panic!(
            "{group}: {} of {} cases failed:\n{}",
            list.len(),
            cases.len() * subjects.len(),
            list.join("\n")
        );
    }
}

/// Runs a whole-suite check (a model test) on every subject; panics listing every failure.
pub fn run_each(subjects: &[Subject], group: &str, check: fn(&Subject) -> Outcome) {
    assert!(!subjects.is_empty(), "{group}: no engine to test");
    let failures: Vec<String> = subjects
        .iter()
        .filter_map(|s| check(s).err().map(|e| format!("  {}: {e}", s.name)))
        .collect();
    if !failures.is_empty() {
        panic!("{group} failed:\n{}", failures.join("\n"));
    }
}

/// Runs cases, returning `(name, error)` for each failure (a panicking case counts as failed).
pub fn run_cases(subject: &Subject, cases: &[Case]) -> Vec<(&'static str, String)> {
    let mut failures = Vec::new();
    for case in cases {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (case.run)(subject)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&p))));
        match result {
            Ok(()) => eprintln!("{} {} ... ok", subject.name, case.name),
            Err(e) => {
                eprintln!("{} {} ... FAILED: {e}", subject.name, case.name);
                failures.push((case.name, e));
            }
        }
    }
    failures
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Adds context to an engine error.
pub trait Ctx<T> {
    /// Maps the error to a message naming the step.
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for ferrite::Result<T> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error: {e} ({e:?})"))
    }
}

/// Fails with a message unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Fails unless the two sides are equal, showing both.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($fmt:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}: got {:?}, expected {:?}", format!($($fmt)+), l, r));
        }
    }};
}

/// Fails unless `result` is an error matching `pattern`.
#[macro_export]
macro_rules! ensure_err {
    ($result:expr, $pattern:pat, $($fmt:tt)+) => {{
        match $result {
            Err($pattern) => {}
            other => {
                return Err(format!(
                    "{}: expected {}, got {:?}",
                    format!($($fmt)+),
                    stringify!($pattern),
                    other
                ))
            }
        }
    }};
}

/// Whether `e` is `Conflict`.
pub fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Conflict { .. })
}

/// Whether the engine lets a second writer (`begin`) proceed while one is open.
pub fn writers_proceed(db: &Database) -> bool {
    db.engine().concurrency().writers == WhileWriting::Proceed
}

/// Whether read-only transactions proceed (read a snapshot) while a writer is open.
pub fn readers_proceed(db: &Database) -> bool {
    db.engine().concurrency().readers == WhileWriting::Proceed
}

/// Sorts rows (for comparisons where order is not part of the contract).
pub fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort();
    rows
}

/// Generates the suite's tests for a list of subjects (see the module docs).
#[macro_export]
macro_rules! conformance_suite {
    (subjects = $subjects:expr $(,)?) => {
        fn subjects() -> Vec<conformance::Subject> {
            $subjects
        }

        #[test]
        fn operations() {
            conformance::run_group(&subjects(), "operations", conformance::operations::CASES);
        }

        #[test]
        fn errors() {
            conformance::run_group(&subjects(), "errors", conformance::operations::ERROR_CASES);
        }

        #[test]
        fn scans() {
            conformance::run_group(&subjects(), "scans", conformance::scans::CASES);
        }

        #[test]
        fn isolation() {
            conformance::run_group(&subjects(), "isolation", conformance::isolation::CASES);
        }

        #[test]
        fn durability() {
            conformance::run_group(&subjects(), "durability", conformance::durability::CASES);
        }

        #[test]
        fn model_serial() {
            conformance::run_each(&subjects(), "model_serial", conformance::model::serial);
        }

        #[test]
        fn model_interleaved() {
            conformance::run_each(
                &subjects(),
                "model_interleaved",
                conformance::model::interleaved,
            );
        }
    };
}

pub mod durability;
pub mod isolation;
pub mod model;
pub mod operations;
pub mod scans;
