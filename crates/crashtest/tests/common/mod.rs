//! Shared by the crash-target tests (`mod common;` in each): the bounded mutation run of a
//! registered target, and the assertions on its persist sites that several tests make.
//!
//! Runs are bounded by images only, never by seconds: a time cap would make how much a run
//! checks depend on how loaded the machine is.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;

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

/// [`mutate_with`] whose mutation check makes no mutated run for the target's benign sites
/// nor for the sites `excused` names (each a site the test accepts undetected because another
/// target or test shows it needed; it must be among those [`assert_every_site_needed`]'s
/// `elsewhere` accepts): their outcome cannot change the test's verdict, and each such run
/// explores the whole workload. `ferrite crashtest NAME --mutate` (the long tier) runs them.
pub fn mutate_excusing(
    name: &str,
    dir: &str,
    excused: impl Fn(&str) -> bool + Send + Sync + 'static,
    tweak: impl FnOnce(&mut Config),
) -> MutationReport {
    mutate_with(name, dir, |cfg| {
        cfg.excused = Some(excuse(excused));
        tweak(cfg);
    })
}

/// The mutation check's excuse for the sites `excused` names (see [`mutate_excusing`]).
pub fn excuse(
    excused: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> ferrite_crashtest::ExcuseFn {
    Arc::new(move |site: &str| {
        excused(site)
            .then(|| "accepted undetected here: another target or test shows it needed".into())
    })
}

/// Every site was detected, explained as benign, or without effect; a site for which
/// `elsewhere` holds may also be undetected, or excused from its mutated run (the test says
/// which other target detects it). A site excused but not accepted by `elsewhere` fails.
pub fn assert_every_site_needed(m: &MutationReport, elsewhere: impl Fn(&str) -> bool) {
    for (s, o) in &m.sites {
        let benign_excuse =
            matches!(o, MutationOutcome::Excused(why) if why.starts_with("benign: "));
        assert!(
            matches!(
                o,
                MutationOutcome::Detected | MutationOutcome::Benign(_) | MutationOutcome::NoEffect
            ) || benign_excuse
                || (elsewhere(s)
                    && matches!(o, MutationOutcome::Undetected | MutationOutcome::Excused(_))),
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
