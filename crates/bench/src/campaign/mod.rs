//! The kill -9 campaign (`ferrite campaign`): a child process runs an OLTP workload on a
//! file-backed Ferrite database and acknowledges its commits through a pipe; the parent kills
//! it with SIGKILL at seeded moments, reopens the database, verifies that nothing acknowledged
//! is lost and that the workload's invariants hold, and repeats.
//!
//! # Protocol (child → parent, one line each on the child's stdout)
//! Every line starts with [`TAG`]. Transactions carry sequence numbers `seq` that are unique
//! over the whole campaign (the parent hands each child the next unused one) and increase in
//! commit order (the child is single-threaded: one transaction at a time).
//! - `open <open_ns> <first_ns>`: the child's `open` took `open_ns`; its first transaction
//!   committed `first_ns` after the start of `open`.
//! - `intent <seq> <writes>`: written inside the transaction, after its operations ran and
//!   before it commits (again on each retry).
//! - `ack <seq> <writes>`: written after commit returned. A read-only transaction's ack names
//!   no write.
//!
//! A write ([`Write`]) names a table, a primary key and what the row must be after the
//! transaction: absent, or present with some columns equal to given values. Workloads tag the
//! values they write with `seq` wherever the specification leaves the value free (TATP's
//! `vlr_location`, a call forwarding's `numberx`), so a stale value is recognised.
//!
//! # Verification after each kill (or the child's own exit)
//! Let `model` map every key named by an acknowledged write to the last acknowledged write to
//! it (its `seq` and expectation), over all rounds. Let `pending` be the writes of the last
//! `intent` not followed by its `ack`: the one transaction that may or may not have committed
//! (the child runs one at a time, and writes its intent before committing, so a transaction
//! without an intent line wrote nothing durable). Then, on the reopened database:
//! 1. it opens (recovery), and the engine's own check ([`OltpSubject::engine_check`]) passes;
//! 2. in-flight transaction: if every pending write holds, it is counted as committed and
//!    applied to `model`; else every pending key already in `model` must still hold its model
//!    expectation (the transaction did not commit); anything else is a partial transaction,
//!    an invariant violation;
//! 3. no loss: every key of `model` (not just applied from `pending`) holds its expectation;
//!    a key that does not is a **loss**, reported with its table, key, the `seq` of the
//!    acknowledged write and what was found;
//! 4. the workload's invariants hold ([`CampaignWorkload::invariants`]; TATP's row counts with
//!    call forwarding = load + applied inserts − applied deletes, every call forwarding under
//!    its facility; TPC-C's consistency conditions 1–4 and row counts from the applied
//!    writes, [`tpcc`]).
//!
//! "Holds" compares only the columns a write names. A value not tagged with `seq` (TATP's
//! `bit_1`, `data_a`) can equal an older one, so a lost write of it can go unnoticed; tagged
//! values and presence/absence cannot.
//!
//! # What it does not prove
//! It kills a process, not the machine: stores in the page cache survive, so it tests the
//! engine's recovery from any instruction boundary of the process and its commit ordering as
//! far as a process crash can observe (not missing flushes or fences: the crash-simulation
//! tester does that, `docs/design/crash-testing.md`). It samples kill points; it does not
//! enumerate them. Writes it does not track (loaded rows never written, read results) are
//! covered only by the invariants and the engine's check.
//!
//! # Ordering and concurrency
//! The child acknowledges only after commit returned (durable on return for the persistent
//! engines), and its intent precedes its commit: the two orderings the rules above rely on.
//! The child runs one session on one thread. The parent is single-threaded: it reads the
//! child's lines until the chosen ack count, kills, reads what remains (a last line without
//! its newline is dropped: the child died writing it), waits for the child, then verifies.
//!
//! # Time
//! Kill moments are chosen by acknowledgement count (seeded, deterministic), then the parent
//! optionally sleeps a seeded 0..`jitter_us` µs before `SIGKILL` so the kill also lands inside
//! later transactions; no verdict depends on where the kill landed. Open times are measured,
//! never asserted: the parent's open after a kill (recovery) and from its start to the commit
//! of a read-only probe transaction (the first transaction after the crash), the child's open
//! of the database the parent closed, and from its start to the child's first commit.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{EngineKind, Value};

use crate::keys::Rng;
use crate::oltp::{
    self, OltpOps, OltpSession, OltpSubject, OltpWorkload, Range, Row, Schema, TableId,
};
use crate::subject::{EngineId, LatencyModel, OpError, SubjectSetup, TxnKind};
use crate::workload::{Check, Distribution, WorkloadParams};

pub mod tatp;
pub mod tpcc;

/// What starts every protocol line.
pub const TAG: &str = "FERRITE-CAMPAIGN ";

/// A campaign error (not a verdict: losses and violations are in the [`Summary`]).
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// Bad parameters.
    #[error("{0}")]
    Usage(String),
    /// The engine failed outside a verification.
    #[error("engine: {0}")]
    Engine(#[from] OpError),
    /// Spawning, killing or reading the child, or the file system.
    #[error("{0}")]
    Io(String),
    /// A protocol line that does not parse, or a child that broke the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// What a row must be after a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// No row with the key.
    Absent,
    /// A row with the key whose named columns hold these values (others are not compared).
    Present(Vec<(usize, Value)>),
}

/// One row a transaction wrote and what it must be afterwards.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// Table.
    pub table: TableId,
    /// Primary key.
    pub key: Vec<i64>,
    /// The row afterwards.
    pub expect: Expect,
}

impl Write {
    /// Whether `found` (the row, `None` if absent) meets the expectation.
    pub fn holds(&self, found: Option<&Row>) -> bool {
        match (&self.expect, found) {
            (Expect::Absent, None) => true,
            (Expect::Present(cols), Some(row)) => {
                cols.iter().all(|(c, v)| row.get(*c).is_some_and(|x| x == v))
            }
            _ => false,
        }
    }

    fn encode(&self, out: &mut String) -> Result<(), CampaignError> {
        use fmt::Write as _;
        let key: Vec<String> = self.key.iter().map(i64::to_string).collect();
        let _ = write!(out, "{}:{}:", self.table, key.join(","));
        match &self.expect {
            Expect::Absent => out.push('-'),
            Expect::Present(cols) => {
                out.push('+');
                for (i, (c, v)) in cols.iter().enumerate() {
                    if i > 0 {
                        out.push('&');
                    }
                    let _ = match v {
                        Value::I64(x) => write!(out, "{c}=i{x}"),
                        Value::Str(s) if s.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                            write!(out, "{c}=s{s}")
                        }
                        other => {
                            return Err(CampaignError::Protocol(format!(
                                "a write names {other:?}: only i64 and alphanumeric strings"
                            )));
                        }
                    };
                }
            }
        }
        Ok(())
    }

    fn decode(s: &str) -> Result<Write, CampaignError> {
        let bad = || CampaignError::Protocol(format!("bad write {s:?}"));
        let mut parts = s.splitn(3, ':');
        let table = parts.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let key = parts
            .next()
            .ok_or_else(bad)?
            .split(',')
            .map(|k| k.parse().map_err(|_| bad()))
            .collect::<Result<Vec<i64>, _>>()?;
        let expect = match parts.next().ok_or_else(bad)? {
            "-" => Expect::Absent,
            e => {
                let cols = e.strip_prefix('+').ok_or_else(bad)?;
                let mut out = Vec::new();
                for c in cols.split('&').filter(|c| !c.is_empty()) {
                    let (col, v) = c.split_once('=').ok_or_else(bad)?;
                    let col = col.parse().map_err(|_| bad())?;
                    let v = match v.split_at_checked(1) {
                        Some(("i", x)) => Value::I64(x.parse().map_err(|_| bad())?),
                        Some(("s", x)) => Value::Str(x.to_owned()),
                        _ => return Err(bad()),
                    };
                    out.push((col, v));
                }
                Expect::Present(out)
            }
        };
        Ok(Write { table, key, expect })
    }
}

/// The writes of one transaction as a protocol field.
pub fn encode_writes(writes: &[Write]) -> Result<String, CampaignError> {
    let mut out = String::new();
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        w.encode(&mut out)?;
    }
    Ok(out)
}

/// Parses [`encode_writes`]'s output.
pub fn decode_writes(text: &str) -> Result<Vec<Write>, CampaignError> {
    decode_fields(text.split_whitespace())
}

fn decode_fields<'a>(fields: impl Iterator<Item = &'a str>) -> Result<Vec<Write>, CampaignError> {
    fields.map(Write::decode).collect()
}

/// A test-only misbehaviour of the child, to show the verifier catches it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// The real child.
    #[default]
    None,
    /// The child's last transaction (before it exits by itself after `max_commits`) is a
    /// write that it rolls back but acknowledges anyway: a dropped commit.
    AckRolledBack,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::AckRolledBack => "ack-rolled-back",
        }
    }

    fn parse(s: &str) -> Option<Fault> {
        [Fault::None, Fault::AckRolledBack].into_iter().find(|f| f.name() == s)
    }
}

/// The workload side of a campaign: what the child runs and acknowledges, and what the
/// parent checks besides the acknowledged writes.
///
/// Adding a workload: `load` as the benchmark loads it; the driver runs one transaction of
/// the standard mix through `session` (with [`run_faultable`]) and returns the writes that
/// its commit makes verifiable, calling `intent` with them before the commit; `applied` sees
/// every write the parent applies (for counts); `invariants` returns the workload's checks.
/// Implementations: [`tatp::TatpCampaign`], [`tpcc::TpccCampaign`].
pub trait CampaignWorkload: Send + Sync {
    /// Name (as `--workload` spells it).
    fn name(&self) -> &'static str;
    /// The benchmark workload it runs (schema, sizes, loading).
    fn oltp(&self) -> &dyn OltpWorkload;
    /// The schema.
    fn schema(&self) -> &Arc<Schema> {
        self.oltp().schema()
    }
    /// Bytes of data to size the pool for.
    fn data_bytes(&self) -> u64 {
        self.oltp().loaded_bytes() * 2 + (8 << 20)
    }
    /// Loads the tables into a fresh database (parent, once), as the benchmark loads them.
    fn load(&self, subject: &dyn OltpSubject) -> Result<(), OpError> {
        self.oltp().load(subject)
    }
    /// The child's transaction stream, seeded.
    fn driver(&self, seed: u64) -> Box<dyn CampaignDriver + '_>;
    /// The parent saw `writes` become part of the database (acknowledged, or the in-flight
    /// transaction found committed), in commit order.
    fn applied(&mut self, writes: &[Write]);
    /// The workload's invariants on the reopened database.
    fn invariants(&self, subject: &dyn OltpSubject) -> Result<Vec<Check>, OpError>;
}

/// One child's stream of transactions.
pub trait CampaignDriver {
    /// Plans and runs the next transaction as `seq` on `session` (retrying retryable
    /// failures). Inside the transaction, once its writes are known and before it commits, it
    /// calls `intent` with them. Returns the committed transaction's writes. With `rollback`,
    /// it rolls the transaction back after calling `intent` and returns the writes it would
    /// have made (`Ok(None)` if this transaction writes nothing: the caller tries the next).
    fn run(
        &mut self,
        session: &mut dyn OltpSession,
        seq: u64,
        intent: &mut dyn FnMut(&[Write]) -> Result<(), OpError>,
        rollback: bool,
    ) -> Result<Option<Vec<Write>>, OpError>;
}

/// A workload by name: `tatp` (with `subscribers`), `tpcc` or `tpcc:W,ITEMS,CUSTOMERS`
/// ([`tpcc::parse_spec`]; `subscribers` unused).
pub fn workload(
    name: &str,
    subscribers: u32,
    seed: u64,
) -> Result<Box<dyn CampaignWorkload>, CampaignError> {
    match name {
        "tatp" => Ok(Box::new(tatp::TatpCampaign::new(subscribers, seed))),
        other => match tpcc::parse_spec(other)? {
            Some(scale) => Ok(Box::new(tpcc::TpccCampaign::new(scale, seed))),
            None => Err(CampaignError::Usage(format!("unknown campaign workload {other:?}"))),
        },
    }
}

/// The workload parameters of a campaign's population (one thread, seeded).
pub(crate) fn params(seed: u64) -> WorkloadParams {
    WorkloadParams {
        scale: 0,
        value_size: 0,
        distribution: Distribution::Uniform,
        theta: 0.99,
        seed,
        threads: 1,
        planned_txns: None,
    }
}

/// The error a deliberately rolled-back transaction returns (test-only fault).
const ROLLED_BACK: &str = "rolled back on purpose (campaign fault)";

/// A transaction body that returns the writes it made.
pub(crate) type WritesBody<'a> = dyn FnMut(&mut dyn OltpOps) -> Result<Vec<Write>, OpError> + 'a;

/// Runs `body` as one transaction of `kind` on `session`, retrying retryable failures, and
/// returns the writes `body` returned (it calls the intent itself). With `rollback` (the
/// test-only fault), the transaction is rolled back after `body` and its writes are returned
/// anyway.
pub(crate) fn run_faultable(
    session: &mut dyn OltpSession,
    kind: TxnKind,
    rollback: bool,
    body: &mut WritesBody<'_>,
) -> Result<Vec<Write>, OpError> {
    let mut writes = Vec::new();
    let res = oltp::run_retrying(session, kind, &mut |ops| {
        writes = body(ops)?;
        if rollback {
            return Err(OpError::Engine(ROLLED_BACK.into()));
        }
        Ok(())
    });
    match res {
        Ok(()) => Ok(writes),
        Err(OpError::Engine(m)) if rollback && m == ROLLED_BACK => Ok(writes),
        Err(e) => Err(e),
    }
}

/// What the child needs (passed from parent to child as one string, [`ChildSpec::encode`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ChildSpec {
    /// The database directory (what `oltp::open` was given).
    pub dir: PathBuf,
    /// Engine.
    pub engine: EngineKind,
    /// Workload name.
    pub workload: String,
    /// TATP subscribers (the workload's scale).
    pub subscribers: u32,
    /// The workload's seed (population).
    pub seed: u64,
    /// This child's transaction seed.
    pub child_seed: u64,
    /// Its first sequence number.
    pub first_seq: u64,
    /// It stops by itself after this many commits.
    pub max_commits: u64,
    /// Test-only misbehaviour.
    pub fault: Fault,
}

impl ChildSpec {
    /// One line per field, `name=value`.
    pub fn encode(&self) -> String {
        format!(
            "dir={}\nengine={}\nworkload={}\nsubscribers={}\nseed={}\nchild_seed={}\n\
             first_seq={}\nmax_commits={}\nfault={}",
            self.dir.display(),
            self.engine.name(),
            self.workload,
            self.subscribers,
            self.seed,
            self.child_seed,
            self.first_seq,
            self.max_commits,
            self.fault.name()
        )
    }

    /// Parses [`ChildSpec::encode`]'s output.
    pub fn decode(s: &str) -> Result<ChildSpec, CampaignError> {
        let fields: BTreeMap<&str, &str> = s.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| {
            fields.get(k).copied().ok_or_else(|| CampaignError::Usage(format!("child: no {k}")))
        };
        let num = |k: &str| -> Result<u64, CampaignError> {
            get(k)?.parse().map_err(|_| CampaignError::Usage(format!("child: bad {k}")))
        };
        Ok(ChildSpec {
            dir: PathBuf::from(get("dir")?),
            engine: get("engine")?.parse().map_err(|e| CampaignError::Usage(format!("{e}")))?,
            workload: get("workload")?.to_owned(),
            subscribers: u32::try_from(num("subscribers")?)
                .map_err(|_| CampaignError::Usage("child: bad subscribers".into()))?,
            seed: num("seed")?,
            child_seed: num("child_seed")?,
            first_seq: num("first_seq")?,
            max_commits: num("max_commits")?,
            fault: Fault::parse(get("fault")?)
                .ok_or_else(|| CampaignError::Usage("child: bad fault".into()))?,
        })
    }
}

/// The subject setup of a campaign database (no injected latency, the best flush).
fn setup(w: &dyn CampaignWorkload) -> SubjectSetup {
    SubjectSetup {
        tables: w.schema().tables.iter().map(|t| t.name).collect(),
        data_bytes: w.data_bytes(),
        latency_ns: 0,
        latency_model: LatencyModel::Barrier,
        flush: None,
        sync_latency_ns: 0,
    }
}

fn engine_id(kind: EngineKind) -> Result<EngineId, CampaignError> {
    if kind.is_persistent() {
        Ok(EngineId::Ferrite(kind))
    } else {
        Err(CampaignError::Usage(format!(
            "engine {kind} is in memory: nothing survives a kill, so there is nothing to \
             verify; the campaign needs a persistent engine (sofort)"
        )))
    }
}

fn line(out: &mut impl std::io::Write, s: &str) -> Result<(), OpError> {
    writeln!(out, "{TAG}{s}")
        .and_then(|()| out.flush())
        .map_err(|e| OpError::Engine(format!("stdout: {e}")))
}

/// The child's side: opens the database, runs the workload and acknowledges commits on
/// stdout until `max_commits` (or until stdout closes). Returns when done.
pub fn run_child(spec: &ChildSpec) -> Result<(), CampaignError> {
    let w = workload(&spec.workload, spec.subscribers, spec.seed)?;
    let engine = engine_id(spec.engine)?;
    let start = Instant::now();
    let subject = oltp::reopen(engine, &spec.dir, &setup(w.as_ref()), w.schema())?;
    let open_ns = start.elapsed().as_nanos();
    let mut session = subject.session()?;
    let mut driver = w.driver(spec.child_seed);
    let mut out = std::io::stdout();
    let mut seq = spec.first_seq;
    let mut fault_pending = spec.fault == Fault::AckRolledBack;
    let mut committed = 0u64;
    let mut intent_line = String::new();
    while committed < spec.max_commits || fault_pending {
        let rollback = committed >= spec.max_commits && fault_pending;
        let mut intent = |writes: &[Write]| -> Result<(), OpError> {
            intent_line.clear();
            let text = encode_writes(writes).map_err(|e| OpError::Engine(e.to_string()))?;
            intent_line.push_str(&format!("intent {seq} {text}"));
            line(&mut out, intent_line.trim_end())
        };
        let res = driver.run(session.as_mut(), seq, &mut intent, rollback);
        let writes = match res {
            Ok(Some(w)) => w,
            Ok(None) => continue, // a rollback run found nothing to write: try the next
            Err(e) => return Err(e.into()),
        };
        if committed == 0 {
            let first_ns = start.elapsed().as_nanos();
            if line(&mut out, &format!("open {open_ns} {first_ns}")).is_err() {
                return Ok(());
            }
        }
        let text = encode_writes(&writes)?;
        // A closed pipe (the parent is gone) ends the child.
        if line(&mut out, format!("ack {seq} {text}").trim_end()).is_err() {
            return Ok(());
        }
        if rollback {
            fault_pending = false;
        } else {
            committed += 1;
        }
        seq += 1;
    }
    drop(session);
    drop(subject);
    Ok(())
}

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Workload name (`tatp`, or `tpcc:W,ITEMS,CUSTOMERS` from [`tpcc::spec`]).
    pub workload: String,
    /// Engine (persistent).
    pub engine: EngineKind,
    /// Kills (rounds).
    pub kills: u64,
    /// The campaign's seed (population, kill points, children's seeds).
    pub seed: u64,
    /// Directory for the database (it goes in `dir/db`).
    pub dir: PathBuf,
    /// TATP subscribers.
    pub subscribers: u32,
    /// A round kills the child after `1..=max_acks` acknowledgements (seeded).
    pub max_acks: u64,
    /// Up to this many µs of seeded sleep before a quarter of the kills (0: none).
    pub jitter_us: u64,
    /// A child stops by itself after this many commits (its round then ends without a kill).
    pub child_max_commits: u64,
    /// Test-only misbehaviour of the children.
    pub fault: Fault,
}

impl Config {
    /// The defaults for `workload` and `engine` in `dir`: 20 kills, 1 000 subscribers.
    pub fn new(workload: &str, engine: EngineKind, dir: PathBuf, seed: u64) -> Config {
        Config {
            workload: workload.to_owned(),
            engine,
            kills: 20,
            seed,
            dir,
            subscribers: 1000,
            max_acks: 400,
            jitter_us: 2000,
            child_max_commits: 10_000_000,
            fault: Fault::None,
        }
    }
}

/// An acknowledged write found missing.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// Round (0-based) after which it was found.
    pub round: u64,
    /// Table name.
    pub table: &'static str,
    /// Primary key.
    pub key: Vec<i64>,
    /// Sequence number of the acknowledged transaction.
    pub seq: u64,
    /// What the write promised.
    pub expected: String,
    /// What the database holds.
    pub found: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "round {}: {} key {:?}: acknowledged seq {} wrote {}, found {}",
            self.round, self.table, self.key, self.seq, self.expected, self.found
        )
    }
}

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Rounds ended by SIGKILL.
    pub kills: u64,
    /// Rounds whose child ended by itself (after `child_max_commits`).
    pub exits: u64,
    /// Acknowledged commits.
    pub acked: u64,
    /// Of them, transactions with at least one verifiable write.
    pub acked_writes: u64,
    /// In-flight transactions found committed (applied to the model).
    pub in_flight_applied: u64,
    /// Key checks against acknowledged writes, over all rounds.
    pub keys_checked: u64,
    /// Keys tracked at the end.
    pub keys_tracked: u64,
    /// Lost acknowledged writes.
    pub losses: Vec<Loss>,
    /// Broken invariants (and failures to open).
    pub violations: Vec<String>,
    /// The parent's open after each kill (recovery), ns.
    pub recovery_ns: Vec<u64>,
    /// From the start of the parent's open after each kill to the commit of its first
    /// transaction (a read-only probe of one row, before any verification), ns.
    pub recovery_first_ns: Vec<u64>,
    /// The children's `open` (of a cleanly closed database), ns.
    pub child_open_ns: Vec<u64>,
    /// From the start of the child's `open` to its first commit, ns.
    pub first_commit_ns: Vec<u64>,
}

/// `min / median / p99 / max` of `v` in ms.
fn stats_ms(v: &[u64]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let ms = |ns: u64| ns as f64 / 1e6;
    format!(
        "min {:.3} / median {:.3} / p99 {:.3} / max {:.3} ms ({} samples)",
        ms(s[0]),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(s[s.len() - 1]),
        s.len()
    )
}

impl Summary {
    /// No loss and no violation.
    pub fn passed(&self) -> bool {
        self.losses.is_empty() && self.violations.is_empty()
    }

    /// The printed summary.
    pub fn report(&self) -> String {
        let mut out = format!(
            "Kills: {} (and {} rounds whose child stopped by itself)\n\
             Commits acknowledged: {} ({} with verifiable writes; {} in-flight transactions \
             found committed)\n\
             Verified: {} key checks against acknowledged writes ({} keys tracked)\n\
             Lost: {}\n\
             Invariant violations: {}\n\
             Recovery open (parent, after each kill): {}\n\
             Open to first transaction after a kill (parent, a read-only probe): {}\n\
             Child open (database closed cleanly by the parent): {}\n\
             Open to first commit (child): {}\n",
            self.kills,
            self.exits,
            self.acked,
            self.acked_writes,
            self.in_flight_applied,
            self.keys_checked,
            self.keys_tracked,
            self.losses.len(),
            self.violations.len(),
            stats_ms(&self.recovery_ns),
            stats_ms(&self.recovery_first_ns),
            stats_ms(&self.child_open_ns),
            stats_ms(&self.first_commit_ns),
        );
        for l in self.losses.iter().take(10) {
            out.push_str(&format!("  lost: {l}\n"));
        }
        for v in self.violations.iter().take(10) {
            out.push_str(&format!("  violation: {v}\n"));
        }
        out.push_str(if self.passed() { "Result: PASSED\n" } else { "Result: FAILED\n" });
        out
    }
}

/// Kills the child when dropped, if it still runs (the restart benchmark's children too).
pub(crate) struct ChildGuard(pub(crate) Child);

/// Spawns `cmd` with its stdout piped to the caller (stdin empty, stderr inherited).
pub(crate) fn spawn_piped(
    mut cmd: Command,
) -> Result<(ChildGuard, BufReader<ChildStdout>), String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn the child: {e}"))?;
    let mut guard = ChildGuard(child);
    let stdout = guard.0.stdout.take().ok_or_else(|| "no pipe to the child".to_owned())?;
    Ok((guard, BufReader::new(stdout)))
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

type Key = (TableId, Vec<i64>);

impl fmt::Debug for Campaign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Campaign")
            .field("cfg", &self.cfg)
            .field("db", &self.db)
            .field("round", &self.round)
            .field("keys", &self.model.len())
            .finish_non_exhaustive()
    }
}

/// A campaign in progress: the database, the model of acknowledged writes, the tallies.
pub struct Campaign {
    cfg: Config,
    workload: Box<dyn CampaignWorkload>,
    engine: EngineId,
    setup: SubjectSetup,
    db: PathBuf,
    model: BTreeMap<Key, (u64, Write)>,
    next_seq: u64,
    rng: Rng,
    round: u64,
    summary: Summary,
}

impl Campaign {
    /// Creates and loads the database in `cfg.dir/db`.
    pub fn create(cfg: Config) -> Result<Campaign, CampaignError> {
        let engine = engine_id(cfg.engine)?;
        if cfg.max_acks == 0 {
            return Err(CampaignError::Usage("max_acks must be at least 1".into()));
        }
        // A campaign of no round would check nothing and still report PASSED.
        if cfg.kills == 0 {
            return Err(CampaignError::Usage("kills must be at least 1".into()));
        }
        let workload = workload(&cfg.workload, cfg.subscribers, cfg.seed)?;
        let setup = setup(workload.as_ref());
        let db = cfg.dir.join("db");
        {
            let subject = oltp::open(engine, &db, &setup, workload.schema())?;
            workload.load(subject.as_ref())?;
        }
        let rng = Rng::new(cfg.seed, 0xcafe);
        Ok(Campaign {
            cfg,
            workload,
            engine,
            setup,
            db,
            model: BTreeMap::new(),
            next_seq: 1,
            rng,
            round: 0,
            summary: Summary::default(),
        })
    }

    /// The database directory.
    pub fn db_dir(&self) -> &Path {
        &self.db
    }

    /// Opens the database as the verification does (tests: tamper with it between rounds).
    #[doc(hidden)]
    pub fn reopen(&self) -> Result<Box<dyn OltpSubject>, CampaignError> {
        Ok(oltp::reopen(self.engine, &self.db, &self.setup, self.workload.schema())?)
    }

    /// What was found so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Applies acknowledged writes to the model.
    fn apply(&mut self, seq: u64, writes: Vec<Write>) {
        self.workload.applied(&writes);
        for w in writes {
            self.model.insert((w.table, w.key.clone()), (seq, w));
        }
    }

    /// Feeds one acknowledgement as if a child had sent it (tests: an ack for a commit that
    /// never reached the database).
    #[doc(hidden)]
    pub fn feed_ack(&mut self, seq: u64, writes: Vec<Write>) {
        self.summary.acked += 1;
        self.summary.acked_writes += u64::from(!writes.is_empty());
        self.next_seq = self.next_seq.max(seq + 1);
        self.apply(seq, writes);
    }

    /// One round: spawns a child with `launch`, kills it after a seeded number of acks (or
    /// lets it stop by itself), then verifies. `Err` only for failures of the campaign
    /// itself; what the verification finds goes into the summary.
    pub fn round(&mut self, launch: &dyn Fn(&ChildSpec) -> Command) -> Result<(), CampaignError> {
        let n = 1 + self.rng.below(self.cfg.max_acks);
        let jitter = if self.cfg.jitter_us > 0 && self.rng.below(4) == 0 {
            self.rng.below(self.cfg.jitter_us)
        } else {
            0
        };
        let spec = ChildSpec {
            dir: self.db.clone(),
            engine: self.cfg.engine,
            workload: self.cfg.workload.clone(),
            subscribers: self.cfg.subscribers,
            seed: self.cfg.seed,
            child_seed: self.rng.next_u64(),
            first_seq: self.next_seq,
            max_commits: self.cfg.child_max_commits,
            fault: self.cfg.fault,
        };
        let (mut guard, mut reader) = spawn_piped(launch(&spec)).map_err(CampaignError::Io)?;
        let mut pending: Option<(u64, Vec<Write>)> = None;
        let got = self.read_lines(&mut reader, Some(n), &mut pending)?;
        let killed = got == n;
        if killed {
            if jitter > 0 {
                std::thread::sleep(Duration::from_micros(jitter));
            }
            guard.0.kill().map_err(|e| CampaignError::Io(format!("SIGKILL: {e}")))?;
            // Lines written before the kill are acknowledgements too.
            self.read_lines(&mut reader, None, &mut pending)?;
        }
        // The in-flight transaction's seq is used up whether or not it committed.
        if let Some((seq, _)) = &pending {
            self.next_seq = self.next_seq.max(*seq + 1);
        }
        let status = guard.0.wait().map_err(|e| CampaignError::Io(format!("wait: {e}")))?;
        drop(guard);
        if killed {
            self.summary.kills += 1;
        } else if status.success() {
            self.summary.exits += 1;
        } else {
            self.summary.violations.push(format!(
                "round {}: the child failed after {got} of {n} acks ({status}); its error is \
                 on stderr",
                self.round
            ));
        }
        self.verify(pending)?;
        self.round += 1;
        Ok(())
    }

    /// Reads protocol lines until `stop` acks (`None`: end of file); returns the acks read.
    fn read_lines(
        &mut self,
        r: &mut BufReader<ChildStdout>,
        stop: Option<u64>,
        pending: &mut Option<(u64, Vec<Write>)>,
    ) -> Result<u64, CampaignError> {
        let mut acks = 0;
        let mut buf = String::new();
        while stop.is_none_or(|s| acks < s) {
            buf.clear();
            match r.read_line(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) if !buf.ends_with('\n') => break, // the child died writing it
                Ok(_) => {}
            }
            let Some(pos) = buf.find(TAG) else { continue };
            let mut fields = buf[pos + TAG.len()..].split_whitespace();
            let verb = fields.next().unwrap_or("");
            let bad = || CampaignError::Protocol(format!("bad line {:?}", buf.trim_end()));
            match verb {
                "open" => {
                    let mut num = || fields.next().and_then(|x| x.parse::<u64>().ok());
                    let (open, first) = (num().ok_or_else(bad)?, num().ok_or_else(bad)?);
                    self.summary.child_open_ns.push(open);
                    self.summary.first_commit_ns.push(first);
                }
                "intent" | "ack" => {
                    let seq: u64 = fields.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
                    if seq < self.next_seq {
                        return Err(CampaignError::Protocol(format!(
                            "seq {seq} out of order (expected at least {})",
                            self.next_seq
                        )));
                    }
                    let writes = decode_fields(fields)?;
                    if verb == "intent" {
                        *pending = Some((seq, writes));
                    } else {
                        if pending.as_ref().is_some_and(|(s, _)| *s == seq) {
                            *pending = None;
                        }
                        self.feed_ack(seq, writes);
                        acks += 1;
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(acks)
    }

    fn describe(&self, w: &Write) -> String {
        match &w.expect {
            Expect::Absent => "absent".into(),
            Expect::Present(cols) => {
                let t = &self.workload.schema().tables[w.table];
                let parts: Vec<String> = cols
                    .iter()
                    .map(|(c, v)| {
                        format!("{}={v:?}", t.columns.get(*c).map_or("?", |col| col.name))
                    })
                    .collect();
                format!("present with {}", parts.join(", "))
            }
        }
    }

    fn describe_found(&self, w: &Write, found: Option<&Row>) -> String {
        match (found, &w.expect) {
            (None, _) => "absent".into(),
            (Some(row), Expect::Present(cols)) => {
                let t = &self.workload.schema().tables[w.table];
                let parts: Vec<String> = cols
                    .iter()
                    .map(|(c, _)| {
                        format!(
                            "{}={:?}",
                            t.columns.get(*c).map_or("?", |col| col.name),
                            row.get(*c)
                        )
                    })
                    .collect();
                format!("present with {}", parts.join(", "))
            }
            (Some(_), Expect::Absent) => "present".into(),
        }
    }

    /// Reopens the database and verifies it (module docs, steps 1–4) with `pending` as the
    /// in-flight transaction. Findings go into the summary.
    pub fn verify(&mut self, pending: Option<(u64, Vec<Write>)>) -> Result<(), CampaignError> {
        let round = self.round;
        let start = Instant::now();
        let subject = match oltp::reopen(self.engine, &self.db, &self.setup, self.workload.schema())
        {
            Ok(s) => s,
            Err(e) => {
                self.summary
                    .violations
                    .push(format!("round {round}: the database does not reopen: {e}"));
                return Ok(());
            }
        };
        self.summary.recovery_ns.push(start.elapsed().as_nanos() as u64);
        // The first transaction after the crash, before anything else touches the database:
        // how soon the engine serves again (the children open a database the parent closed).
        let mut session = subject.session()?;
        oltp::run_retrying(session.as_mut(), TxnKind::ReadOnly, &mut |ops: &mut dyn OltpOps| {
            ops.scan(0, &Range::all().limit(1), &mut |_| {}).map(|_| ())
        })?;
        drop(session);
        self.summary.recovery_first_ns.push(start.elapsed().as_nanos() as u64);
        if let Some(Err(e)) = subject.engine_check() {
            self.summary.violations.push(format!("round {round}: the engine's check: {e}"));
        }
        // Every key to look at, read in one read-only transaction.
        let mut keys: Vec<Key> = self.model.keys().cloned().collect();
        if let Some((_, ws)) = &pending {
            keys.extend(ws.iter().map(|w| (w.table, w.key.clone())));
        }
        keys.sort();
        keys.dedup();
        let mut found: BTreeMap<Key, Option<Row>> = BTreeMap::new();
        let mut session = subject.session()?;
        oltp::run_retrying(session.as_mut(), TxnKind::ReadOnly, &mut |ops: &mut dyn OltpOps| {
            found.clear();
            for k in &keys {
                let mut row = Row::new();
                let there = ops.get(k.0, &k.1, &mut row)?;
                found.insert(k.clone(), there.then_some(row));
            }
            Ok(())
        })?;
        drop(session);
        let row_of = |k: &Key| found.get(k).and_then(Option::as_ref);
        // Step 2: the in-flight transaction.
        let mut not_applied: Vec<Write> = Vec::new();
        if let Some((seq, writes)) = pending {
            if writes.iter().all(|w| w.holds(row_of(&(w.table, w.key.clone())))) {
                if !writes.is_empty() {
                    self.summary.in_flight_applied += 1;
                }
                self.apply(seq, writes);
            } else {
                for w in &writes {
                    let k = (w.table, w.key.clone());
                    let model_holds = self.model.get(&k).is_none_or(|(_, m)| m.holds(row_of(&k)));
                    if w.holds(row_of(&k)) && !model_holds {
                        self.summary.violations.push(format!(
                            "round {round}: in-flight seq {seq} is partial: {} key {:?} holds \
                             its write, another of its writes is missing",
                            self.workload.schema().tables[w.table].name,
                            w.key
                        ));
                    }
                }
                not_applied = writes;
            }
        }
        // Step 3: every acknowledged write (or a later one) is there.
        let mut losses = Vec::new();
        for (k, (seq, w)) in &self.model {
            self.summary.keys_checked += 1;
            let row = row_of(k);
            if w.holds(row) {
                continue;
            }
            let partial =
                not_applied.iter().any(|p| p.table == k.0 && p.key == k.1 && p.holds(row));
            if !partial {
                losses.push(Loss {
                    round,
                    table: self.workload.schema().tables[k.0].name,
                    key: k.1.clone(),
                    seq: *seq,
                    expected: self.describe(w),
                    found: self.describe_found(w, row),
                });
            }
        }
        self.summary.losses.extend(losses);
        self.summary.keys_tracked = self.model.len() as u64;
        // Step 4: the workload's invariants.
        match self.workload.invariants(subject.as_ref()) {
            Ok(checks) => {
                for c in checks.iter().filter(|c| !c.ok) {
                    self.summary
                        .violations
                        .push(format!("round {round}: {}: {}", c.name, c.detail));
                }
            }
            Err(e) => self.summary.violations.push(format!("round {round}: invariants: {e}")),
        }
        drop(subject);
        Ok(())
    }

    /// Runs `cfg.kills` rounds (stopping early at the first round with a finding or a child
    /// that failed), calling `progress` after each.
    pub fn run(
        &mut self,
        launch: &dyn Fn(&ChildSpec) -> Command,
        progress: &mut dyn FnMut(u64, &Summary),
    ) -> Result<(), CampaignError> {
        while self.round < self.cfg.kills {
            self.round(launch)?;
            progress(self.round, &self.summary);
            if !self.summary.passed() {
                break;
            }
        }
        Ok(())
    }
}
