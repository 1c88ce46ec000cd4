//! The pool-set file-operation target (`poolset-files`): a run to the end of its workload
//! passes, and every persist site it reaches is needed (grow's header, magic and bitmap bit,
//! removal's bitmap bit, the workload's stamps) — the mutation check detects each one's loss.

use ferrite_crashtest::{Config, MutationOutcome, find};
use ferrite_pmem::internals::testing::TestDir;

#[test]
fn poolset_files_passes_and_every_persist_site_is_needed() {
    let dir = TestDir::new("crashtest-poolset-files");
    let t = find("poolset-files").expect("registered");
    // Bounded by images only, and large enough to reach the end of the workload (a stopped
    // run is no pass).
    let cfg = Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(20_000),
        time: None,
        // No mutated run for the target's benign sites: they cannot change the verdict.
        excused: Some(std::sync::Arc::new(|_: &str| None)),
        ..Config::default()
    };
    let m = t.mutate(&cfg);
    assert!(m.base.smoke_problem(t.min_images()).is_none(), "{}", m.base);
    assert!(m.passed(), "{m}");
    for rule in ["#P-PM-1", "#P-PM-8", "#P-PM-9"] {
        assert!(
            m.sites.iter().any(|(s, o)| s.contains(rule) && *o == MutationOutcome::Detected),
            "{rule} not detected:\n{m}"
        );
    }
}
