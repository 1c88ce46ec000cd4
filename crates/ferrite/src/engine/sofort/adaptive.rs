//! Adaptive recovery's decisions: which secondary structure to rebuild next and how many
//! threads recovery keeps (seed 001 ch. 6, §6.3–6.5; spec `../shared/specs/sofort.md` §7.3–7.5;
//! design `docs/design/sofort.md`, "Adaptive recovery: ranking and thread budget").
//!
//! This module decides; it does not rebuild. The rebuild (one job per structure, one thread
//! per job: the seed's inter-index parallelism, spec §7.4) asks it for the next job and for the
//! thread budget.
//!
//! # Invariants
//! - Benefits are the spec's equations: 6.1 (a workload's benefit is the sum over its
//!   statements, repeats counted), 6.4 (independent), 6.5 (dependent, restart statements: the
//!   marginal gain over what was available when the statement ran), 6.6 (dependent, past
//!   statements: every structure of the fully indexed plan gets the plan's whole gain).
//! - The rank is eq. 6.3 with `α(n) = α^n`. The one departure is the scale of the two workload
//!   terms, a [GAP] of the spec: with [`Normalization::Raw`] they are the spec's sums; with
//!   [`Normalization::Horizon`] (the default) each is the average benefit per statement times
//!   the same horizon `H` (statements expected while recovery runs), so the few restart
//!   statements are not drowned by a long past window and `rebuild(s)` (in the same cost units
//!   as plans) is weighed against the work the structure saves over `H` statements.
//! - Every structure is rebuilt eventually: the rank orders the jobs, it never drops one
//!   (Alg. 6.1); a negative rank only puts a structure last.
//! - Ties are broken by the structure id, so an order is a function of the inputs (tests and
//!   replays see the same order).
//! - The thread budget of adaptive allocation never grows during one recovery: a released
//!   thread stays released (hysteresis, §7.5 [GAP]).
//!
//! # Ordering
//! DRAM only; nothing here is persisted.
//!
//! # Concurrency
//! Plain data: the recovery manager keeps a [`Ranker`] under its own lock.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::str::FromStr;

use crate::storage::StorageError;

/// A secondary structure (an index) by its dense id `0..m`.
pub type StructId = usize;

/// A set of structures (a bit set over [`StructId`]s).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StructSet(Vec<u64>);

impl StructSet {
    /// The empty set.
    pub fn new() -> StructSet {
        StructSet(Vec::new())
    }

    /// The set `{0, …, m − 1}`.
    pub fn all(m: usize) -> StructSet {
        (0..m).collect()
    }

    /// Adds `s`.
    pub fn insert(&mut self, s: StructId) {
        let w = s / 64;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (s % 64);
    }

    /// Removes `s`.
    pub fn remove(&mut self, s: StructId) {
        if let Some(w) = self.0.get_mut(s / 64) {
            *w &= !(1 << (s % 64));
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    /// Whether `s` is in the set.
    pub fn contains(&self, s: StructId) -> bool {
        self.0.get(s / 64).is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    /// This set with `s` added.
    pub fn with(&self, s: StructId) -> StructSet {
        let mut t = self.clone();
        t.insert(s);
        t
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &StructSet) -> bool {
        self.0.iter().enumerate().all(|(i, w)| w & !other.0.get(i).copied().unwrap_or(0) == 0)
    }

    /// The members, ascending.
    pub fn iter(&self) -> impl Iterator<Item = StructId> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| (0..64).filter(move |b| w & (1 << b) != 0).map(move |b| i * 64 + b))
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<StructId> for StructSet {
    fn from_iter<I: IntoIterator<Item = StructId>>(iter: I) -> StructSet {
        let mut s = StructSet::new();
        for x in iter {
            s.insert(x);
        }
        s
    }
}

/// The best plan of a statement over a set of usable structures: its estimated cost and the
/// structures it uses (`S(plan(Q, I))`).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Estimated cost (any unit, the same for every plan and for [`CostModel::rebuild`]).
    pub cost: f64,
    /// The structures the plan uses (a subset of the usable set).
    pub uses: StructSet,
}

/// A what-if optimizer (spec §7.3 [GAP] "how what-if costs are obtained": one call per
/// candidate set). It should be *well behaved*: if `I1 ⊆ I2` and `plan(Q, I2)` uses only
/// members of `I1`, then `plan(Q, I1) = plan(Q, I2)`.
pub trait CostModel {
    /// A statement (its identity: equal statements have equal plans).
    type Stmt;
    /// `plan(Q, I)` and `Cost(Q, I)`: the best plan of `q` using only structures in `usable`.
    fn plan(&self, q: &Self::Stmt, usable: &StructSet) -> Plan;
    /// `rebuild(s)`: the estimated cost of rebuilding `s`, in plan-cost units.
    fn rebuild(&self, s: StructId) -> f64;
}

/// Eq. 6.4: what `s` alone adds on top of the structures available at once (`scm`).
pub fn benefit_indep<M: CostModel>(m: &M, q: &M::Stmt, s: StructId, scm: &StructSet) -> f64 {
    m.plan(q, scm).cost - m.plan(q, &scm.with(s)).cost
}

/// Eq. 6.5: the marginal gain of `s` for a restart statement, given what was usable when it
/// ran (`at_q = S(t_Q)`).
pub fn benefit_dep_restart<M: CostModel>(m: &M, q: &M::Stmt, s: StructId, at_q: &StructSet) -> f64 {
    m.plan(q, at_q).cost - m.plan(q, &at_q.with(s)).cost
}

/// Eq. 6.6: for a past statement, the whole gain of the fully indexed plan (`all = S`) over
/// the SCM-resident set, credited to every structure that plan uses; zero for the others.
pub fn benefit_dep_past<M: CostModel>(
    m: &M,
    q: &M::Stmt,
    s: StructId,
    scm: &StructSet,
    all: &StructSet,
) -> f64 {
    let best = m.plan(q, all);
    if best.uses.contains(s) { m.plan(q, scm).cost - best.cost } else { 0.0 }
}

/// Which benefit the ranking uses (Fig. 6.2 of the seed compares both; they gave the same
/// order for TATP and TPC-C).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BenefitKind {
    /// Eq. 6.4 for past and restart statements.
    Independent,
    /// Eq. 6.6 for past statements, eq. 6.5 for restart statements.
    #[default]
    Dependent,
}

/// How the two workload terms of eq. 6.3 are scaled (spec §7.3 [GAP] "normalization").
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Normalization {
    /// The spec's sums as written (eq. 6.1 over each multiset).
    Raw,
    /// Each term is its average benefit per statement times `horizon` statements: the work a
    /// structure would save over the next `horizon` statements, comparable with `rebuild(s)`.
    Horizon(f64),
}

impl Default for Normalization {
    fn default() -> Self {
        Normalization::Horizon(10_000.0)
    }
}

/// Settings of a [`Ranker`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankSettings {
    /// `α` of `α(n) = α^n` (the seed: 0.99). Clamped into `[0, 1]`.
    pub alpha: f64,
    /// Which benefit.
    pub benefit: BenefitKind,
    /// How the workload terms are scaled.
    pub normalization: Normalization,
}

impl Default for RankSettings {
    fn default() -> Self {
        RankSettings {
            alpha: 0.99,
            benefit: BenefitKind::default(),
            normalization: Normalization::default(),
        }
    }
}

/// The ranking of structures still to rebuild (eqs. 6.2 and 6.3, Alg. 6.2).
///
/// The past workload's benefit is computed once, at construction. A restart statement adds its
/// benefit (eq. 6.5 or 6.4) to every structure not yet built at the moment it is recorded,
/// which is eq. 6.1's sum over `WoRestart(t)` kept incrementally; the plan costs it needs are
/// cached per statement until the usable set changes.
#[derive(Debug)]
pub struct Ranker<M: CostModel>
where
    M::Stmt: Clone + Eq + Hash,
{
    model: M,
    settings: RankSettings,
    /// `S_SCM`: usable at once.
    scm: StructSet,
    /// `S(t)`: usable now.
    usable: StructSet,
    /// The number of structures.
    m: usize,
    past: Vec<f64>,
    past_statements: f64,
    restart: Vec<f64>,
    /// `n = |WoRestart(t)|`.
    n: u64,
    rebuild: Vec<f64>,
    /// Per restart statement: its benefit for each structure, valid while `usable` holds.
    cache: HashMap<M::Stmt, Vec<f64>>,
    /// Structures referenced by some statement's fully indexed plan (the unranked order's
    /// preference, Table 6.1 `¬rk`).
    referenced: StructSet,
}

impl<M: CostModel> Ranker<M>
where
    M::Stmt: Clone + Eq + Hash,
{
    /// A ranker for `m` structures of which `scm` are usable at once, with the past workload
    /// `past` (statements with their frequencies, `WoPast`).
    pub fn new(
        model: M,
        m: usize,
        scm: StructSet,
        past: &[(M::Stmt, u64)],
        settings: RankSettings,
    ) -> Ranker<M> {
        let all = StructSet::all(m);
        let mut benefit = vec![0.0; m];
        let mut referenced = StructSet::new();
        let mut statements = 0.0;
        for (q, count) in past {
            let count = *count as f64;
            statements += count;
            for s in model.plan(q, &all).uses.iter().filter(|&s| s < m) {
                referenced.insert(s);
            }
            for (s, b) in benefit.iter_mut().enumerate() {
                if scm.contains(s) {
                    continue;
                }
                *b += count
                    * match settings.benefit {
                        BenefitKind::Independent => benefit_indep(&model, q, s, &scm),
                        BenefitKind::Dependent => benefit_dep_past(&model, q, s, &scm, &all),
                    };
            }
        }
        let rebuild = (0..m).map(|s| model.rebuild(s)).collect();
        let settings = RankSettings { alpha: settings.alpha.clamp(0.0, 1.0), ..settings };
        Ranker {
            usable: scm.clone(),
            model,
            settings,
            scm,
            m,
            past: benefit,
            past_statements: statements,
            restart: vec![0.0; m],
            n: 0,
            rebuild,
            cache: HashMap::new(),
            referenced,
        }
    }

    /// Records a statement run since restart, against the structures usable now (`S(t_Q)`).
    pub fn record_restart(&mut self, q: &M::Stmt) {
        self.n += 1;
        if !self.cache.contains_key(q) {
            let all = StructSet::all(self.m);
            let mut row = vec![0.0; self.m];
            for (s, b) in row.iter_mut().enumerate() {
                if self.usable.contains(s) {
                    continue;
                }
                *b = match self.settings.benefit {
                    BenefitKind::Independent => benefit_indep(&self.model, q, s, &self.scm),
                    BenefitKind::Dependent => benefit_dep_restart(&self.model, q, s, &self.usable),
                };
            }
            for s in self.model.plan(q, &all).uses.iter().filter(|&s| s < self.m) {
                self.referenced.insert(s);
            }
            self.cache.insert(q.clone(), row);
        }
        let row = &self.cache[q];
        for (acc, b) in self.restart.iter_mut().zip(row) {
            *acc += b;
        }
    }

    /// Marks `s` rebuilt (usable from now on).
    pub fn mark_built(&mut self, s: StructId) {
        if s < self.m && !self.usable.contains(s) {
            self.usable.insert(s);
            self.cache.clear();
        }
    }

    /// `S(t)`.
    pub fn usable(&self) -> &StructSet {
        &self.usable
    }

    /// `n = |WoRestart(t)|`.
    pub fn restart_statements(&self) -> u64 {
        self.n
    }

    /// `α(n) = α^n`.
    pub fn alpha_n(&self) -> f64 {
        self.settings.alpha.powf(self.n as f64)
    }

    /// The past and restart workload terms of `s` after normalization (before `α`).
    fn terms(&self, s: StructId) -> (f64, f64) {
        match self.settings.normalization {
            Normalization::Raw => (self.past[s], self.restart[s]),
            Normalization::Horizon(h) => {
                let avg = |sum: f64, count: f64| if count > 0.0 { sum / count } else { 0.0 };
                (
                    h * avg(self.past[s], self.past_statements),
                    h * avg(self.restart[s], self.n as f64),
                )
            }
        }
    }

    /// The workload benefit of `s` now: `α(n)·Benefit(s, WoPast) + (1 − α(n))·Benefit(s,
    /// WoRestart(t))` (normalized), without the rebuild cost.
    pub fn benefit(&self, s: StructId) -> f64 {
        if s >= self.m {
            return 0.0;
        }
        let (past, restart) = self.terms(s);
        let a = self.alpha_n();
        a * past + (1.0 - a) * restart
    }

    /// `rank(s, t)`, eq. 6.3 (eq. 6.2 before the first restart statement).
    pub fn rank(&self, s: StructId) -> f64 {
        if s >= self.m {
            return f64::NEG_INFINITY;
        }
        self.benefit(s) - self.rebuild[s]
    }

    /// Alg. 6.2: up to `k` structures not yet usable, best rank first (ties: lower id first).
    pub fn next_to_rebuild(&self, k: usize) -> Vec<StructId> {
        let mut v: Vec<(f64, StructId)> =
            (0..self.m).filter(|&s| !self.usable.contains(s)).map(|s| (self.rank(s), s)).collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().take(k).map(|(_, s)| s).collect()
    }

    /// The unranked order (Table 6.1 `¬rk`): structures some statement's plan references
    /// first, then the rest, each group by id.
    pub fn next_unranked(&self, k: usize) -> Vec<StructId> {
        let pending = (0..self.m).filter(|&s| !self.usable.contains(s));
        let (mut first, rest): (Vec<_>, Vec<_>) =
            pending.partition(|&s| self.referenced.contains(s));
        first.extend(rest);
        first.truncate(k);
        first
    }
}

/// A recovery configuration of the seed's Table 6.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `open` returns once every secondary structure is rebuilt, with `threads` rebuilding
    /// (the seed's `¬rk.Q0.R8`).
    Synchronous {
        /// Rebuild threads.
        threads: u32,
    },
    /// `rk.Qx.Rz` (ranked) or `¬rk.Qx.Rz` (unranked): `z` rebuild threads for the whole
    /// rebuild, `x` the cores left to queries (advisory: queries run on the client's threads).
    Static {
        /// Whether jobs are ordered by rank.
        ranked: bool,
        /// `x`.
        query_cores: u32,
        /// `z`.
        recovery_threads: u32,
    },
    /// `rk.Q^ad.Rz^ad`: ranked, starting with `z` rebuild threads and releasing them as the
    /// best remaining benefit falls ([`ReleasePolicy`]).
    Adaptive {
        /// `z`.
        recovery_threads: u32,
    },
}

impl Strategy {
    /// The rebuild threads at the start.
    pub fn initial_threads(self) -> u32 {
        match self {
            Strategy::Synchronous { threads } => threads,
            Strategy::Static { recovery_threads, .. } | Strategy::Adaptive { recovery_threads } => {
                recovery_threads
            }
        }
    }

    /// Whether jobs are ordered by rank.
    pub fn ranked(self) -> bool {
        match self {
            Strategy::Synchronous { .. } => false,
            Strategy::Static { ranked, .. } => ranked,
            Strategy::Adaptive { .. } => true,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Strategy::Synchronous { threads } => write!(f, "sync.R{threads}"),
            Strategy::Static { ranked, query_cores, recovery_threads } => {
                let neg = if ranked { "" } else { "!" };
                write!(f, "{neg}rk.Q{query_cores}.R{recovery_threads}")
            }
            Strategy::Adaptive { recovery_threads } => write!(f, "rk.Qad.R{recovery_threads}ad"),
        }
    }
}

/// The largest thread count a label may ask for.
pub const MAX_RECOVERY_THREADS: u32 = 256;

impl FromStr for Strategy {
    type Err = StorageError;

    /// Parses a Table 6.1 label: `rk.Q2.R6`, `!rk.Q2.R6` (or `¬rk.…`, `nrk.…`),
    /// `rk.Qad.R6ad` (or `rk.Q^ad.R6^ad`), `sync.R8`; `…Q0…` with `!rk` is synchronous, as in
    /// the seed. Thread counts are 1..=[`MAX_RECOVERY_THREADS`] (`x` may be 0).
    fn from_str(label: &str) -> Result<Strategy, StorageError> {
        let bad = |why: &str| {
            StorageError::InvalidArgument(format!("recovery strategy {label:?}: {why}"))
        };
        let count = |s: &str, min: u32| -> Result<u32, StorageError> {
            let n: u32 = s.parse().map_err(|_| bad("a thread count is not a number"))?;
            if (min..=MAX_RECOVERY_THREADS).contains(&n) {
                Ok(n)
            } else {
                Err(bad(&format!("thread count {n} is outside {min}..={MAX_RECOVERY_THREADS}")))
            }
        };
        let l = label.trim().replace('^', "");
        if let Some(z) = l.strip_prefix("sync.R") {
            return Ok(Strategy::Synchronous { threads: count(z, 1)? });
        }
        let (ranked, rest) = if let Some(r) = l.strip_prefix("rk.") {
            (true, r)
        } else if let Some(r) = ["!rk.", "¬rk.", "nrk."].iter().find_map(|p| l.strip_prefix(p)) {
            (false, r)
        } else {
            return Err(bad("expected rk., !rk. or sync. first"));
        };
        let (q, r) = rest.split_once('.').ok_or_else(|| bad("expected Q<x>.R<z>"))?;
        let q = q.strip_prefix('Q').ok_or_else(|| bad("expected Q<x>"))?;
        let r = r.strip_prefix('R').ok_or_else(|| bad("expected R<z>"))?;
        match (q, r.strip_suffix("ad")) {
            ("ad", Some(z)) if ranked => Ok(Strategy::Adaptive { recovery_threads: count(z, 1)? }),
            ("ad", Some(_)) => Err(bad("adaptive allocation is always ranked")),
            ("ad", None) | (_, Some(_)) => Err(bad("Q^ad goes with R^ad")),
            (x, None) => {
                let query_cores = count(x, 0)?;
                let recovery_threads = count(r, 1)?;
                if query_cores == 0 && !ranked {
                    Ok(Strategy::Synchronous { threads: recovery_threads })
                } else {
                    Ok(Strategy::Static { ranked, query_cores, recovery_threads })
                }
            }
        }
    }
}

/// How adaptive allocation hands rebuild threads back to queries (spec §7.5 [GAP]: the seed
/// says only "the lower the best remaining benefit, the more cores are released").
///
/// With `z` threads at the start and `B0` the best benefit of a pending structure at the
/// start, a rebuild wanting a thread may keep `ceil(z · B/B0)` threads, where `B` is the best
/// benefit of a structure still pending; below `floor · B0` none stays dedicated and the rest
/// is rebuilt by one thread at idle priority (built "whenever a CPU is idle"). The budget never
/// grows again (hysteresis).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReleasePolicy {
    /// The share of `B0` under which no thread stays dedicated.
    pub floor: f64,
}

impl Default for ReleasePolicy {
    fn default() -> Self {
        ReleasePolicy { floor: 0.05 }
    }
}

/// A thread budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Threads rebuilding at normal priority.
    pub dedicated: u32,
    /// Whether one more thread rebuilds at idle priority (after every dedicated one is
    /// released, so the rebuild still ends).
    pub idle: bool,
}

/// Tracks adaptive allocation over one recovery.
#[derive(Clone, Debug)]
pub struct Allocator {
    policy: ReleasePolicy,
    z: u32,
    b0: Option<f64>,
    current: u32,
}

impl Allocator {
    /// A budget of `z` threads (at least one).
    pub fn new(z: u32, policy: ReleasePolicy) -> Allocator {
        let z = z.max(1);
        Allocator { policy, z, b0: None, current: z }
    }

    /// The budget when the best pending benefit is `best` (`None`: nothing pending). The
    /// first call fixes `B0`.
    pub fn budget(&mut self, best: Option<f64>) -> Allocation {
        let Some(best) = best else {
            self.current = 0;
            return Allocation { dedicated: 0, idle: false };
        };
        let b0 = *self.b0.get_or_insert(best.max(0.0));
        let want = if b0 <= 0.0 || best >= b0 {
            self.z
        } else if best <= self.policy.floor * b0 {
            0
        } else {
            // best/b0 is in (floor, 1): at least one thread.
            ((f64::from(self.z) * best / b0).ceil() as u32).clamp(1, self.z)
        };
        self.current = self.current.min(want);
        Allocation { dedicated: self.current, idle: self.current == 0 }
    }
}

/// A statement class of the `Database` API, as the restart and past workloads count them: what
/// the optimizer needs to cost it (a table and, for a scan, its access path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stmt {
    /// A primary-key lookup of `table`.
    Get {
        /// The table's position in the schema.
        table: u32,
    },
    /// A scan of `table` on its primary index (`index: None`) or a secondary index.
    Scan {
        /// The table.
        table: u32,
        /// The index (position among the table's secondary indexes), `None` for the primary.
        index: Option<u32>,
    },
    /// An insert into `table` (probes the primary key and every unique index).
    Insert {
        /// The table.
        table: u32,
    },
    /// An update or delete by primary key (a probe, and the unique probes of an update).
    Write {
        /// The table.
        table: u32,
    },
}

/// The shape of one table as the cost model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TableShape {
    /// Rows in use (live versions and garbage awaiting collection).
    pub rows: u64,
    /// The structure id of the primary index.
    pub primary: StructId,
    /// Per secondary index: its structure id and whether it is unique.
    pub secondary: Vec<(StructId, bool)>,
}

/// Per-operation costs, in nanoseconds (a plan's cost is its estimated time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UnitCosts {
    /// One level of an index descent.
    pub probe_level: f64,
    /// Reading and testing one row of a table scan (the access path without the index).
    pub scan_row: f64,
    /// Adding one row to an index being rebuilt.
    pub build_row: f64,
}

impl Default for UnitCosts {
    /// Orders of magnitude measured on the DRAM index (docs/benchmarks.md, SOFORT): a cached
    /// descent level ≈ 15 ns, a row's key read from PM and compared ≈ 40 ns, an index insert
    /// during the rebuild ≈ 150 ns per row.
    fn default() -> Self {
        UnitCosts { probe_level: 15.0, scan_row: 40.0, build_row: 150.0 }
    }
}

/// The cost model of SOFORT's statements: an access through a usable index costs a descent
/// (`probe_level · log2(rows)`); without it, a scan of the table's rows. A plan uses an index
/// only when it is usable, so the model is well behaved.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeCosts {
    /// The tables, by position.
    pub tables: Vec<TableShape>,
    /// The unit costs.
    pub units: UnitCosts,
}

impl ShapeCosts {
    /// The cost of reaching rows of `t` through `s`, and whether `s` is used.
    fn access(&self, t: &TableShape, s: StructId, usable: &StructSet) -> (f64, bool) {
        let n = t.rows.max(1) as f64;
        if usable.contains(s) {
            (self.units.probe_level * (n.log2() + 1.0), true)
        } else {
            (self.units.scan_row * n, false)
        }
    }

    fn structures(&self) -> impl Iterator<Item = (StructId, &TableShape)> {
        self.tables.iter().flat_map(|t| {
            std::iter::once((t.primary, t)).chain(t.secondary.iter().map(move |&(s, _)| (s, t)))
        })
    }
}

impl CostModel for ShapeCosts {
    type Stmt = Stmt;

    fn plan(&self, q: &Stmt, usable: &StructSet) -> Plan {
        let table = match *q {
            Stmt::Get { table }
            | Stmt::Scan { table, .. }
            | Stmt::Insert { table }
            | Stmt::Write { table } => table,
        };
        let Some(t) = self.tables.get(table as usize) else {
            return Plan { cost: 0.0, uses: StructSet::new() };
        };
        // The structures the statement probes.
        let probes: Vec<StructId> = match *q {
            Stmt::Get { .. } | Stmt::Write { .. } => vec![t.primary],
            Stmt::Scan { index: None, .. } => vec![t.primary],
            Stmt::Scan { index: Some(i), .. } => {
                t.secondary.get(i as usize).map(|&(s, _)| s).into_iter().collect()
            }
            Stmt::Insert { .. } => std::iter::once(t.primary)
                .chain(t.secondary.iter().filter(|&&(_, unique)| unique).map(|&(s, _)| s))
                .collect(),
        };
        let mut plan = Plan { cost: 0.0, uses: StructSet::new() };
        for s in probes {
            let (cost, used) = self.access(t, s, usable);
            plan.cost += cost;
            if used {
                plan.uses.insert(s);
            }
        }
        plan
    }

    fn rebuild(&self, s: StructId) -> f64 {
        self.structures()
            .find(|&(id, _)| id == s)
            .map_or(0.0, |(_, t)| self.units.build_row * t.rows as f64)
    }
}

/// The restart workload as the engine reports it, and the ranker it feeds while a background
/// rebuild runs (shared by the store's transactions and the rebuild's workers).
///
/// Inactive (no ranked rebuild running) it costs a transaction one relaxed load per statement.
#[derive(Debug, Default)]
pub struct RestartWorkload {
    active: std::sync::atomic::AtomicBool,
    planner: std::sync::Mutex<Option<Planner>>,
}

/// The ranking state of one ranked rebuild.
#[derive(Debug)]
pub struct Planner {
    /// The ranker over the store's indexes.
    pub ranker: Ranker<ShapeCosts>,
    /// Adaptive allocation (`None`: static).
    pub alloc: Option<Allocator>,
}

impl RestartWorkload {
    /// Starts ranking with `planner` (statements are recorded from now on).
    pub fn start(&self, planner: Planner) {
        *self.lock() = Some(planner);
        self.active.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Stops recording (the rebuild ended).
    pub fn stop(&self) {
        self.active.store(false, std::sync::atomic::Ordering::Release);
        *self.lock() = None;
    }

    /// Records a statement of the restart workload (eq. 6.5's `S(t_Q)` is the usable set now).
    pub fn note(&self, q: Stmt) {
        if self.active.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(p) = self.lock().as_mut()
        {
            p.ranker.record_restart(&q);
        }
    }

    /// Runs `f` on the planner, if a ranked rebuild runs.
    pub fn with<R>(&self, f: impl FnOnce(&mut Planner) -> R) -> Option<R> {
        self.lock().as_mut().map(f)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Planner>> {
        self.planner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy optimizer over three structures: statement `Get` uses index 0 (cost 1 with it,
    /// 100 without); `Join` needs 1 and 2 together (cost 2 with both, 50 otherwise: one alone
    /// does not help, so only the dependent benefit ties them); `Scan` uses nothing.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum Q {
        Get,
        Join,
        Scan,
    }

    struct Toy {
        rebuild: [f64; 3],
    }

    impl CostModel for Toy {
        type Stmt = Q;
        fn plan(&self, q: &Q, usable: &StructSet) -> Plan {
            match q {
                Q::Get if usable.contains(0) => Plan { cost: 1.0, uses: [0].into_iter().collect() },
                Q::Get => Plan { cost: 100.0, uses: StructSet::new() },
                Q::Join if usable.contains(1) && usable.contains(2) => {
                    Plan { cost: 2.0, uses: [1, 2].into_iter().collect() }
                }
                Q::Join => Plan { cost: 50.0, uses: StructSet::new() },
                Q::Scan => Plan { cost: 10.0, uses: StructSet::new() },
            }
        }
        fn rebuild(&self, s: StructId) -> f64 {
            self.rebuild[s]
        }
    }

    fn toy() -> Toy {
        Toy { rebuild: [5.0, 3.0, 4.0] }
    }

    #[test]
    fn set_operations() {
        let mut s: StructSet = [3, 70].into_iter().collect();
        assert!(s.contains(3) && s.contains(70) && !s.contains(4));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3, 70]);
        assert!(StructSet::new().is_subset(&s));
        assert!(!StructSet::all(4).is_subset(&s));
        s.remove(70);
        assert_eq!(s, [3].into_iter().collect());
        assert_eq!(s.len(), 1);
        s.remove(3);
        assert!(s.is_empty());
    }

    #[test]
    fn the_benefit_equations() {
        let m = toy();
        let none = StructSet::new();
        let all = StructSet::all(3);
        // 6.4: one structure alone.
        assert_eq!(benefit_indep(&m, &Q::Get, 0, &none), 99.0);
        assert_eq!(benefit_indep(&m, &Q::Join, 1, &none), 0.0);
        // 6.6: both co-used structures get the whole gain of the fully indexed plan.
        assert_eq!(benefit_dep_past(&m, &Q::Join, 1, &none, &all), 48.0);
        assert_eq!(benefit_dep_past(&m, &Q::Join, 2, &none, &all), 48.0);
        assert_eq!(benefit_dep_past(&m, &Q::Join, 0, &none, &all), 0.0);
        // 6.5: the marginal gain given what was usable when the statement ran.
        let with1: StructSet = [1].into_iter().collect();
        assert_eq!(benefit_dep_restart(&m, &Q::Join, 2, &with1), 48.0);
        assert_eq!(benefit_dep_restart(&m, &Q::Join, 2, &none), 0.0);
        assert_eq!(benefit_dep_restart(&m, &Q::Scan, 0, &none), 0.0);
    }

    #[test]
    fn initial_rank_is_past_benefit_minus_rebuild() {
        let raw = RankSettings { normalization: Normalization::Raw, ..Default::default() };
        let r = Ranker::new(toy(), 3, StructSet::new(), &[(Q::Get, 2), (Q::Join, 1)], raw);
        // 6.1 over the multiset, 6.2: Get twice (99 each), Join once (48 to 1 and to 2).
        assert_eq!(r.rank(0), 2.0 * 99.0 - 5.0);
        assert_eq!(r.rank(1), 48.0 - 3.0);
        assert_eq!(r.rank(2), 48.0 - 4.0);
        assert_eq!(r.next_to_rebuild(3), vec![0, 1, 2]);
        assert_eq!(r.next_to_rebuild(1), vec![0]);
    }

    #[test]
    fn restart_statements_shift_the_weight_by_alpha_to_the_n() {
        let raw =
            RankSettings { normalization: Normalization::Raw, alpha: 0.5, ..Default::default() };
        let mut r = Ranker::new(toy(), 3, StructSet::new(), &[(Q::Get, 10)], raw);
        assert_eq!(r.next_to_rebuild(3)[0], 0);
        // The restart workload joins only; index 1 is built first (say by an unranked
        // thread), so the joins' marginal gain goes to index 2.
        r.mark_built(1);
        for _ in 0..4 {
            r.record_restart(&Q::Join);
        }
        let a = 0.5f64.powi(4);
        assert_eq!(r.alpha_n(), a);
        assert_eq!(r.rank(2), a * 0.0 + (1.0 - a) * 4.0 * 48.0 - 4.0);
        assert_eq!(r.rank(0), a * 10.0 * 99.0 + (1.0 - a) * 0.0 - 5.0);
        assert!(r.rank(2) > r.rank(0), "after 4 joins the join's index leads");
        assert_eq!(r.next_to_rebuild(3), vec![2, 0]);
    }

    #[test]
    fn horizon_normalization_weighs_averages() {
        let h = RankSettings {
            normalization: Normalization::Horizon(100.0),
            alpha: 0.0,
            ..Default::default()
        };
        let mut r = Ranker::new(toy(), 3, StructSet::new(), &[(Q::Get, 1_000_000)], h);
        r.record_restart(&Q::Get);
        r.record_restart(&Q::Scan);
        // α^n = 0 for n > 0: only the restart term, the average 99/2 per statement × 100.
        assert_eq!(r.rank(0), 100.0 * 99.0 / 2.0 - 5.0);
        assert_eq!(r.rank(1), -3.0, "an unused structure's rank is −rebuild(s)");
    }

    #[test]
    fn useless_structures_come_last_but_are_listed() {
        let r = Ranker::new(toy(), 3, StructSet::new(), &[(Q::Scan, 7)], RankSettings::default());
        // Nothing helps a scan: ranks are −rebuild, cheapest rebuild first; all three listed.
        assert_eq!(r.next_to_rebuild(10), vec![1, 2, 0]);
        assert_eq!(r.next_unranked(10), vec![0, 1, 2]);
    }

    #[test]
    fn unranked_order_prefers_referenced_structures() {
        let r = Ranker::new(toy(), 3, StructSet::new(), &[(Q::Join, 1)], RankSettings::default());
        assert_eq!(r.next_unranked(3), vec![1, 2, 0]);
    }

    #[test]
    fn scm_structures_are_never_ranked() {
        let scm: StructSet = [0].into_iter().collect();
        let r = Ranker::new(toy(), 3, scm, &[(Q::Get, 3)], RankSettings::default());
        assert_eq!(r.next_to_rebuild(3), vec![1, 2]);
        assert!(r.usable().contains(0));
    }

    #[test]
    fn labels_of_table_6_1() {
        for (label, want) in [
            ("rk.Q2.R6", Strategy::Static { ranked: true, query_cores: 2, recovery_threads: 6 }),
            ("!rk.Q2.R6", Strategy::Static { ranked: false, query_cores: 2, recovery_threads: 6 }),
            ("¬rk.Q2.R6", Strategy::Static { ranked: false, query_cores: 2, recovery_threads: 6 }),
            ("rk.Q0.R8", Strategy::Static { ranked: true, query_cores: 0, recovery_threads: 8 }),
            ("¬rk.Q0.R8", Strategy::Synchronous { threads: 8 }),
            ("rk.Q^ad.R6^ad", Strategy::Adaptive { recovery_threads: 6 }),
            ("rk.Qad.R2ad", Strategy::Adaptive { recovery_threads: 2 }),
            ("sync.R1", Strategy::Synchronous { threads: 1 }),
        ] {
            let got: Strategy = label.parse().unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(got, want, "{label}");
            assert_eq!(got.to_string().parse::<Strategy>().ok(), Some(got), "round trip {label}");
        }
        for bad in [
            "",
            "rk",
            "rk.Q2",
            "rk.Q2.R0",
            "rk.Qx.R2",
            "!rk.Qad.R2ad",
            "rk.Qad.R2",
            "rk.Q2.R2ad",
            "rk.Q1.R999",
            "sync.R0",
        ] {
            assert!(
                matches!(bad.parse::<Strategy>(), Err(StorageError::InvalidArgument(_))),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn adaptive_budget_only_shrinks() {
        let mut a = Allocator::new(4, ReleasePolicy::default());
        assert_eq!(a.budget(Some(100.0)), Allocation { dedicated: 4, idle: false });
        assert_eq!(a.budget(Some(60.0)).dedicated, 3);
        // A better structure appearing later does not bring threads back.
        assert_eq!(a.budget(Some(100.0)).dedicated, 3);
        assert_eq!(a.budget(Some(10.0)).dedicated, 1);
        assert_eq!(a.budget(Some(5.0)), Allocation { dedicated: 0, idle: true });
        assert_eq!(a.budget(None), Allocation { dedicated: 0, idle: false });
    }

    #[test]
    fn adaptive_budget_with_no_benefit_keeps_its_threads() {
        // Nothing has a benefit at the start (B0 = 0): nothing to release for; the rebuild
        // keeps its threads (it is synchronous recovery in effect, the seed's worst case).
        let mut a = Allocator::new(2, ReleasePolicy::default());
        assert_eq!(a.budget(Some(-3.0)).dedicated, 2);
        assert_eq!(a.budget(Some(0.0)).dedicated, 2);
    }
    fn shop() -> ShapeCosts {
        // Table 0: 1024 rows, primary 0, a unique secondary 1 and a plain one 2;
        // table 1: 16 rows, primary 3.
        ShapeCosts {
            tables: vec![
                TableShape { rows: 1024, primary: 0, secondary: vec![(1, true), (2, false)] },
                TableShape { rows: 16, primary: 3, secondary: vec![] },
            ],
            units: UnitCosts { probe_level: 1.0, scan_row: 1.0, build_row: 2.0 },
        }
    }

    #[test]
    fn shape_costs_probe_or_scan() {
        let m = shop();
        let all = StructSet::all(4);
        let none = StructSet::new();
        let get = m.plan(&Stmt::Get { table: 0 }, &all);
        assert_eq!((get.cost, get.uses.iter().collect::<Vec<_>>()), (11.0, vec![0]));
        assert_eq!(m.plan(&Stmt::Get { table: 0 }, &none).cost, 1024.0);
        // An insert probes the primary and the unique index, not the plain one.
        let ins = m.plan(&Stmt::Insert { table: 0 }, &all);
        assert_eq!((ins.cost, ins.uses.iter().collect::<Vec<_>>()), (22.0, vec![0, 1]));
        let scan = m.plan(&Stmt::Scan { table: 0, index: Some(1) }, &none);
        assert_eq!(scan.cost, 1024.0);
        assert!(scan.uses.is_empty());
        assert_eq!(m.plan(&Stmt::Scan { table: 0, index: Some(9) }, &all).cost, 0.0);
        assert_eq!(m.plan(&Stmt::Get { table: 7 }, &all).cost, 0.0, "unknown table: no plan");
        assert_eq!(m.rebuild(2), 2048.0);
        assert_eq!(m.rebuild(3), 32.0);
        assert_eq!(m.rebuild(99), 0.0);
    }

    #[test]
    fn shape_costs_are_well_behaved() {
        // For every statement and every pair I1 ⊆ I2 with plan(Q, I2) using only I1:
        // plan(Q, I1) = plan(Q, I2) (the assumption eqs. 6.5/6.6 rest on).
        let m = shop();
        let stmts = [
            Stmt::Get { table: 0 },
            Stmt::Get { table: 1 },
            Stmt::Scan { table: 0, index: None },
            Stmt::Scan { table: 0, index: Some(0) },
            Stmt::Scan { table: 0, index: Some(1) },
            Stmt::Insert { table: 0 },
            Stmt::Write { table: 1 },
        ];
        let sets: Vec<StructSet> =
            (0u32..16).map(|b| (0..4).filter(|i| b & (1 << i) != 0).collect()).collect();
        for q in &stmts {
            for i1 in &sets {
                for i2 in sets.iter().filter(|i2| i1.is_subset(i2)) {
                    let p2 = m.plan(q, i2);
                    if p2.uses.is_subset(i1) {
                        assert_eq!(m.plan(q, i1), p2, "{q:?} {i1:?} {i2:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_insert_heavy_past_ranks_the_unique_index_with_the_primary() {
        let m = shop();
        let past = [(Stmt::Insert { table: 0 }, 100), (Stmt::Get { table: 1 }, 1)];
        let r = Ranker::new(m, 4, StructSet::new(), &past, RankSettings::default());
        let order = r.next_to_rebuild(4);
        assert_eq!(&order[..2], &[0, 1], "the insert's two indexes first: {order:?}");
        assert_eq!(r.benefit(0), r.benefit(1), "co-used: the same dependent benefit");
        assert_eq!(r.benefit(2), 0.0, "no statement uses the plain index");
    }
}
