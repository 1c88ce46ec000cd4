//! Shared by the crash-target tests (`mod common;` in each): the bounded mutation run of a
//! registered target, and the assertions on its persist sites that several tests make.
//!
//! Runs are bounded by images only, never by seconds: a time cap would make how much a run
//! checks depend on how loaded the machine is.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use ferrite_crashtest::{Config, MutationOutcome, MutationReport, find};
use ferrite_pmem::internals::testing::TestDir;

/// The image budget of a target's mutation run (the unmutated run and each mutated one).
pub const BUDGET: u64 = 40_000;

/// Runs the mutation check of the registered target `name` in a fresh test directory named
/// `dir` (seed and every other setting as in `Config::default()`), prints both reports, and
/// asserts that the unmutated run is a complete smoke run (its image floor reached, not
/// stopped).
pub fn mutate(name: &str, dir: &str) -> MutationReport {
    mutate_with(name, dir, |_| {})
}

/// [`mutate`] with settings changed by `tweak` after the defaults are filled in (e.g. a
/// smaller budget for a target whose images cost more).
pub fn mutate_with(name: &str, dir: &str, tweak: impl FnOnce(&mut Config)) -> MutationReport {
    let dir = TestDir::new(dir);
    let t = find(name).expect("registered");
    let mut cfg = Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(BUDGET),
        time: None,
        ..Config::default()
    };
    tweak(&mut cfg);
    let m = t.mutate(&cfg);
    eprintln!("{}\n{m}", m.base);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    m
}

/// Every site was detected, explained as benign, or without effect; a site for which
/// `elsewhere` holds may also be undetected (the test says which other target detects it).
pub fn assert_every_site_needed(m: &MutationReport, elsewhere: impl Fn(&str) -> bool) {
    for (s, o) in &m.sites {
        assert!(
            matches!(
                o,
                MutationOutcome::Detected | MutationOutcome::Benign(_) | MutationOutcome::NoEffect
            ) || (elsewhere(s) && *o == MutationOutcome::Undetected),
            "{s}: {o:?}\n{m}"
        );
    }
}

/// Each rule has a persist site whose loss was detected.
pub fn assert_detected(m: &MutationReport, rules: &[&str]) {
    for rule in rules {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
}
