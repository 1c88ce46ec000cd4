//! What a crash target is: a workload on a simulated pool, a recovery, and a check against a
//! model of which operations certainly committed, certainly did not, and were in flight.
//!
//! # Contract
//! - [`Target::workload`] creates its pool through the [`Ctx`] (so the tester's hook sees
//!   every persist, creation included) and brackets every operation with [`Ctx::begin`] and
//!   [`Ctx::done`]: `done` only after the operation is durable (its persist returned).
//! - [`Target::recover`] opens a crash image as a fresh simulated pool (`Pool::open_sim` /
//!   `PoolSet::open_sim`; block files with `SimDomain::open_block_image` or
//!   `SimDomain::add_block_files`, then `BlockFile::open_sim`) and runs the target's real
//!   recovery path. It runs on its own thread,
//!   under `catch_unwind` and a watchdog; any threads it starts must be joined before it
//!   returns. Everything it builds in DRAM is dropped after the check.
//! - [`Target::check`] compares the recovered state with the [`ModelView`] at the crash point:
//!   every committed operation must be present, none of the operations that never began may
//!   be, and each in-flight one may be there or not, but never half.

use std::fmt;
use std::sync::{Arc, Mutex};

use ferrite_pmem::{BlockFile, CrashImage, Options, Pool, PoolSet, SimDomain, SplitMix64};

/// Media axioms a target relies on beyond M1 (`docs/design/persistence.md` §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Axioms {
    /// M2: stores to one cache line become durable in program order. A target that declares it
    /// is never given torn lines.
    pub m2: bool,
}

/// An operation of a target's model, encodable as one line of text (for saved failures).
pub trait ModelOp: Clone + fmt::Debug + Send + Sync + 'static {
    /// One line of text, without newlines.
    fn encode(&self) -> String;
    /// The inverse of [`ModelOp::encode`].
    fn decode(s: &str) -> Option<Self>;
}

/// The model at a crash point.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelView<Op> {
    /// Operations that finished (durable) before the crash, in order.
    pub committed: Vec<Op>,
    /// Operations begun and not finished: each may or may not have taken effect.
    pub in_flight: Vec<Op>,
}

impl<Op> Default for ModelView<Op> {
    fn default() -> Self {
        ModelView { committed: Vec::new(), in_flight: Vec::new() }
    }
}

impl<Op: ModelOp> ModelView<Op> {
    /// Text form: `committed <op>` and `inflight <op>` lines.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        for op in &self.committed {
            s.push_str("committed ");
            s.push_str(&op.encode());
            s.push('\n');
        }
        for op in &self.in_flight {
            s.push_str("inflight ");
            s.push_str(&op.encode());
            s.push('\n');
        }
        s
    }

    /// Parses [`ModelView::encode`]'s output.
    pub fn decode(text: &str) -> Result<Self, String> {
        let mut m = ModelView::default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (kind, rest) =
                line.split_once(' ').ok_or_else(|| format!("bad model line {line:?}"))?;
            let op = Op::decode(rest).ok_or_else(|| format!("bad model op {rest:?}"))?;
            match kind {
                "committed" => m.committed.push(op),
                "inflight" => m.in_flight.push(op),
                _ => return Err(format!("bad model line {line:?}")),
            }
        }
        Ok(m)
    }
}

/// Where a begun operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Begun, not finished: may or may not take effect.
    InFlight,
    /// Durable.
    Done,
    /// Known not to have taken effect (e.g. a commit refused by a conflict): absent from the
    /// model from then on.
    Failed,
}

#[derive(Debug)]
pub(crate) struct Log<Op> {
    /// (op, fate) in begin order.
    pub ops: Vec<(Op, Fate)>,
}

impl<Op: Clone> Log<Op> {
    pub fn view(&self) -> ModelView<Op> {
        let with = |f: Fate| self.ops.iter().filter(move |(_, x)| *x == f).map(|(o, _)| o.clone());
        ModelView {
            committed: with(Fate::Done).collect(),
            in_flight: with(Fate::InFlight).collect(),
        }
    }
}

/// A hook that sees every persistence event of the workload's domain before the tester does
/// (see [`Ctx::set_step_hook`]).
pub type StepHook = Arc<dyn Fn(&ferrite_pmem::sim::Event) + Send + Sync>;

/// A begun operation; pass it to [`Ctx::done`] once the operation is durable.
#[derive(Debug)]
#[must_use = "an operation that is never marked done stays in flight"]
pub struct OpToken(usize);

/// What a workload gets from the tester: pools on the tester's simulated domain, the model log,
/// and a seeded random generator.
pub struct Ctx<Op> {
    pub(crate) domain: Arc<SimDomain>,
    pub(crate) log: Arc<Mutex<Log<Op>>>,
    pub(crate) rng: SplitMix64,
    pub(crate) step: Arc<std::sync::RwLock<Option<StepHook>>>,
}

impl<Op> fmt::Debug for Ctx<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

impl<Op: ModelOp> Ctx<Op> {
    /// Forks an independent random generator (for workload threads).
    pub fn fork_rng(&mut self) -> SplitMix64 {
        SplitMix64::new(self.rng.next_u64())
    }

    /// Creates the target's single-file pool on the tester's domain (crash points start with
    /// its creation).
    pub fn create_pool(&self, size: u64, opts: &Options) -> Result<Pool, String> {
        Pool::create_sim_with(self.domain.clone(), size, opts).map_err(|e| e.to_string())
    }

    /// Creates the target's pool set on the tester's domain.
    pub fn create_pool_set(&self, opts: &Options) -> Result<PoolSet, String> {
        PoolSet::create_sim_with(self.domain.clone(), opts).map_err(|e| e.to_string())
    }

    /// Creates a block file called `name` on the tester's domain (its creation is a crash
    /// point; its syncs are crash points with its unsynced writes undecided).
    #[track_caller]
    pub fn create_block_file(&self, name: &str) -> Result<BlockFile, String> {
        BlockFile::create_sim(&self.domain, name).map_err(|e| e.to_string())
    }

    /// Records that `op` begins: from now until [`Ctx::done`] it is in flight.
    pub fn begin(&self, op: Op) -> OpToken {
        let mut l = self.log.lock().unwrap_or_else(|p| p.into_inner());
        l.ops.push((op, Fate::InFlight));
        OpToken(l.ops.len() - 1)
    }

    /// Records that the operation is durable (committed).
    pub fn done(&self, token: OpToken) {
        let mut l = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = l.ops.get_mut(token.0) {
            e.1 = Fate::Done;
        }
    }

    /// Records that the operation is known not to have taken effect (its commit was refused,
    /// e.g. by a conflict): from now on nothing of it may survive a crash.
    pub fn failed(&self, token: OpToken) {
        let mut l = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = l.ops.get_mut(token.0) {
            e.1 = Fate::Failed;
        }
    }

    /// Installs (or with `None` removes) a hook that sees every persistence event of the
    /// workload (stores, flushes, fences, file operations; `Event::thread` names the thread)
    /// before the tester handles it, outside every lock of the domain. A target's
    /// deterministic schedule parks a workload thread there, at a chosen event, until another
    /// thread has done its part: the tester's own pause (one crash tested at a time) takes
    /// no lock while the hook waits, so the other threads run on, crash points included.
    /// The hook must not wait without bound.
    pub fn set_step_hook(&self, hook: Option<StepHook>) {
        *self.step.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// The workload's random generator (derived from the exploration seed).
    pub fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }
}

/// The exploration modes, weakest first. Each adds one kind of image to the one before it
/// (`Threads` is orthogonal: the workload runs several threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Durable image and "all pending" only (Alg. 7.1).
    Base,
    /// Plus every subset of the crashing thread's pending lines (Alg. 7.3).
    Stash,
    /// Plus early eviction of dirty lines.
    Evict,
    /// Plus torn lines (8-byte granularity), for targets without M2.
    Tear,
    /// Plus crashes inside recovery (depth 2).
    Nested,
    /// Needs several workload threads.
    Threads,
}

/// What the tester should find in a target: nothing, or a failure that a given mode finds (and
/// weaker modes do not). Seeded-defect toys say which mode finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A correct target: every run passes.
    Pass,
    /// A seeded defect, found by this mode.
    FoundBy(Mode),
}

/// A crash target (see the module docs).
pub trait Target: Send + Sync + 'static {
    /// Model operations.
    type Op: ModelOp;
    /// What recovery produces (dropped after the check).
    type Recovered: Send + 'static;

    /// Registry name (`--list`).
    fn name(&self) -> &'static str;
    /// One-line summary (`--list`).
    fn summary(&self) -> &'static str;
    /// Axioms relied on beyond M1.
    fn axioms(&self) -> Axioms {
        Axioms::default()
    }
    /// Whether the target is correct or a seeded defect (and which mode finds it).
    fn expect(&self) -> Expect {
        Expect::Pass
    }
    /// The ordering rules (`P-XXX-n`) the workload should reach; the coverage report lists
    /// those it never reached.
    fn rules(&self) -> &'static [&'static str] {
        &[]
    }
    /// Persist sites whose removal the mutation check cannot detect, each with the reason, as
    /// (substring, reason). The substring is matched against the site key (`file:line:col`
    /// then `#rule` if named), followed by ` [recovery only]` when only recoveries reach the
    /// site: `"#P-X-3 [recovery only]"` excuses rule P-X-3's persists inside recovery only.
    /// A pattern `FILE@TEXT` instead names the sites of a file ending in `FILE` whose source
    /// line (or the line above) holds `TEXT`, the words of its `ORDER(...)` comment, so that
    /// edits moving the line do not unmatch it.
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Whether a run is reproducible from its seed. A target whose workload runs on several
    /// threads is not: which crash windows its images catch depends on the schedule, so its
    /// mutation check runs an undetected site's mutant again, with other seeds and schedules
    /// (`explore::mutation::UNREPRODUCIBLE_ATTEMPTS`), before calling the site undetected.
    fn reproducible(&self) -> bool {
        true
    }
    /// The fewest images a smoke run must test.
    fn min_images(&self) -> u64 {
        10
    }
    /// Runs the workload; errors are reported as internal errors of the run.
    fn workload(&self, ctx: &mut Ctx<Self::Op>) -> Result<(), String>;
    /// Opens the crash image and recovers.
    fn recover(&self, image: &CrashImage) -> Result<Self::Recovered, String>;
    /// Checks the recovered state against the model; `Err` says what was expected and found.
    fn check(&self, recovered: &Self::Recovered, model: &ModelView<Self::Op>)
    -> Result<(), String>;
}
