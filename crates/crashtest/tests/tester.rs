//! The tester on its seeded-defect toys and on self-test targets: every defect is found (the
//! missing fence only with the stash), every twin passes, failures replay from the saved
//! image, recovery panics and hangs are failures with precise messages, the call-stack policy
//! halves, the budget holds, and a seed reproduces its run.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrite_crashtest::{Config, Ctx, ModelOp, ModelView, Target, find, registry};
use ferrite_pmem::internals::testing::TestDir;
use ferrite_pmem::{CrashImage, Options, Pool};

fn cfg(dir: &TestDir) -> Config {
    Config {
        out_dir: dir.path().to_path_buf(),
        budget: Some(5_000),
        time: Some(Duration::from_secs(60)),
        ..Config::default()
    }
}

#[test]
fn every_seeded_defect_is_found_and_replays() {
    let dir = TestDir::new("crashtest-toys");
    for name in ["toy-missing-flush", "toy-missing-fence", "toy-wrong-order", "toy-commit-first"] {
        let t = find(name).unwrap();
        let r = t.explore(&cfg(&dir));
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
    for t in registry().into_iter().filter(|t| t.name().ends_with("-fixed")) {
        let r = t.explore(&Config { exhaustive: true, ..cfg(&dir) });
        assert!(r.passed(), "{}", r);
        assert!(!r.stopped_early, "{}: budget too small for an exhaustive run", t.name());
        assert_eq!(r.crashed, r.visited, "exhaustive mode crashes at every visit");
        assert!(r.images > 20, "{r}");
    }
}

#[test]
fn missing_fence_is_found_only_with_the_stash() {
    let dir = TestDir::new("crashtest-stash");
    let t = find("toy-missing-fence").unwrap();
    let without = t.explore(&Config { stash: false, exhaustive: true, ..cfg(&dir) });
    assert!(without.passed(), "found without the stash:\n{without}");
    let with = t.explore(&cfg(&dir));
    assert!(!with.passed(), "not found with the stash:\n{with}");
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
    assert!(small.stopped_early && small.passed(), "{small}");
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
            p.persist(0, 8).map_err(|e| e.to_string())?;
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
                    std::thread::sleep(Duration::from_millis(50));
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
