//! The conformance suite every Ferrite engine must pass.
//!
//! An engine's test file includes this module and invokes [`conformance_suite!`] with a factory
//! that creates a fresh database in a directory (and, for persistent engines, one that opens it
//! again):
//!
//! ```ignore
//! mod conformance;
//! conformance_suite!(
//!     reference,
//!     create = |dir| Database::create(dir.join("db"), Options::new().engine(EngineKind::Reference)),
//!     open = None,
//! );
//! ```
//!
//! That generates one `#[test]` per group (`operations`, `errors`, `scans`, `isolation`,
//! `durability`, `model_serial`, `model_interleaved`). A group runs every case of its list (each
//! case gets a fresh database), then fails listing every case that failed. Cases are plain
//! functions returning `Result<(), String>`, so that a test can also assert that a case *fails*
//! (see `tests/broken_engine.rs`: the reference engine with validation switched off must fail
//! the isolation cases).
//!
//! Cases that need two read-write transactions open at once run only on engines whose
//! [`ferrite::Concurrency`] lets writers `Proceed`; cases that read while a writer is open need
//! readers that `Proceed`. On other engines such a case checks the documented `Busy` behaviour
//! instead, or reports itself skipped (`Block` cannot be driven from one thread).
#![allow(dead_code)]

use std::path::Path;

use ferrite::pmem::internals::testing::TestDir;
use ferrite::{Database, Error, Row, WhileWriting};

/// The outcome of a case: `Err` carries what went wrong.
pub type Outcome = Result<(), String>;

/// Creates or opens a database in a directory.
pub type Factory = fn(&Path) -> ferrite::Result<Database>;

/// The engine under test.
#[derive(Clone, Copy, Debug)]
pub struct Subject {
    /// Name used in messages and directory names.
    pub name: &'static str,
    /// Creates a fresh database in the (empty) directory.
    pub create: Factory,
    /// Opens the database `create` made in the directory; `None` for engines that keep nothing.
    pub open: Option<Factory>,
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

/// Runs every case of a group; panics listing the failures.
pub fn run_group(subject: &Subject, group: &str, cases: &[Case]) {
    let failures = run_cases(subject, cases);
    if !failures.is_empty() {
        let list: Vec<String> = failures.iter().map(|(n, e)| format!("  {n}: {e}")).collect();
        panic!(
            "{} {group}: {} of {} cases failed:\n{}",
            subject.name,
            failures.len(),
            cases.len(),
            list.join("\n")
        );
    }
}

/// Runs cases, returning `(name, error)` for each failure (a panicking case counts as failed).
pub fn run_cases(subject: &Subject, cases: &[Case]) -> Vec<(&'static str, String)> {
    let mut failures = Vec::new();
    for case in cases {
        let result = std::panic::catch_unwind(|| (case.run)(subject))
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

/// Generates the suite's tests for one engine (see the module docs).
#[macro_export]
macro_rules! conformance_suite {
    ($engine:ident, create = $create:expr, open = $open:expr $(,)?) => {
        mod $engine {
            #[allow(unused_imports)]
            use super::*;

            const SUBJECT: conformance::Subject =
                conformance::Subject { name: stringify!($engine), create: $create, open: $open };

            #[test]
            fn operations() {
                conformance::run_group(&SUBJECT, "operations", conformance::operations::CASES);
            }

            #[test]
            fn errors() {
                conformance::run_group(&SUBJECT, "errors", conformance::operations::ERROR_CASES);
            }

            #[test]
            fn scans() {
                conformance::run_group(&SUBJECT, "scans", conformance::scans::CASES);
            }

            #[test]
            fn isolation() {
                conformance::run_group(&SUBJECT, "isolation", conformance::isolation::CASES);
            }

            #[test]
            fn durability() {
                conformance::run_group(&SUBJECT, "durability", conformance::durability::CASES);
            }

            #[test]
            fn model_serial() {
                if let Err(e) = conformance::model::serial(&SUBJECT) {
                    panic!("{e}");
                }
            }

            #[test]
            fn model_interleaved() {
                if let Err(e) = conformance::model::interleaved(&SUBJECT) {
                    panic!("{e}");
                }
            }
        }
    };
}

pub mod durability;
pub mod isolation;
pub mod model;
pub mod operations;
pub mod scans;
