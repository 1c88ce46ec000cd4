//! `ferrite-crashtest`: the crash-simulation tester and every crash target.
//!
//! The tester runs a target's workload on a simulated persistence domain
//! ([`ferrite_pmem::SimDomain`]) and, at its crash points, builds crash images, recovers each
//! on a fresh thread and checks the result against a model of what certainly committed, what
//! certainly did not and what was in flight. No real persistent memory, no `fork`, no
//! Valgrind: only the persistence layer's own model. Design: `docs/design/crash-testing.md`.
//!
//! # Invariants
//! - The workload thread is suspended while its crash point is tested; nothing the test does
//!   touches the workload's pool (images are copies; recovery opens them on new domains).
//! - Every random choice derives from the run's seed; a failure is saved with its model and
//!   replays from the saved image alone.
//!
//! # Concurrency
//! A target's workload may run several threads; one crash is tested at a time while the others
//! are paused at their next persistence event. Recovery and check run on a spawned thread under
//! `catch_unwind` and a watchdog.
//!
//! ```
//! use ferrite_crashtest::{Config, registry};
//! let toy = registry().into_iter().find(|t| t.name() == "toy-missing-flush").unwrap();
//! let dir = std::env::temp_dir().join(format!("ferrite-doc-{}", std::process::id()));
//! let report = toy.explore(&Config { out_dir: dir.clone(), ..Config::default() });
//! assert!(!report.passed(), "the seeded defect is found");
//! let _ = std::fs::remove_dir_all(dir);
//! ```
#![forbid(unsafe_code)]

pub mod alloc;
pub mod alloc_big;
pub mod alloc_huge;
pub mod alloc_threads;
pub mod db;
pub mod db_threads;
mod explore;
pub mod fptree;
mod fptree_common;
pub mod fptree_persistent;
pub mod fptree_pindex;
pub mod fptree_threads;
pub mod fptree_var;
pub mod poolset;
mod target;
pub mod toys;

pub use explore::{
    Config, DynTarget, ExcuseFn, Failure, KeyStats, MutationOutcome, MutationReport, Progress,
    ProgressFn, Report, SiteStats, Stop, Verdict, explore, mutate, names_site, replay,
};
pub use target::{Axioms, Ctx, Expect, Mode, ModelOp, ModelView, OpToken, StepHook, Target};

/// Every registered crash target, by name.
pub fn registry() -> Vec<Box<dyn DynTarget>> {
    let mut v = toys::toys();
    v.push(Box::new(std::sync::Arc::new(fptree::FptreeFixed)));
    v.push(Box::new(std::sync::Arc::new(fptree_pindex::FptreePindex::default())));
    v.push(Box::new(std::sync::Arc::new(fptree_pindex::FptreePindexVar::default())));
    v.push(Box::new(std::sync::Arc::new(fptree_persistent::FptreePersistent)));
    v.push(Box::new(std::sync::Arc::new(fptree_var::FptreeVar::default())));
    v.push(Box::new(std::sync::Arc::new(fptree_var::FptreeVar::persistent())));
    v.push(Box::new(std::sync::Arc::new(fptree_var::FptreeVar::leaf_deletes())));
    v.push(Box::new(std::sync::Arc::new(fptree_threads::FptreeThreads::default())));
    v.push(Box::new(std::sync::Arc::new(fptree_threads::FptreeThreads::persistent())));
    v.push(Box::new(std::sync::Arc::new(alloc::AllocSmall)));
    v.push(Box::new(std::sync::Arc::new(alloc_big::AllocBig)));
    v.push(Box::new(std::sync::Arc::new(alloc_huge::AllocHuge)));
    v.push(Box::new(std::sync::Arc::new(alloc_threads::AllocThreads::default())));
    v.push(Box::new(std::sync::Arc::new(poolset::PoolSetFiles)));
    v.extend(db::targets());
    v.push(Box::new(std::sync::Arc::new(db_threads::DbSofortThreads::free(db_threads::ROUNDS))));
    v.push(Box::new(std::sync::Arc::new(db_threads::DbSofortThreads::parked(db_threads::ROUNDS))));
    v
}

/// The registered target called `name`.
pub fn find(name: &str) -> Option<Box<dyn DynTarget>> {
    registry().into_iter().find(|t| t.name() == name)
}
