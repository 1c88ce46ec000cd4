//! Mutation checks: drop one persist site at a time and show that the tester notices.
//!
//! # Invariants
//! - A site is `Detected` only if a run with that site dropped failed (a target that is not
//!   reproducible gets up to `UNREPRODUCIBLE_ATTEMPTS` such runs); `Benign` only with the
//!   target's written reason; `Excused` only without a run, when the caller's
//!   `Config::excused` names it or names nothing and the target calls it benign (and
//!   `Config::run_excused` is off); everything else is `Undetected`.
//! - A mutated run gives up on a recovery after `Config::mutant_watchdog` (a hang there is
//!   what many dropped persists cause; a false hang could only make a site look detected).
//!
//! # Concurrency
//! The unmutated run comes first; the mutated runs (one per site) are independent ordinary
//! explorations and run `Config::mutation_jobs` at a time on scoped threads, each with its
//! own output and current-image directories (a run's images and verdict depend only on its
//! configuration and seed, so the report is the same for any number of jobs, except for a
//! multi-threaded target, whose schedules vary anyway; it lists sites in the unmutated run's
//! order).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{Config, Report, Stop, Verdict, explore};
use crate::target::Target;

/// One persist site of a mutation check and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutationOutcome {
    /// Dropping the site's persists made the tester fail the target.
    Detected,
    /// Not detected, and the target explains why that is fine.
    Benign(String),
    /// Not run: the check was told (`Config::excused`) that this site's outcome cannot change
    /// its verdict (a benign site of the target, or a site the caller accepts undetected
    /// because another target or test shows it needed), with the reason.
    Excused(String),
    /// Not run: in the unmutated run no flush or fence at this site changed what is durable
    /// (every line it wrote back already held that content), so dropping it cannot change
    /// any image of this workload. The persist may still matter to a workload that makes it
    /// write something new (the report says so; the target may explain it further).
    NoEffect,
    /// The run with the site dropped found no failure but stopped (budget or time) before
    /// the end of the workload: not shown either way.
    Unchecked(Stop),
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
    /// Every persist site the workload or a recovery reached, and its outcome.
    pub sites: Vec<(String, MutationOutcome)>,
}

impl MutationReport {
    /// Whether the unmutated run passed and every site was detected, explained as benign by
    /// the target, or had no effect in the unmutated run.
    pub fn passed(&self) -> bool {
        self.base.passed()
            && self.sites.iter().all(|(_, o)| {
                matches!(
                    o,
                    MutationOutcome::Detected
                        | MutationOutcome::Benign(_)
                        | MutationOutcome::Excused(_)
                        | MutationOutcome::NoEffect
                )
            })
    }

    /// The sites only recoveries reached, with their outcomes.
    pub fn recovery_only(&self) -> impl Iterator<Item = &(String, MutationOutcome)> {
        self.sites.iter().filter(|(s, _)| self.base.sites.get(s).is_some_and(|x| x.recovery_only()))
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
            write!(f, "  the unmutated run did not pass:\n{}", self.base)?;
        }
        for (site, o) in &self.sites {
            let at = if self.base.sites.get(site).is_some_and(|x| x.recovery_only()) {
                " [recovery only]"
            } else {
                ""
            };
            match o {
                MutationOutcome::Detected => writeln!(f, "  detected   {site}{at}")?,
                MutationOutcome::Benign(why) => writeln!(f, "  benign     {site}{at}: {why}")?,
                MutationOutcome::Excused(why) => {
                    writeln!(f, "  excused    {site}{at}: not run: {why}")?
                }
                MutationOutcome::NoEffect => writeln!(
                    f,
                    "  no-effect  {site}{at}: every flush and fence there left the durable image unchanged in this workload"
                )?,
                MutationOutcome::Unchecked(s) => writeln!(
                    f,
                    "  UNCHECKED  {site}{at}: the mutated run stopped ({s:?}) before the end of the workload, without a failure"
                )?,
                MutationOutcome::Undetected => writeln!(f, "  UNDETECTED {site}{at}")?,
            }
        }
        Ok(())
    }
}

/// Runs the mutation check: an unmutated run, then one run per persist site it reached — in
/// the workload or inside a recovery — with that site's flushes and fences made no-ops in
/// every domain (the workload's and those recoveries open); each must fail, or be listed as
/// benign by the target. A site whose persists changed something durable only inside recovery
/// (reached only there, or the workload's persists there only wrote back what was durable)
/// is mutated with every recovery crashed (`nested_rate` 1), the depth-2 policy keyed by
/// (outer crash point, inner site) (`nested_by_outer`), and each recovery crashed only after
/// the dropped site diverged from the unmutated code (`nested_after_drop`), since only a crash
/// after it inside the right recovery can show it is needed. A site whose persists changed
/// nothing durable in the unmutated run is reported as having no effect without a mutated run.
pub fn mutate<T: Target>(target: Arc<T>, cfg: &Config) -> MutationReport {
    let base = explore(target.clone(), cfg);
    if !base.passed() {
        return MutationReport { target: target.name().to_owned(), base, sites: Vec::new() };
    }
    let listed: Vec<(&String, &super::SiteStats)> = base.sites.iter().collect();
    let outcomes: Vec<Mutex<Option<MutationOutcome>>> =
        listed.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((site, stats)) = listed.get(i) else { return };
            let o = mutated_run(&target, cfg, i, site, stats);
            *outcomes[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(o);
        }
    };
    let jobs = cfg.mutation_jobs.clamp(1, listed.len().max(1));
    std::thread::scope(|s| {
        for _ in 1..jobs {
            s.spawn(work);
        }
        work();
    });
    if cfg.save_each {
        // The mutated runs' current-image directories were below this one.
        let _ = std::fs::remove_dir(&cfg.current_dir);
    }
    let sites = listed
        .iter()
        .zip(outcomes)
        .map(|((site, _), o)| {
            let o = o.into_inner().unwrap_or_else(|p| p.into_inner());
            ((*site).clone(), o.expect("every site was run by a worker"))
        })
        .collect();
    MutationReport { target: target.name().to_owned(), base, sites }
}

/// How many mutated runs a site of a target that is not reproducible ([`Target::reproducible`])
/// gets before it is called undetected. One schedule per site was not enough: CI runs of
/// `fptree-threads-persistent` each missed one site's window (P-FPT-16, P-FPT-18 and P-FPT-3
/// on 2026-11-25, P-FPT-17 on 2026-11-28), each a site other runs detect.
pub const UNREPRODUCIBLE_ATTEMPTS: u64 = 3;

/// Whether the benign pattern `pat` names the site key `matched` (see
/// [`Target::benign_sites`]). A pattern `FILE@TEXT` names a site in a file whose path ends
/// with `FILE` and whose source line, or the line above it, holds `TEXT` (words of the site's
/// `ORDER(...)` comment; the line above counts only if it is a comment line): it survives
/// edits that move the line. Any other pattern is a
/// substring of the key. A source file that cannot be read names nothing (the site is then
/// reported undetected, never excused by mistake).
pub fn names_site(pat: &str, matched: &str) -> bool {
    let Some((file, text)) = pat.split_once('@') else { return matched.contains(pat) };
    let key = matched.split([' ', '#']).next().unwrap_or(matched);
    let mut parts = key.rsplitn(3, ':');
    let (Some(_col), Some(line), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(line) = line.parse::<usize>() else { return false };
    if !path.ends_with(file) || line == 0 {
        return false;
    }
    source_lines(path, line).is_some_and(|(above, at)| {
        at.contains(text) || (above.trim_start().starts_with("//") && above.contains(text))
    })
}

/// Lines `line - 1` and `line` (1-based) of the workspace source file `path` (as
/// `Location::file` gives it: relative to the workspace root, where this crate was built).
fn source_lines(path: &str, line: usize) -> Option<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = std::path::Path::new(path);
    let text =
        std::fs::read_to_string(if p.is_absolute() { p.to_path_buf() } else { root.join(p) })
            .ok()?;
    let mut lines = text.lines().skip(line.saturating_sub(2));
    let above = if line >= 2 { lines.next()?.to_owned() } else { String::new() };
    Some((above, lines.next()?.to_owned()))
}

/// The outcome of mutating `site` (the `i`-th of the unmutated run): no run for a site
/// without effect, else one exploration with the site dropped, in directories of its own.
fn mutated_run<T: Target>(
    target: &Arc<T>,
    cfg: &Config,
    i: usize,
    site: &str,
    stats: &super::SiteStats,
) -> MutationOutcome {
    if stats.effective == 0 {
        return MutationOutcome::NoEffect;
    }
    // Benign patterns match the site key, followed by ` [recovery only]` for a site only
    // recoveries reach (so a pattern can excuse the recovery-only site of a rule without
    // excusing the workload's).
    let matched =
        if stats.recovery_only() { format!("{site} [recovery only]") } else { site.to_owned() };
    let benign = target.benign_sites().iter().find(|(pat, _)| names_site(pat, &matched));
    if let Some(excuse) = cfg.excused.as_ref().filter(|_| !cfg.run_excused) {
        if let Some(why) = excuse(&matched) {
            return MutationOutcome::Excused(why);
        }
        if let Some((_, why)) = benign {
            return MutationOutcome::Excused(format!("benign: {why}"));
        }
    }
    // A mutated run does not write every image out before recovering it (`save_each` is
    // for diagnosing a recovery that kills the process; it was a tenth of a mutation
    // check's profile); its failures are saved as usual.
    let mut c = Config {
        drop_sites: vec![site.to_owned()],
        progress: None,
        save_each: false,
        watchdog: cfg.watchdog.min(cfg.mutant_watchdog),
        out_dir: cfg.out_dir.join(format!("mutant-{i}")),
        current_dir: cfg.current_dir.join(format!("mutant-{i}")),
        ..cfg.clone()
    };
    if stats.matters_only_in_recovery() {
        c.nested = true;
        c.nested_rate = 1.0;
        c.nested_by_outer = true;
        c.nested_after_drop = true;
    }
    // A run that is not reproducible (several workload threads) may miss the window in which
    // the dropped persist shows; its mutant gets more schedules, each with another seed, and
    // counts as detected if any of them fails. A needed site whose window a schedule catches
    // with probability p is then missed with probability (1 - p)^attempts.
    let attempts = if target.reproducible() { 1 } else { UNREPRODUCIBLE_ATTEMPTS };
    let mut r = explore(target.clone(), &c);
    for k in 1..attempts {
        if r.failed() {
            break;
        }
        let again = Config {
            seed: cfg.seed.wrapping_add(k),
            out_dir: cfg.out_dir.join(format!("mutant-{i}-{k}")),
            current_dir: cfg.current_dir.join(format!("mutant-{i}-{k}")),
            ..c.clone()
        };
        r = explore(target.clone(), &again);
    }
    if r.failed() {
        MutationOutcome::Detected
    } else if let Some((_, why)) = benign {
        MutationOutcome::Benign((*why).to_owned())
    } else if let Verdict::Stopped(s) = r.verdict() {
        MutationOutcome::Unchecked(s)
    } else {
        MutationOutcome::Undetected
    }
}

#[cfg(test)]
mod tests {
    use super::names_site;

    #[test]
    fn a_text_pattern_names_the_site_whose_line_holds_it() {
        let key = format!("{}:{}:9#P-T-1", file!(), line!()); // ORDER(P-T-1): a marker for names_site
        let file = "explore/mutation.rs";
        assert!(names_site(&format!("{file}@a marker for names_site"), &key));
        assert!(names_site(
            &format!("{file}@a marker for names_site"),
            &format!("{key} [recovery only]")
        ));
        assert!(!names_site(&format!("{file}@words on no line near it"), &key));
        assert!(!names_site("other.rs@a marker for names_site", &key));
        // Plain patterns stay substrings of the key.
        assert!(names_site("#P-T-1", &key));
        assert!(!names_site("#P-T-2", &key));
        // A key whose file cannot be read names nothing.
        assert!(!names_site("nowhere.rs@a marker", "src/nowhere.rs:3:1#P-T-1"));
    }
}
