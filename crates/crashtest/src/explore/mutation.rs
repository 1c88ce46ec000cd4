//! Mutation checks: drop one persist site at a time and show that the tester notices.
//!
//! # Invariants
//! - A site is `Detected` only if the run with that site dropped failed; `Benign` only with
//!   the target's written reason; everything else is `Undetected`.
//!
//! # Concurrency
//! Runs are sequential; each is an ordinary exploration.

use std::fmt;
use std::sync::Arc;

use super::{Config, Report, explore};
use crate::target::Target;

/// One persist site of a mutation check and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutationOutcome {
    /// Dropping the site's persists made the tester fail the target.
    Detected,
    /// Not detected, and the target explains why that is fine.
    Benign(String),
    /// Not detected and not explained: the crash test cannot tell this persist is needed.
    Undetected,
}

/// The result of a mutation check.
#[derive(Clone, Debug, Default)]
pub struct MutationReport {
    /// Target name.
    pub target: String,
    /// The unmutated run.
    pub base: Report,
    /// Every persist site the workload reached, and its outcome.
    pub sites: Vec<(String, MutationOutcome)>,
}

impl MutationReport {
    /// Whether every site was detected or is explained as benign, and the base run passed.
    pub fn passed(&self) -> bool {
        self.base.passed() && self.sites.iter().all(|(_, o)| *o != MutationOutcome::Undetected)
    }
}

impl fmt::Display for MutationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: mutation check {}",
            self.target,
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        if !self.base.passed() {
            write!(f, "  the unmutated run failed:\n{}", self.base)?;
        }
        for (site, o) in &self.sites {
            match o {
                MutationOutcome::Detected => writeln!(f, "  detected   {site}")?,
                MutationOutcome::Benign(why) => writeln!(f, "  benign     {site}: {why}")?,
                MutationOutcome::Undetected => writeln!(f, "  UNDETECTED {site}")?,
            }
        }
        Ok(())
    }
}

/// Runs the mutation check: an unmutated run, then one run per persist site it reached with
/// that site's flushes and fences made no-ops; each must fail, or be listed as benign by the
/// target.
pub fn mutate<T: Target>(target: Arc<T>, cfg: &Config) -> MutationReport {
    let base = explore(target.clone(), cfg);
    let mut sites = Vec::new();
    if base.passed() {
        for site in base.sites.keys() {
            let r = explore(
                target.clone(),
                &Config { drop_sites: vec![site.clone()], progress: None, ..cfg.clone() },
            );
            let outcome = if !r.passed() {
                MutationOutcome::Detected
            } else if let Some((_, why)) =
                target.benign_sites().iter().find(|(pat, _)| site.contains(pat))
            {
                MutationOutcome::Benign((*why).to_owned())
            } else {
                MutationOutcome::Undetected
            };
            sites.push((site.clone(), outcome));
        }
    }
    MutationReport { target: target.name().to_owned(), base, sites }
}
