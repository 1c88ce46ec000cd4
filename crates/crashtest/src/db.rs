//! Crash targets `db-<engine>`: a persistent engine behind the public `Database` API, on a
//! simulated pool set, checked against the reference engine as the model ([E1]).
//!
//! One target per persistent [`EngineKind`] ([`targets`]), so every engine (SOFORT, the paged
//! engine under each commit protocol: `db-paged-journal`, `db-paged-wal`) is crash-tested by
//! the same workload and check.
//!
//! **Workload** (seeded): the database is created on the tester's pool set
//! (`ferrite::internals::database_on_pool_set(set, &options, true)`), two tables are created
//! (`account` with a non-unique index on `owner`; `item` with a unique index on `code`, a
//! non-unique index on `tag` and a `bytes` payload of varying length), then seeded
//! transactions over a small key space: transfers between accounts, inserts, updates and
//! deletes of accounts and items (up to seven rows, also insert-update-delete of one key in one
//! transaction and reuse of a code freed earlier in the same transaction), an operation that
//! fails (a duplicate primary key) and leaves its transaction usable, explicit aborts, aborts by
//! drop, and deferred commits (`commit_deferred`, then `wait_durable` after up to three of
//! them). The small key space makes most writes updates and deletes of rows written before,
//! so garbage collection runs and row slots and heap space are reused. The database is closed
//! at the end.
//!
//! **Model**: each operation is a transaction's write set with concrete values (an update
//! carries the whole new row). A transaction begins in the model just before its commit call
//! (nothing of it may survive a crash before that) and is done when `commit` or
//! `wait_durable` returns. Aborted transactions and failed operations are not in the model:
//! nothing of them may survive.
//!
//! **Check** after every crash: the image reopens
//! (`database_on_pool_set(PoolSet::open_sim(..), &options, false)`) unless the database's
//! creation had not finished; the engine's own `check()` passes; every secondary index holds
//! exactly the table's rows, in index order (unique indexes without duplicates); and the rows
//! of every table equal the reference engine's after the committed transactions, plus a subset
//! of the in-flight ones, each applied whole (closed under shared keys: a transaction never
//! survives without an earlier in-flight one it shares a row with). SOFORT promises exactly
//! this: its commit point is one line (P-SOF-7), so a transaction is all or nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use ferrite::{
    Database, EngineKind, Options, Row, Scan, SofortIndexPlacement, TableSchema, Type, Value,
};
use ferrite_pmem::{BlockFile, CrashImage, PoolSet, SimDomain, SplitMix64};

use crate::explore::DynTarget;
use crate::target::{Axioms, Ctx, ModelOp, ModelView, Target};

/// Segment size of the simulated pool set: small, so images are cheap to capture and open.
const SEG: u64 = 1 << 20;
/// Account ids are `0..ACCOUNTS`, item ids `0..ITEMS`, codes `c0..c{CODES-1}`.
const ACCOUNTS: i64 = 6;
const ITEMS: i64 = 14;
const CODES: u64 = 20;
const OWNERS: [&str; 3] = ["ann", "bob", "cy"];
/// Transactions of the registered workload.
const TXNS: u64 = 160;
/// The most in-flight transactions whose subsets the check enumerates.
const MAX_IN_FLIGHT: usize = 10;

pub(crate) fn pmem_options() -> ferrite_pmem::Options {
    ferrite_pmem::Options::default().layout("crashtest-db").segment_size(SEG)
}

/// The tables of the workload: two always, a third for the appending targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tab {
    /// `account(id i64, owner str, balance i64)`, index `by_owner(owner)`.
    Account,
    /// `item(id i64, code str, tag i64, payload bytes)`, unique `by_code(code)`, `by_tag(tag)`.
    Item,
    /// `note(id i64, body bytes)`, no index: rows appended one per transaction with growing
    /// ids, by the targets that append (FASH, FAST: [`DbTarget::appends`]), so that a
    /// transaction changes one leaf at the end of its offset array (FAST's 8-byte commit).
    Note,
}

impl Tab {
    const ALL: [Tab; 2] = [Tab::Account, Tab::Item];
    const WITH_NOTE: [Tab; 3] = [Tab::Account, Tab::Item, Tab::Note];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Tab::Account => "account",
            Tab::Item => "item",
            Tab::Note => "note",
        }
    }

    fn parse(s: &str) -> Option<Tab> {
        Tab::WITH_NOTE.into_iter().find(|t| t.name() == s)
    }

    pub(crate) fn schema(self) -> TableSchema {
        match self {
            Tab::Account => TableSchema::new("account")
                .column("id", Type::I64)
                .column("owner", Type::Str)
                .column("balance", Type::I64)
                .primary_key("id")
                .index("by_owner", ["owner"]),
            Tab::Item => TableSchema::new("item")
                .column("id", Type::I64)
                .column("code", Type::Str)
                .column("tag", Type::I64)
                .column("payload", Type::Bytes)
                .primary_key("id")
                .unique_index("by_code", ["code"])
                .index("by_tag", ["tag"]),
            Tab::Note => TableSchema::new("note")
                .column("id", Type::I64)
                .column("body", Type::Bytes)
                .primary_key("id"),
        }
    }

    fn columns(self) -> &'static [&'static str] {
        match self {
            Tab::Account => &["id", "owner", "balance"],
            Tab::Item => &["id", "code", "tag", "payload"],
            Tab::Note => &["id", "body"],
        }
    }
}

/// One write of a transaction, with concrete values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Insert `row` (its first column is the key).
    Insert(Tab, Row),
    /// Replace every non-key column of row `key` with `row`'s.
    Update(Tab, i64, Row),
    /// Delete row `key`.
    Delete(Tab, i64),
}

impl Write {
    fn key(&self) -> (Tab, i64) {
        match self {
            Write::Insert(t, row) => (*t, row[0].as_i64().unwrap_or(-1)),
            Write::Update(t, k, _) | Write::Delete(t, k) => (*t, *k),
        }
    }

    /// Runs the write in `tx` (of any engine).
    pub(crate) fn apply(&self, tx: &mut ferrite::Transaction) -> ferrite::Result<()> {
        match self {
            Write::Insert(t, row) => tx.insert(t.name(), row.clone()),
            Write::Update(t, k, row) => {
                let cols = t.columns();
                tx.update(t.name(), *k, cols[1..].iter().copied().zip(row[1..].iter().cloned()))
            }
            Write::Delete(t, k) => tx.delete(t.name(), *k),
        }
    }

    /// Applies the write to a mirror of the tables.
    pub(crate) fn apply_mirror(&self, m: &mut Mirror) {
        match self {
            Write::Insert(t, row) | Write::Update(t, _, row) => {
                m.entry(*t).or_default().insert(self.key().1, row.clone());
            }
            Write::Delete(t, k) => {
                m.entry(*t).or_default().remove(k);
            }
        }
    }
}

/// One operation of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbOp {
    /// Creating the database on the pool set.
    Create,
    /// Creating a table (DDL, durable on return).
    Table(Tab),
    /// A read-write transaction: its number in the workload and its writes.
    Txn(u64, Vec<Write>),
    /// A write of the past workload's block (`db-sofort-past`) with the counts it writes.
    Past(Vec<(String, u64)>),
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::with_capacity(b.len() * 2), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn encode_row(row: &[Value]) -> String {
    let v: Vec<String> = row
        .iter()
        .map(|v| match v {
            Value::I64(i) => format!("i{i}"),
            Value::Str(s) => format!("s{}", hex(s.as_bytes())),
            Value::Bytes(b) => format!("b{}", hex(b)),
            other => format!("?{other}"),
        })
        .collect();
    v.join(",")
}

fn decode_row(s: &str) -> Option<Row> {
    s.split(',')
        .map(|f| {
            let (tag, rest) = f.split_at_checked(1)?;
            match tag {
                "i" => rest.parse().ok().map(Value::I64),
                "s" => String::from_utf8(unhex(rest)?).ok().map(Value::Str),
                "b" => unhex(rest).map(Value::Bytes),
                _ => None,
            }
        })
        .collect()
}

impl ModelOp for DbOp {
    fn encode(&self) -> String {
        match self {
            DbOp::Create => "create".into(),
            DbOp::Table(t) => format!("table {}", t.name()),
            DbOp::Txn(id, writes) => {
                let w: Vec<String> = writes
                    .iter()
                    .map(|w| match w {
                        Write::Insert(t, row) => format!("I {} {}", t.name(), encode_row(row)),
                        Write::Update(t, k, row) => {
                            format!("U {} {k} {}", t.name(), encode_row(row))
                        }
                        Write::Delete(t, k) => format!("D {} {k}", t.name()),
                    })
                    .collect();
                format!("tx {id} {}", w.join("|"))
            }
            DbOp::Past(counts) => {
                let c: Vec<String> = counts.iter().map(|(q, n)| format!("{q}:{n}")).collect();
                format!("past {}", c.join("|"))
            }
        }
    }

    fn decode(s: &str) -> Option<Self> {
        if s == "create" {
            return Some(DbOp::Create);
        }
        if let Some(t) = s.strip_prefix("table ") {
            return Tab::parse(t).map(DbOp::Table);
        }
        if let Some(c) = s.strip_prefix("past ") {
            return c
                .split('|')
                .filter(|e| !e.is_empty())
                .map(|e| {
                    let (q, n) = e.rsplit_once(':')?;
                    Some((q.to_owned(), n.parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()
                .map(DbOp::Past);
        }
        let rest = s.strip_prefix("tx ")?;
        let (id, writes) = rest.split_once(' ')?;
        let writes = writes
            .split('|')
            .map(|w| {
                let f: Vec<&str> = w.split(' ').collect();
                Some(match f.as_slice() {
                    ["I", t, row] => Write::Insert(Tab::parse(t)?, decode_row(row)?),
                    ["U", t, k, row] => {
                        Write::Update(Tab::parse(t)?, k.parse().ok()?, decode_row(row)?)
                    }
                    ["D", t, k] => Write::Delete(Tab::parse(t)?, k.parse().ok()?),
                    _ => return None,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(DbOp::Txn(id.parse().ok()?, writes))
    }
}

/// Table → key → row.
pub(crate) type Mirror = BTreeMap<Tab, BTreeMap<i64, Row>>;

/// Table name → rows in primary-key order.
type Contents = BTreeMap<String, Vec<Row>>;

/// What recovery found.
#[derive(Debug)]
pub enum Recovered {
    /// The pool set's or the database's creation had not finished (the reason).
    NotCreated(String),
    /// The database opened: every table's rows in primary-key order, and every problem found
    /// by the engine's `check()` and the index comparison.
    Db {
        /// Table name → rows in primary-key order.
        tables: BTreeMap<String, Vec<Row>>,
        /// Broken invariants (empty when everything agrees).
        problems: Vec<String>,
        /// `db-sofort-past`: the past workload's counts found at open.
        past: Vec<(String, u64)>,
    },
}

/// The crash target for one persistent engine (for SOFORT: with every index placed as
/// `placement` says; `db-sofort` is the DRAM placement).
#[derive(Debug, Clone)]
pub struct DbTarget {
    kind: EngineKind,
    txns: u64,
    name: &'static str,
    /// `db-sofort-continue`: some transactions are continuable (see [`DbTarget::continuable`]).
    continuable: bool,
    /// SOFORT with instant recovery (`db-sofort-instant`): see [`DbTarget::instant`].
    instant: bool,
    /// Where SOFORT's indexes live (`db-sofort-hybrid`, `db-sofort-persistent`).
    placement: SofortIndexPlacement,
    /// `db-sofort-past`: every statement sampled into the past workload, its PM block
    /// written by the workload and the probe, and checked at recovery ([`DbTarget::past`]).
    past: bool,
    /// The paged engine on its file store (`db-paged-journal-file`, `db-paged-wal-file`,
    /// `db-paged-nvwal-file`): see [`DbTarget::paged_files`].
    files: bool,
    /// A third of the transactions append one row to table `note` instead (FASH and FAST:
    /// [`Tab::Note`]).
    appends: bool,
    /// `db-paged-fast-m2`: FAST with the same-line variant, declaring axiom M2
    /// ([`DbTarget::fast_same_line`]).
    same_line: bool,
    /// `db-sofort-stale`: SOFORT created over an allocator whose only segment held durable
    /// stale bytes ([`DbTarget::stale`]).
    stale: bool,
}

/// Model ids of the continuable target: transaction `id` is `id * STMT_IDS`, statement `k`
/// (from 1) of a continuable one `id * STMT_IDS + k`, so model ids follow the begin order.
const STMT_IDS: u64 = 64;

/// Registry names, one leaked string per engine kind and recovery mode (built once).
fn target_name(kind: EngineKind, suffix: &'static str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<(EngineKind, &'static str), &'static str>>> =
        OnceLock::new();
    let mut m = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    m.entry((kind, suffix))
        .or_insert_with(|| Box::leak(format!("db-{}{suffix}", kind.name()).into_boxed_str()))
}

/// One `db-<kind>` target per persistent engine of this build, SOFORT's siblings:
/// `db-sofort-continue`, `db-sofort-instant`, `db-sofort-past`, `db-sofort-stale` (created over
/// stale bytes), and with every index in PM `db-sofort-hybrid`, `db-sofort-persistent`; and
/// the paged engine on its file store, `db-paged-journal-file`, `db-paged-wal-file` and
/// `db-paged-nvwal-file` (FASH and FAST, PM only, have none), and `db-paged-fast-m2`.
pub fn targets() -> Vec<Box<dyn DynTarget>> {
    let mut v: Vec<Box<dyn DynTarget>> = EngineKind::persistent()
        .map(|k| Box::new(Arc::new(DbTarget::new(k))) as Box<dyn DynTarget>)
        .collect();
    v.extend(
        EngineKind::persistent()
            .filter(|k| k.name() == "sofort")
            .map(|k| Box::new(Arc::new(DbTarget::continuable(k, TXNS))) as Box<dyn DynTarget>),
    );
    v.push(Box::new(Arc::new(DbTarget::instant(TXNS))));
    for p in PM_PLACEMENTS {
        v.push(Box::new(Arc::new(DbTarget::placed(TXNS, p))));
        v.push(Box::new(Arc::new(DbTarget::continuable_with(TXNS, p, false))));
    }
    v.push(Box::new(Arc::new(DbTarget::continuable_with(TXNS, SofortIndexPlacement::Dram, true))));
    v.push(Box::new(Arc::new(DbTarget::past(TXNS))));
    v.push(Box::new(Arc::new(DbTarget::stale(TXNS))));
    // FASH and FAST keep their pages in PM: no file target. NVWAL's has its log in PM.
    v.extend(
        EngineKind::PAGED
            .iter()
            .filter(|k| !matches!(k.name(), "paged-fash" | "paged-fast"))
            .map(|&k| Box::new(Arc::new(DbTarget::paged_files(k, TXNS))) as Box<dyn DynTarget>),
    );
    v.push(Box::new(Arc::new(DbTarget::fast_same_line(TXNS))));
    v
}

/// The SOFORT index placements in PM that get their own target.
pub const PM_PLACEMENTS: [SofortIndexPlacement; 2] =
    [SofortIndexPlacement::Hybrid, SofortIndexPlacement::Persistent];

/// Pages the file-store targets cache (`db-paged-*-file`): few, so that eviction and re-reads
/// from the file run in every workload.
const FILE_CACHE: usize = 8;

/// `db-sofort-past`: the past workload's block is written every this many sampled statements.
const PAST_EVERY: u64 = 16;

/// Rows of each table that the instant target's recovery lets the background index rebuild
/// insert before it holds it (the rest of the live rows stay unindexed while the target reads,
/// checks and probes).
const INSTANT_HOLD: u64 = 4;

impl DbTarget {
    /// The registered workload ([`TXNS`] transactions) on engine `kind`.
    pub fn new(kind: EngineKind) -> DbTarget {
        DbTarget::with_txns(kind, TXNS)
    }

    /// A workload of `txns` transactions (small ones for exhaustive runs).
    pub fn with_txns(kind: EngineKind, txns: u64) -> DbTarget {
        DbTarget {
            kind,
            txns,
            name: target_name(kind, ""),
            continuable: false,
            instant: false,
            placement: SofortIndexPlacement::Dram,
            past: false,
            files: false,
            appends: matches!(kind.name(), "paged-fash" | "paged-fast"),
            same_line: false,
            stale: false,
        }
    }

    /// `db-sofort-continue` (SOFORT design, continuing transactions): the same workload where
    /// about a third of the transactions are continuable and always commit. Each of their
    /// statements is a model transaction of its own, begun before the statement and done when it
    /// returns (a statement is durable then). Recovery resumes and commits every unfinished
    /// transaction before it reads the database, so the check's expected states hold: every
    /// completed statement present, the interrupted one whole or absent.
    pub fn continuable(kind: EngineKind, txns: u64) -> DbTarget {
        DbTarget {
            kind,
            txns,
            name: "db-sofort-continue",
            continuable: true,
            instant: false,
            placement: SofortIndexPlacement::Dram,
            past: false,
            files: false,
            appends: false,
            same_line: false,
            stale: false,
        }
    }

    /// SOFORT with instant recovery (SOFORT design, instant recovery), `txns` transactions:
    /// every recovery opens the image with `RecoveryMode::Instant` and the background index
    /// rebuild held at [`INSTANT_HOLD`] rows, reads and checks the state and runs the probe's
    /// transactions (they commit while every index is partial; a nested crash lands inside
    /// them, during the rebuild), then releases the rebuild, waits for it and checks again.
    pub fn instant(txns: u64) -> DbTarget {
        DbTarget {
            kind: EngineKind::Sofort,
            txns,
            name: target_name(EngineKind::Sofort, "-instant"),
            continuable: false,
            instant: true,
            placement: SofortIndexPlacement::Dram,
            past: false,
            files: false,
            appends: false,
            same_line: false,
            stale: false,
        }
    }

    /// SOFORT with every index placed as `placement` (`db-sofort-hybrid`,
    /// `db-sofort-persistent`; `Dram` is `db-sofort`), `txns` transactions.
    pub fn placed(txns: u64, placement: SofortIndexPlacement) -> DbTarget {
        let name = match placement {
            SofortIndexPlacement::Dram => target_name(EngineKind::Sofort, ""),
            SofortIndexPlacement::Hybrid => "db-sofort-hybrid",
            SofortIndexPlacement::Persistent => "db-sofort-persistent",
        };
        DbTarget {
            kind: EngineKind::Sofort,
            txns,
            name,
            continuable: false,
            instant: false,
            placement,
            past: false,
            files: false,
            appends: false,
            same_line: false,
            stale: false,
        }
    }

    /// Continuable transactions (as [`DbTarget::continuable`]) with every index placed as
    /// `placement` and, with `instant`, instant recovery held at [`INSTANT_HOLD`] rows, so
    /// that recovery resumes and commits the unfinished transactions against partial indexes
    /// (`db-sofort-continue-hybrid`, `db-sofort-continue-persistent`,
    /// `db-sofort-continue-instant`).
    pub fn continuable_with(txns: u64, placement: SofortIndexPlacement, instant: bool) -> DbTarget {
        let name = match (placement, instant) {
            (SofortIndexPlacement::Dram, false) => "db-sofort-continue",
            (SofortIndexPlacement::Dram, true) => "db-sofort-continue-instant",
            (SofortIndexPlacement::Hybrid, false) => "db-sofort-continue-hybrid",
            (SofortIndexPlacement::Persistent, false) => "db-sofort-continue-persistent",
            (SofortIndexPlacement::Hybrid, true) => "db-sofort-continue-hybrid-instant",
            (SofortIndexPlacement::Persistent, true) => "db-sofort-continue-persistent-instant",
        };
        DbTarget {
            kind: EngineKind::Sofort,
            txns,
            name,
            continuable: true,
            instant,
            placement,
            past: false,
            files: false,
            appends: false,
            same_line: false,
            stale: false,
        }
    }

    /// `db-sofort-past` (SOFORT design §16.1): the `db-sofort` workload with every statement
    /// sampled into the past workload, whose PM block is written by the thread crossing every
    /// [`PAST_EVERY`]th sample, after every fifth transaction on request (a model operation
    /// carrying the counts it writes) and after recovery's probe (nested crashes land in
    /// those writes). Recovery must find the block valid (never ignored) and its counts one
    /// complete snapshot: those of the last completed write or of an in-flight or later one,
    /// never less than the completed write's for any shape.
    pub fn past(txns: u64) -> DbTarget {
        DbTarget {
            kind: EngineKind::Sofort,
            txns,
            name: "db-sofort-past",
            continuable: false,
            instant: false,
            placement: SofortIndexPlacement::Dram,
            past: true,
            files: false,
            appends: false,
            same_line: false,
            stale: false,
        }
    }

    /// The paged engine `kind` with its pages and log in block files of the simulated domain
    /// (the file store, [`ferrite::PagedStore::File`], with a page cache of [`FILE_CACHE`]
    /// pages so that eviction runs): a crash loses, keeps or tears (per 512-byte sector)
    /// every write since each file's last sync. `txns` transactions. Under NVWAL
    /// (`db-paged-nvwal-file`) the log is a simulated pool set on the same domain instead of
    /// the log file, so one crash image holds the page file and the PM log together.
    /// For any other engine the workload's create fails (`Unsupported`).
    pub fn paged_files(kind: EngineKind, txns: u64) -> DbTarget {
        DbTarget {
            name: target_name(kind, "-file"),
            files: true,
            ..DbTarget::with_txns(kind, txns)
        }
    }

    /// `db-paged-fast-m2`: FAST whose medium is declared to keep axiom M2
    /// ([`ferrite::PagedConfig::same_line_order`]): in-place bytes on the commit word's line
    /// persist with the word's one flush. The target declares M2, so lines are not torn.
    pub fn fast_same_line(txns: u64) -> DbTarget {
        let kind = EngineKind::Paged { protocol: ferrite::PagedProtocol::Fast };
        DbTarget {
            name: target_name(kind, "-m2"),
            same_line: true,
            ..DbTarget::with_txns(kind, txns)
        }
    }

    /// `db-sofort-stale`: SOFORT created on memory that held durable data before, `txns`
    /// transactions. The workload formats the allocator on the new pool set itself (one slot),
    /// allocates one big block covering its first segment, fills it with [`STALE_BYTE`] (each
    /// line persisted) and frees it, so that the segment returns to the free-segment list;
    /// then it creates the database on that allocator
    /// (`ferrite::internals::database_on_allocator`). Every block SOFORT allocates first —
    /// the catalog, directories, areas, and the tables' MVCC and value blocks — is carved from
    /// that segment's pages, over the stale bytes, as a block reused after a free would be.
    /// A crash before the database's creation returns leaves it unfinished (allowed).
    pub fn stale(txns: u64) -> DbTarget {
        DbTarget {
            name: "db-sofort-stale",
            stale: true,
            ..DbTarget::with_txns(EngineKind::Sofort, txns)
        }
    }

    /// Whether the engine is the paged engine under NVWAL.
    fn nvwal(&self) -> bool {
        self.kind == EngineKind::Paged { protocol: ferrite::PagedProtocol::Nvwal }
    }

    /// The tables of the workload.
    fn tables(&self) -> &'static [Tab] {
        if self.appends { &Tab::WITH_NOTE } else { &Tab::ALL }
    }

    pub(crate) fn options(&self) -> Options {
        // Four transaction slots: slots are reused (and their garbage collected) often.
        let (recovery, rebuild_hold) = if self.instant {
            (ferrite::RecoveryMode::Instant, Some(INSTANT_HOLD))
        } else {
            (ferrite::RecoveryMode::Synchronous, None)
        };
        // One rebuild thread: a synchronous open rebuilds on the opening thread (no thread is
        // spawned: the simulated domain sees the threads of E1's open).
        // WAL checkpoints every 16 frames: the workload checkpoints, restarts the log and
        // commits after the restart several times, not only at close (a lost restart header
        // was found only so, P-PG-22).
        let paged = ferrite::PagedConfig {
            store: if self.files { ferrite::PagedStore::File } else { ferrite::PagedStore::Pm },
            cache_pages: FILE_CACHE,
            checkpoint_frames: 16,
            same_line_order: self.same_line,
            // FASH and FAST on 512-byte pages: the small workload splits leaves and interior
            // pages, merges them and writes overflow chains, each through the in-place paths.
            page_size: if self.appends { 512 } else { 4096 },
            ..Default::default()
        };
        Options::new().engine(self.kind).pmem(pmem_options()).paged(paged).sofort(
            ferrite::SofortConfig {
                slots: 4,
                // The stale target's allocator is made by the workload, with one slot.
                alloc_slots: if self.stale {
                    1
                } else {
                    ferrite::SofortConfig::default().alloc_slots
                },
                recovery,
                recovery_threads: 1,
                rebuild_hold,
                index_placement: self.placement,
                past_sample_every: u32::from(self.past),
                past_persist_every: if self.past { PAST_EVERY } else { 0 },
                ..Default::default()
            },
        )
    }

    /// The instant target's end of recovery: releases the held rebuild, waits for it, and
    /// checks that the complete indexes show the state read through the partial ones.
    fn finish_rebuild(&self, db: &Database, names: &[String], tables: &Contents) -> Vec<String> {
        db.hold_rebuild(None);
        if let Err(x) = db.wait_recovered() {
            return vec![format!("the background index rebuild failed: {x}")];
        }
        let mut problems = engine_check(db);
        let mut r = match db.begin_read() {
            Ok(r) => r,
            Err(x) => return vec![format!("begin_read after the rebuild: {x}")],
        };
        match workload_contents(&mut r, names) {
            Ok(again) if again == *tables => {}
            Ok(again) => problems.push(format!(
                "the rebuilt indexes show another state than the partial ones did: {}",
                diff(tables, &again)
            )),
            Err(x) => problems.push(format!("scan after the rebuild: {x}")),
        }
        problems
    }
}

/// SOFORT's persist sites (and those of the layers under it) whose loss this target cannot
/// detect, with the reason, each named by its file and the words of its `ORDER(...)` comment
/// (`FILE@TEXT`, see `Target::benign_sites`): a site that moves keeps its excuse, a site whose
/// comment changes must be looked at again (the mutation test then fails on it). Found by `ferrite crashtest db-sofort --mutate` and the
/// ignored mutation test of `tests/db.rs`.
const SOFORT_BENIGN: &[(&str, &str)] = &[
    crate::alloc::SINGLE_THREAD_SYNC_DISARM,
    crate::alloc::SINGLE_THREAD_COMMITTED,
    (
        "sofort/pm.rs@ORDER(P-SOF-2): the target is known before a block is staged",
        "P-SOF-2 staging target: it shares its line with the staging slot, which the allocator persists right after; with M2 (declared) the target is durable no later than the slot (the persist matters only without M2)",
    ),
    (
        "sofort/pm.rs@ORDER(P-SOF-2): unstage after publication",
        "P-SOF-2 unstage: recovery finds the staged block published in its target and only clears the slot; the next staged allocation overwrites the slot and persists it",
    ),
    (
        "sofort/recovery.rs@ORDER(P-SOF-1): an empty catalog (no magic) before its parts",
        "P-SOF-1 empty catalog: every line of it is persisted again before creation returns: geometry, checksum and magic (one line) by the checksum and magic persists, the directory and area pointers by their publications (P-SOF-2), the staging line by the first staged allocation, epoch and ceiling by the open that ends creation (P-SOF-3); a crash before that is inside creation, when the store may fail to open (with that line lost, the zero ceiling is reported as a corrupt catalog rather than an unfinished creation)",
    ),
    (
        "sofort/recovery.rs@ORDER(P-SOF-1): the checksum before the magic",
        "P-SOF-1 checksum: it shares the magic's line and is stored before it; with M2 (declared) it is durable no later than the magic",
    ),
    (
        "sofort/txn.rs@ORDER(P-SOF-11): pending finalizations before a clean close",
        "P-SOF-11 close: recovery rolls every committed area forward at every open, clean close or not, so the finalizations close makes durable are redone from the areas",
    ),
    (
        "sofort/txn.rs@ORDER(P-SOF-11): finalizations durable",
        "P-SOF-11 close fence: as its flushes (recovery redoes the finalizations from the committed areas)",
    ),
    (
        "alloc/segments.rs@ORDER(P-ALLOC-4): header before any link",
        "P-ALLOC-4 segment header before its link: this target links a new segment only inside creation (one 1 MiB segment holds the 30- and the 160-transaction workload), where a failed open is allowed, and inside a recovery that finds an orphan segment (grown, never linked), which it puts on the free list: a loss there shows only if a later operation takes that segment again before a crash, which these runs never do; not detected by the 30-transaction, the 160-transaction and the exhaustive 6-transaction runs (seed 0x5eed); alloc-small, which grows and links segments throughout its workload, detects it",
    ),
    (
        "#P-ALLOC-3 [recovery only]",
        "P-ALLOC-3 disarm after a replay inside recovery: if lost, the item stays armed and the next recovery replays it again; its words belong to its slot's segments and pages, which only that slot's operations change, and the slot's next operation overwrites the item first, so a second replay rewrites the values the words hold (the probe's operations after recovery and crashes after them do not show it either)",
    ),
    (
        "sofort/pm.rs@ORDER(P-SOF-2): finish an unstage",
        "P-SOF-2 unstage inside recovery: if it is lost, the next recovery finds the same staged, published block and clears the slot again, and the next staged allocation overwrites the slot and persists it",
    ),
    (
        "sofort/txn.rs@ORDER(P-SOF-20): values (non-temporal ones drained too) and lock durable",
        "P-SOF-20 fence (PM index placements only): the row's flushes it orders stay pending on the inserting thread, and the FPTree insert that follows fences (P-FPT-1: the slot persisted before the bitmap commit) on the same thread before its entry becomes durable, so the row is durable before the entry either way; kept so that the rule does not depend on the tree's internals",
    ),
    (
        "poolset/mod.rs@ORDER(P-PM-2): shutdown state of the set",
        "P-PM-2 shutdown state: it only tells open whether the set was closed cleanly, and SOFORT recovers the same way either way",
    ),
];

/// The file-store targets' names of their two block files (as `Database::create` names them
/// in the database's directory).
const LOG_FILE: &str = "log";
const PAGES_FILE: &str = "pages";

/// The paged engine's persist sites whose loss these targets do not detect (`db-paged-journal`,
/// `db-paged-wal`, `db-paged-nvwal`; `crates/crashtest/tests/paged.rs`), named by file and
/// ORDER comment words like [`SOFORT_BENIGN`]: creation-time sites, and NVWAL's fence between
/// its frames and its commit mark.
const PAGED_BENIGN: &[(&str, &str)] = &[
    (
        "paged/protocol/nvwal.rs@ORDER(P-PG-40): the header fields before the magic",
        "P-PG-40 NVWAL header fields before the magic: they share line 0 with the magic, whose flush follows, so they become durable with it; without this flush a torn image (no M2) can hold the magic without the fields, which open reports as a bad header checksum instead of an unfinished creation: inside the database's creation (its meta page gets its magic only after, P-PG-3), where a failed open is allowed",
    ),
    (
        "paged/protocol/nvwal.rs@ORDER(P-PG-40): header and block 0 durable before the magic is stored",
        "P-PG-40 NVWAL creation's first fence: without it the fields, block 0 and the magic become durable at the second one; a crash in between can leave (torn, no M2) the magic without the fields or block 0, reported as Corrupted instead of an unfinished creation; inside the database's creation (P-PG-3 writes the meta page's magic later), where a failed open is allowed",
    ),
    (
        "paged/protocol/nvwal.rs@ORDER(P-PG-40): creation complete before the log is used",
        "P-PG-40 NVWAL creation's last fence: the log is created inside the database's creation, whose P-PG-3 syncs fence the magic's flush before the meta page gets its magic; a crash before that is inside creation",
    ),
    (
        "paged/protocol/nvwal.rs@ORDER(P-PG-41): the frames (and new blocks' lines, P-PG-43) durable before the commit mark",
        "P-PG-41 NVWAL's frames fence (Algorithm 1 line 27-28), kept as the paper and the issue specify (2 fences per commit): without it the frames' write-back and the commit mark's complete at the same fence, and an image with the mark but not every frame is rejected by the checksum chain (the commit mark is bound to its frame's checksum, which chains every frame before it), i.e. the unacknowledged commit is aborted, which is allowed. With the fence, recovery never needs the checksum to reject a torn commit (only media damage); without it the commit costs 1 fence. Not shown needed by this target",
    ),
    (
        "paged/store/pmfile.rs@ORDER(P-PG-1): the directory (header and empty entries) before its magic",
        "P-PG-1 directory before its magic: the header fields share line 0 with the magic, which the next persist flushes (so they become durable with it), and the entries are zero on a fresh segment; without the first persist a torn image (no M2) can hold the magic without the fields, which open reports as a bad checksum instead of an unfinished creation: either way inside creation, where a failed open is allowed",
    ),
    (
        "paged/pager.rs@ORDER(P-PG-3): the meta page without its magic first",
        "P-PG-3 meta fields before the magic: the magic write rewrites the whole meta page (fields included) and flushes it, so the fields become durable with the magic; without this flush a torn image (no M2) can hold the magic without the fields, reported as a bad meta checksum instead of an unfinished creation: inside creation, where a failed open is allowed",
    ),
    (
        "paged/pager.rs@ORDER(P-PG-3): meta and catalog root durable before the magic",
        "P-PG-3 first creation sync: without it, the catalog root and the meta fields become durable at the second sync, together with the magic (the catalog root is flushed before the magic is written); what a crash in between can leave differs only in torn images (no M2): the magic without the fields or the root, which open reports as a bad checksum or a corrupt root instead of an unfinished creation; inside creation, where a failed open is allowed. On block files (the file store) likewise: until the second sync each sector of the root and the meta page is lost or kept on its own, and an image with the magic but not the root or the fields fails to open, inside creation",
    ),
];

/// [`SOFORT_BENIGN`] and `extra`, built once into `list`.
fn sofort_benign_and(
    list: &'static OnceLock<Vec<(&'static str, &'static str)>>,
    extra: &[(&'static str, &'static str)],
) -> &'static [(&'static str, &'static str)] {
    list.get_or_init(|| SOFORT_BENIGN.iter().chain(extra).copied().collect())
}

/// `db-sofort-instant`'s undetected sites: SOFORT's, and one that is not shown harmless.
fn sofort_instant_benign() -> &'static [(&'static str, &'static str)] {
    static LIST: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    sofort_benign_and(
        &LIST,
        &[(
            "alloc/redo.rs@ORDER(P-ALLOC-3): disarm after the writes are durable",
            "P-ALLOC-3 disarm after a commit: NOT shown harmless, only not detected here. db-sofort detects it with seed 0x5eed (its probe runs allocator operations after recovery and a nested crash lands after them); this target runs the same workload and probe, but its recoveries differ (instant open, the held rebuild) and its random nested crashes (5 % in the mutation test) did not land where the loss shows. Undetected by db-sofort too with other seeds (2026-11-25, a time-based seed)",
        )],
    )
}

/// `db-sofort-stale`'s undetected sites: SOFORT's, and two of the stale fill's, which runs
/// inside the database's creation.
fn sofort_stale_benign() -> &'static [(&'static str, &'static str)] {
    static LIST: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    sofort_benign_and(
        &LIST,
        &[
            (
                "crashtest/src/db.rs@ORDER(P-APP-1): stale bytes durable before their block is freed",
                "the workload's own stale bytes in the segment it frees: without their persist the segment stays zero on media where nothing else is written back, which only makes the test weaker",
            ),
            (
                "alloc/big.rs@ORDER(P-ALLOC-4): header and table before the link",
                "P-ALLOC-4 new big segment's header and unit table before its link: the stale fill's big block takes the only big segment this target makes, inside the database's creation, where a failed open is allowed (SOFORT's own blocks are small); alloc-big detects it",
            ),
        ],
    )
}

/// The byte `db-sofort-stale` leaves in its freed segment: as an MVCC field,
/// `0xa5a5_a5a5_a5a5_a5a5` is a timestamp above any the workload reaches.
pub const STALE_BYTE: u8 = 0xA5;

/// `db-sofort-stale`'s allocator (see [`DbTarget::stale`]): formatted on `set` with one slot;
/// one big block as large as a segment holds is allocated into the root, filled with
/// [`STALE_BYTE`] one line at a time, each line persisted before the next is written (so a
/// crash point here has one pending line and costs few images), and freed, which returns its
/// segment to the free-segment list with the bytes durable in it.
fn stale_allocator(set: PoolSet) -> Result<Arc<ferrite::alloc::PAllocator>, String> {
    let e = |x: ferrite::storage::StorageError| format!("stale fill: {x}");
    let pe = |x: ferrite_pmem::Error| format!("stale fill: {x}");
    let a = ferrite::alloc::PAllocator::create(Arc::new(set), 1).map_err(e)?;
    let root = a.root_location();
    let size = a.big_capacity();
    let b = a.allocate(size, root).map_err(e)?;
    let s = a.pool();
    let g = s.resolve_range(b, size).map_err(pe)?;
    for line in (g..g + size).step_by(64) {
        s.fill(line, 64, STALE_BYTE).map_err(pe)?;
        s.persist(line, 64).map_err(pe)?; // ORDER(P-APP-1): stale bytes durable before their block is freed
    }
    a.deallocate(root).map_err(e)?;
    Ok(Arc::new(a))
}

/// Whether `kind` relies on axiom M2 (same-line stores durable in order). SOFORT does: its
/// commit word shares the area's header line with what it commits (P-SOF-7), and `CTS`/`DTS`
/// pairs share a line. An engine not listed here is torn at word granularity.
fn relies_on_m2(kind: EngineKind) -> bool {
    kind.name() == "sofort"
}

/// The database on `set`: created (`create`) or opened and recovered.
pub(crate) fn on_pool_set(
    set: PoolSet,
    options: &Options,
    create: bool,
) -> ferrite::Result<Database> {
    ferrite::internals::database_on_pool_set(set, options, create)
}

/// The engine's own consistency check (`Database::check`: for SOFORT the allocator's check,
/// then rows, MVCC entries, indexes and heap against each other), as a list of problems.
pub(crate) fn engine_check(db: &Database) -> Vec<String> {
    match db.check() {
        Ok(_) => Vec::new(),
        Err(e) => vec![format!("the engine's check() failed: {e}")],
    }
}

/// Transactions opened at once by the probe: as many as the target's slots, so that every
/// slot's area is rewritten after recovery (slots are handed out from a free list, and four
/// transactions open at once hold all four, whichever the workload used last).
const PROBE_TXNS: i64 = 4;
/// Rows each probe transaction inserts: beyond an area's four inline entries, so the commit
/// rewrites the area's entry lines beyond its header too (P-SOF-6).
const PROBE_ROWS: i64 = 5;
/// Probe rows have account ids from here on (the workload's are below). One probe uses ids
/// `base + 10 t + j` (transaction `t`, row `j`) with `base` a multiple of 100.
const PROBE_BASE: i64 = 1000;

/// Every table's rows in primary-key order without the probe's rows (account ids from
/// [`PROBE_BASE`] on), read in one snapshot: the state the workload wrote.
fn workload_contents(r: &mut dyn ferrite::Read, names: &[String]) -> ferrite::Result<Contents> {
    let mut out = BTreeMap::new();
    for n in names {
        let scan = if n == Tab::Account.name() {
            Scan::primary().range(..PROBE_BASE)
        } else {
            Scan::primary()
        };
        out.insert(n.clone(), r.scan(n, &scan)?);
    }
    Ok(out)
}

/// A digest of a state (FNV-1a, 64 bits, over each table's name and rows), as 16 hex digits:
/// what a probe transaction read, stored in the rows it writes.
fn digest(c: &Contents) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, rows) in c {
        let text = std::iter::once(name.clone()).chain(rows.iter().map(|r| encode_row(r)));
        for part in text {
            for b in part.bytes().chain([b'\n']) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    format!("{h:016x}")
}

/// Splits an earlier probe's rows out of `tables` (a crash inside a recovery, after some of
/// its probe transactions committed, leaves them) and checks them: each probe transaction is
/// there whole or not at all, and each read exactly the workload state recovered now (its
/// rows carry the digest of what it read). A probe transaction that committed depends on the
/// state it read; if that state is gone, recovery lost what an earlier recovery had made
/// visible (for SOFORT: a roll-forward that was not durable before the slot's area was
/// rewritten, P-SOF-10). Returns the problems and the `base` of the next probe.
fn split_probe_rows(tables: &mut Contents) -> (Vec<String>, i64) {
    let Some(rows) = tables.get_mut(Tab::Account.name()) else {
        return (Vec::new(), PROBE_BASE);
    };
    let (probe_rows, kept): (Vec<Row>, Vec<Row>) = std::mem::take(rows)
        .into_iter()
        .partition(|r| r[0].as_i64().is_none_or(|k| k >= PROBE_BASE));
    *rows = kept;
    let now = digest(tables);
    let mut problems = Vec::new();
    let mut groups: BTreeMap<i64, i64> = BTreeMap::new();
    for r in &probe_rows {
        let id = r[0].as_i64().unwrap_or(-1);
        *groups.entry(id.div_euclid(10)).or_default() += 1;
        if r[1].as_str() != Some(now.as_str()) {
            problems.push(format!(
                "a probe transaction of an earlier recovery committed after reading the state \
                 with digest {} (its row {id}), but the state recovered now has digest {now}: \
                 what that recovery showed was not durable",
                r[1]
            ));
            break;
        }
    }
    for (g, n) in &groups {
        if *n != PROBE_ROWS {
            problems.push(format!(
                "probe transaction {}: {n} of its {PROBE_ROWS} rows survived",
                g * 10
            ));
        }
    }
    let top = probe_rows.iter().filter_map(|r| r[0].as_i64()).max();
    let base = top.map_or(PROBE_BASE, |t| (t.div_euclid(100) + 1) * 100);
    (problems, base)
}

/// Work after recovery: [`PROBE_TXNS`] transactions open at once (one per slot; one after the
/// other on an engine with one writer at a time), each reads
/// the workload's state (`seen`, its digest, is what the recovery showed), inserts
/// [`PROBE_ROWS`] rows that carry the digest of what it read, and commits; then the rows are
/// read back. Returns the problems.
///
/// It runs on a thread of its own: a fence orders only its own thread's flushes, so the
/// probe's fences do not make durable what recovery flushed on the opening thread and did not
/// fence (P-SOF-10's fence is checked, not covered by the probe's). Its commits rewrite every
/// slot's area; a nested crash after one (or inside one) shows whether recovery's writes were
/// durable before (a lost roll-forward shows as a probe row whose digest differs from the
/// state recovered next, `split_probe_rows`).
fn probe(db: &Database, base: i64, names: &[String], seen: &str) -> Vec<String> {
    let run = || -> ferrite::Result<Vec<String>> {
        let mut problems = Vec::new();
        let mut txs = Vec::new();
        // An engine with one writer at a time (the paged engine: `Busy` for a second) gets
        // its probe transactions one after the other.
        let one_at_a_time = db.engine().concurrency().writers != ferrite::WhileWriting::Proceed;
        for t in 0..PROBE_TXNS {
            let mut tx = db.begin()?;
            let read = digest(&workload_contents(&mut tx, names)?);
            if read != seen {
                problems.push(format!(
                    "probe transaction {t} read a state with digest {read}, the recovery showed {seen}"
                ));
            }
            for j in 0..PROBE_ROWS {
                let id = base + t * 10 + j;
                tx.insert("account", vec![Value::I64(id), read.as_str().into(), Value::I64(j)])?;
            }
            if one_at_a_time {
                tx.commit()?;
            } else {
                txs.push(tx);
            }
        }
        for tx in txs {
            tx.commit()?;
        }
        let mut r = db.begin_read()?;
        let got = r.scan("account", &Scan::primary().range(base..))?;
        if got.len() != (PROBE_TXNS * PROBE_ROWS) as usize {
            problems.push(format!(
                "after recovery, {} probe rows committed, {} read back",
                PROBE_TXNS * PROBE_ROWS,
                got.len()
            ));
        }
        Ok(problems)
    };
    std::thread::scope(|s| match s.spawn(run).join() {
        Ok(r) => r.unwrap_or_else(|e| vec![format!("the recovered database is not usable: {e}")]),
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            vec![format!("the probe after recovery panicked: {why}")]
        }
    })
}

/// A random printable string of `len` characters.
fn word(rng: &mut SplitMix64, len: u64) -> String {
    (0..len).map(|_| char::from(b'a' + (rng.next_u64() % 26) as u8)).collect()
}

fn pick<T: Copy>(rng: &mut SplitMix64, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[(rng.next_u64() % v.len() as u64) as usize])
}

/// Generates the write set of one transaction over `w` (the state it starts from), applying
/// each write to `w`.
fn gen_writes(rng: &mut SplitMix64, w: &mut Mirror) -> Vec<Write> {
    let mut out = Vec::new();
    let n = match rng.next_u64() % 8 {
        0 => 5 + rng.next_u64() % 3, // beyond four rows: the commit's extension lines
        1..=3 => 1,
        _ => 2 + rng.next_u64() % 2,
    };
    while (out.len() as u64) < n {
        let accounts: Vec<i64> =
            w.get(&Tab::Account).map(|m| m.keys().copied().collect()).unwrap_or_default();
        let items: Vec<i64> =
            w.get(&Tab::Item).map(|m| m.keys().copied().collect()).unwrap_or_default();
        let free_acc: Vec<i64> = (0..ACCOUNTS).filter(|k| !accounts.contains(k)).collect();
        let free_items: Vec<i64> = (0..ITEMS).filter(|k| !items.contains(k)).collect();
        let used_codes: BTreeSet<String> = w
            .get(&Tab::Item)
            .map(|m| m.values().filter_map(|r| r[1].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let free_codes: Vec<u64> =
            (0..CODES).filter(|c| !used_codes.contains(&format!("c{c}"))).collect();
        let owner = |rng: &mut SplitMix64| OWNERS[(rng.next_u64() % 3) as usize];
        let payload = |rng: &mut SplitMix64| {
            let len = match rng.next_u64() % 4 {
                0 => 0,
                1 => rng.next_u64() % 600,
                _ => rng.next_u64() % 80,
            };
            Value::Bytes((0..len).map(|_| rng.next_u64() as u8).collect())
        };
        let r = rng.next_u64() % 12;
        let write = match r {
            // A transfer: two account updates.
            0..=3 if accounts.len() >= 2 => {
                let a = pick(rng, &accounts).unwrap_or(0);
                let b = pick(rng, &accounts).unwrap_or(0);
                if a == b {
                    continue;
                }
                let amount = (rng.next_u64() % 50) as i64;
                let mut ra = w[&Tab::Account][&a].clone();
                let mut rb = w[&Tab::Account][&b].clone();
                ra[2] = Value::I64(ra[2].as_i64().unwrap_or(0) - amount);
                rb[2] = Value::I64(rb[2].as_i64().unwrap_or(0) + amount);
                let first = Write::Update(Tab::Account, a, ra);
                first.apply_mirror(w);
                out.push(first);
                Write::Update(Tab::Account, b, rb)
            }
            0..=4 => match pick(rng, &free_acc) {
                Some(k) => Write::Insert(
                    Tab::Account,
                    vec![
                        Value::I64(k),
                        owner(rng).into(),
                        Value::I64((rng.next_u64() % 1000) as i64),
                    ],
                ),
                None => continue,
            },
            5 => match pick(rng, &accounts) {
                Some(k) if rng.next_u64().is_multiple_of(2) => Write::Delete(Tab::Account, k),
                Some(k) => {
                    let mut row = w[&Tab::Account][&k].clone();
                    row[1] = owner(rng).into();
                    Write::Update(Tab::Account, k, row)
                }
                None => continue,
            },
            6..=7 => match (pick(rng, &free_items), pick(rng, &free_codes)) {
                (Some(k), Some(c)) => Write::Insert(
                    Tab::Item,
                    vec![
                        Value::I64(k),
                        format!("c{c}").into(),
                        Value::I64((rng.next_u64() % 4) as i64),
                        payload(rng),
                    ],
                ),
                _ => continue,
            },
            8..=9 => match pick(rng, &items) {
                Some(k) => {
                    let mut row = w[&Tab::Item][&k].clone();
                    match rng.next_u64() % 3 {
                        0 => {
                            if let Some(c) = pick(rng, &free_codes) {
                                row[1] = format!("c{c}").into();
                            }
                        }
                        1 => row[2] = Value::I64((rng.next_u64() % 4) as i64),
                        _ => row[3] = payload(rng),
                    }
                    Write::Update(Tab::Item, k, row)
                }
                None => continue,
            },
            _ => match pick(rng, &items) {
                Some(k) => Write::Delete(Tab::Item, k),
                None => continue,
            },
        };
        write.apply_mirror(w);
        out.push(write);
    }
    // Now and then an account gets an owner of its own (outside the shared three, of varying
    // length): index entries move between keys that no other row has.
    if rng.next_u64().is_multiple_of(16)
        && let Some(k) = w.get(&Tab::Account).and_then(|m| m.keys().next().copied())
    {
        let mut row = w[&Tab::Account][&k].clone();
        let len = 1 + rng.next_u64() % 12;
        row[1] = Value::Str(word(rng, len));
        let upd = Write::Update(Tab::Account, k, row);
        upd.apply_mirror(w);
        out.push(upd);
    }
    out
}

/// Every table's rows in primary-key order, read in one snapshot.
pub(crate) fn contents(
    r: &mut dyn ferrite::Read,
    names: &[String],
) -> ferrite::Result<BTreeMap<String, Vec<Row>>> {
    let mut out = BTreeMap::new();
    for n in names {
        out.insert(n.clone(), r.scan(n, &Scan::primary())?);
    }
    Ok(out)
}

pub(crate) fn mirror_contents(m: &Mirror, tables: &[Tab]) -> BTreeMap<String, Vec<Row>> {
    tables
        .iter()
        .map(|t| {
            (
                t.name().to_owned(),
                m.get(t).map(|r| r.values().cloned().collect()).unwrap_or_default(),
            )
        })
        .collect()
}

/// A short description of how `found` differs from `want`.
pub(crate) fn diff(
    want: &BTreeMap<String, Vec<Row>>,
    found: &BTreeMap<String, Vec<Row>>,
) -> String {
    let mut s = String::new();
    let names: BTreeSet<&String> = want.keys().chain(found.keys()).collect();
    for n in names {
        let (Some(a), Some(b)) = (want.get(n), found.get(n)) else {
            let _ = write!(
                s,
                "table {n}: expected {}, found {}; ",
                want.contains_key(n),
                found.contains_key(n)
            );
            continue;
        };
        let key = |r: &Row| r[0].clone();
        let a: BTreeMap<Value, &Row> = a.iter().map(|r| (key(r), r)).collect();
        let b: BTreeMap<Value, &Row> = b.iter().map(|r| (key(r), r)).collect();
        for (k, ra) in &a {
            match b.get(k) {
                None => {
                    let _ = write!(s, "{n} {k}: missing (expected {}); ", encode_row(ra));
                }
                Some(rb) if rb != ra => {
                    let _ = write!(
                        s,
                        "{n} {k}: expected {}, found {}; ",
                        encode_row(ra),
                        encode_row(rb)
                    );
                }
                _ => {}
            }
        }
        for (k, rb) in &b {
            if !a.contains_key(k) {
                let _ = write!(s, "{n} {k}: unexpected row {}; ", encode_row(rb));
            }
        }
    }
    s
}

/// The problems of the secondary indexes of `table`: an index scan must return exactly the
/// table's rows, ordered by the index's columns, and a unique index no key twice.
pub(crate) fn index_problems(
    db: &Database,
    r: &mut dyn ferrite::Read,
    table: &str,
    rows: &[Row],
) -> Vec<String> {
    let mut problems = Vec::new();
    let schema = match db.table_schema(table) {
        Ok(s) => s,
        Err(e) => return vec![format!("{table}: schema: {e}")],
    };
    let col = |name: &str| schema.columns().iter().position(|c| c.name() == name);
    let mut sorted_rows = rows.to_vec();
    sorted_rows.sort();
    for ix in schema.indexes() {
        let got = match r.scan(table, &Scan::index(ix.name())) {
            Ok(g) => g,
            Err(e) => {
                problems.push(format!("{table}.{}: scan fails: {e}", ix.name()));
                continue;
            }
        };
        let positions: Vec<usize> = ix.columns().iter().filter_map(|c| col(c)).collect();
        let keys: Vec<Vec<&Value>> =
            got.iter().map(|row| positions.iter().map(|&p| &row[p]).collect()).collect();
        for (i, pair) in keys.windows(2).enumerate() {
            if pair[0] > pair[1] || (ix.is_unique() && pair[0] == pair[1]) {
                problems.push(format!(
                    "{table}.{}: entries {i} and {} out of order or duplicated in a unique index: {:?} then {:?}",
                    ix.name(),
                    i + 1,
                    pair[0],
                    pair[1]
                ));
                break;
            }
        }
        let mut got_sorted = got.clone();
        got_sorted.sort();
        if got_sorted != sorted_rows {
            problems.push(format!(
                "{table}.{}: the index holds {} rows, the table {}; they differ",
                ix.name(),
                got.len(),
                rows.len()
            ));
        }
    }
    problems
}

impl Target for DbTarget {
    type Op = DbOp;
    type Recovered = Recovered;

    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        if self.continuable && (self.instant || self.placement != SofortIndexPlacement::Dram) {
            "db-sofort-continue with PM index placements or instant recovery (held): resume and commit at recovery against PM or partial indexes, checked against the reference engine"
        } else if self.continuable {
            "db-sofort with continuable transactions: a crash inside a statement, then resume and commit at recovery, checked against the reference engine"
        } else if self.stale {
            "db-sofort created over a freed segment full of durable stale bytes: every first block of the database (MVCC blocks included) reuses memory that held data"
        } else if self.past {
            "db-sofort with the past workload's PM block written by the workload and the probe: recovery finds one whole snapshot, never an older or torn copy"
        } else if self.instant {
            "db-sofort recovered with instant recovery: reads, checks and probe commits while the index rebuild is held, then again after it"
        } else {
            "a persistent engine behind the Database API: seeded transactions over two indexed tables, checked against the reference engine"
        }
    }
    fn axioms(&self) -> Axioms {
        Axioms { m2: relies_on_m2(self.kind) || self.same_line }
    }
    fn rules(&self) -> &'static [&'static str] {
        match self.kind.name() {
            // P-SOF-33 (the continuation log's clear at commit) persists nothing: it is
            // flushed with the finalization's lines.
            "sofort" if self.continuable && self.placement != SofortIndexPlacement::Dram => &[
                "P-SOF-1", "P-SOF-2", "P-SOF-3", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10",
                "P-SOF-11", "P-SOF-20", "P-SOF-30", "P-SOF-31", "P-SOF-32",
            ],
            "sofort" if self.continuable => &[
                "P-SOF-1", "P-SOF-2", "P-SOF-3", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10",
                "P-SOF-11", "P-SOF-30", "P-SOF-31", "P-SOF-32",
            ],
            "sofort" if self.past => &[
                "P-SOF-1", "P-SOF-2", "P-SOF-3", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10",
                "P-SOF-11", "P-SOF-50", "P-SOF-51",
            ],
            // P-SOF-8 (the finalization) persists nothing: its lines are flushed at the next
            // F1, under P-SOF-5.
            "sofort" if self.placement != SofortIndexPlacement::Dram => &[
                "P-SOF-1", "P-SOF-2", "P-SOF-3", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10",
                "P-SOF-11", "P-SOF-20",
            ],
            "sofort" => &[
                "P-SOF-1", "P-SOF-2", "P-SOF-3", "P-SOF-5", "P-SOF-6", "P-SOF-7", "P-SOF-10",
                "P-SOF-11",
            ],
            _ => &[],
        }
    }
    fn benign_sites(&self) -> &'static [(&'static str, &'static str)] {
        // db-sofort-continue too: its mutation check found no other benign site.
        match self.kind.name() {
            "sofort" if self.instant => sofort_instant_benign(),
            "sofort" if self.stale => sofort_stale_benign(),
            "sofort" => SOFORT_BENIGN,
            n if n.starts_with("paged-") => PAGED_BENIGN,
            _ => &[],
        }
    }
    fn min_images(&self) -> u64 {
        200
    }

    fn workload(&self, ctx: &mut Ctx<DbOp>) -> Result<(), String> {
        let options = self.options();
        let e = |what: &str, e: ferrite::Error| format!("{what}: {e}");
        let db = if self.files && self.nvwal() {
            let t = ctx.begin(DbOp::Create);
            // The log's pool set first, as `Database::create` makes them.
            let set = ctx.create_pool_set(&pmem_options())?;
            let pages = ctx.create_block_file(PAGES_FILE)?;
            let db =
                ferrite::internals::database_on_block_file_and_pool_set(pages, set, &options, true)
                    .map_err(|x| e("create", x))?;
            ctx.done(t);
            db
        } else if self.files {
            let t = ctx.begin(DbOp::Create);
            // The log first, as `Database::create` makes them (a page file without its log is
            // a creation that did not finish).
            let log = ctx.create_block_file(LOG_FILE)?;
            let pages = ctx.create_block_file(PAGES_FILE)?;
            let db = ferrite::internals::database_on_block_files(pages, log, &options, true)
                .map_err(|x| e("create", x))?;
            ctx.done(t);
            db
        } else if self.stale {
            let set = ctx.create_pool_set(&pmem_options())?;
            let t = ctx.begin(DbOp::Create);
            let a = stale_allocator(set)?;
            let db = ferrite::internals::database_on_allocator(a, &options)
                .map_err(|x| e("create", x))?;
            ctx.done(t);
            db
        } else {
            let set = ctx.create_pool_set(&pmem_options())?;
            let t = ctx.begin(DbOp::Create);
            let db = on_pool_set(set, &options, true).map_err(|x| e("create", x))?;
            ctx.done(t);
            db
        };
        for &tab in self.tables() {
            let t = ctx.begin(DbOp::Table(tab));
            db.create_table(tab.schema()).map_err(|x| e("create_table", x))?;
            ctx.done(t);
        }
        let mut mirror = Mirror::new();
        // Deferred commits not yet waited for: (ticket, model token, txn number).
        let mut deferred = Vec::new();
        let mut rng = ctx.fork_rng();
        for id in 1..=self.txns {
            if self.past && id % 5 == 0 {
                // Nothing runs beside it: the counts now are what the write persists.
                let t = ctx.begin(DbOp::Past(db.past_workload()));
                db.persist_past_workload().map_err(|x| e("persist_past_workload", x))?;
                ctx.done(t);
            }
            let mut w = mirror.clone();
            let writes = if self.appends && rng.next_u64().is_multiple_of(3) {
                // One row appended at the end of `note`: a single-leaf transaction.
                let next =
                    mirror.get(&Tab::Note).and_then(|m| m.keys().last()).map_or(0, |k| k + 1);
                let body: Vec<u8> =
                    (0..rng.next_u64() % 40).map(|_| rng.next_u64() as u8).collect();
                let wr = Write::Insert(Tab::Note, vec![Value::I64(next), Value::Bytes(body)]);
                wr.apply_mirror(&mut w);
                vec![wr]
            } else {
                gen_writes(&mut rng, &mut w)
            };
            let mid = if self.continuable { id * STMT_IDS } else { id };
            if self.continuable && rng.next_u64().is_multiple_of(3) {
                let mut tx = db.begin_continuable().map_err(|x| e("begin_continuable", x))?;
                for (k, wr) in writes.iter().enumerate() {
                    let t = ctx.begin(DbOp::Txn(mid + k as u64 + 1, vec![wr.clone()]));
                    wr.apply(&mut tx).map_err(|x| format!("txn {id}: {wr:?}: {x}"))?;
                    ctx.done(t);
                }
                tx.commit().map_err(|x| format!("txn {id}: continuable commit: {x}"))?;
                mirror = w;
                if id % 2 == 0 {
                    // A continuable transaction that only reads (not in the model: it changes
                    // nothing), then commits or aborts: both clear its log durably (P-SOF-32).
                    let mut ro = db.begin_continuable().map_err(|x| e("begin_continuable", x))?;
                    ro.get("account", 1).map_err(|x| e("get", x))?;
                    ro.scan("item", &Scan::primary().limit(3)).map_err(|x| e("scan", x))?;
                    if id % 4 == 0 {
                        ro.commit().map_err(|x| format!("txn {id}: read-only commit: {x}"))?;
                    } else {
                        ro.abort();
                    }
                }
                continue;
            }
            let mut tx = db.begin().map_err(|x| e("begin", x))?;
            let fail_at =
                rng.next_u64().is_multiple_of(10).then(|| rng.next_u64() as usize % writes.len());
            for (i, wr) in writes.iter().enumerate() {
                if fail_at == Some(i)
                    && let Some(row) = mirror.get(&Tab::Item).and_then(|m| m.values().next())
                    && !writes.iter().any(|x| x.key() == (Tab::Item, row[0].as_i64().unwrap_or(-1)))
                {
                    // A duplicate primary key: a typed error that leaves the transaction usable.
                    match tx.insert("item", row.clone()) {
                        Err(ferrite::Error::DuplicateKey { .. }) => {}
                        other => {
                            return Err(format!("txn {id}: a duplicate insert gave {other:?}"));
                        }
                    }
                }
                wr.apply(&mut tx).map_err(|x| format!("txn {id}: {wr:?}: {x}"))?;
            }
            match rng.next_u64() % 10 {
                0 => tx.abort(),
                1 => drop(tx),
                2 | 3 => {
                    let t = ctx.begin(DbOp::Txn(mid, writes));
                    let ticket = tx.commit_deferred().map_err(|x| e("commit_deferred", x))?;
                    mirror = w;
                    deferred.push((ticket, t));
                    if deferred.len() > (rng.next_u64() % 3) as usize {
                        for (ticket, t) in deferred.drain(..) {
                            db.wait_durable(&ticket).map_err(|x| e("wait_durable", x))?;
                            ctx.done(t);
                        }
                    }
                }
                _ => {
                    let t = ctx.begin(DbOp::Txn(mid, writes));
                    tx.commit().map_err(|x| format!("txn {id}: commit: {x}"))?;
                    ctx.done(t);
                    mirror = w;
                }
            }
        }
        for (ticket, t) in deferred.drain(..) {
            db.wait_durable(&ticket).map_err(|x| e("wait_durable", x))?;
            ctx.done(t);
        }
        agrees_then_close(db, &mirror, self.tables())
    }

    fn recover(&self, image: &CrashImage) -> Result<Recovered, String> {
        let opened = if self.files && self.nvwal() {
            let set = match PoolSet::open_sim(image, &pmem_options()) {
                Ok(s) => s,
                Err(ferrite_pmem::Error::Incomplete { .. }) => {
                    return Ok(Recovered::NotCreated(
                        "the log's pool set's creation did not finish".into(),
                    ));
                }
                Err(x) => return Err(format!("the log's pool set does not open: {x}")),
            };
            let d = set.sim().cloned().ok_or("a simulated pool set without its domain")?;
            d.add_block_files(image).map_err(|x| format!("the block files do not load: {x}"))?;
            let Ok(pages) = BlockFile::open_sim(&d, PAGES_FILE) else {
                return Ok(Recovered::NotCreated("the page file was not created".into()));
            };
            ferrite::internals::database_on_block_file_and_pool_set(
                pages,
                set,
                &self.options(),
                false,
            )
        } else if self.files {
            let d = SimDomain::open_block_image(image)
                .map_err(|x| format!("the block files do not load: {x}"))?;
            let (Ok(log), Ok(pages)) =
                (BlockFile::open_sim(&d, LOG_FILE), BlockFile::open_sim(&d, PAGES_FILE))
            else {
                return Ok(Recovered::NotCreated("the files' creation did not finish".into()));
            };
            ferrite::internals::database_on_block_files(pages, log, &self.options(), false)
        } else {
            let set = match PoolSet::open_sim(image, &pmem_options()) {
                Ok(s) => s,
                Err(ferrite_pmem::Error::Incomplete { .. }) => {
                    return Ok(Recovered::NotCreated(
                        "the pool set's creation did not finish".into(),
                    ));
                }
                Err(x) => return Err(format!("the pool set does not open: {x}")),
            };
            on_pool_set(set, &self.options(), false)
        };
        let db = match opened {
            Ok(db) => db,
            Err(x) => return Ok(Recovered::NotCreated(format!("the database does not open: {x}"))),
        };
        // Before any statement: the counts are those the block held.
        let past = db.past_workload();
        let past_ignored = db.recovery_report().map_or(0, |r| r.past_ignored);
        // Continuable transactions a crash interrupted: resumed and committed (every statement
        // they completed; the interrupted one was rolled back by recovery).
        let mut resumed = Vec::new();
        for u in db.unfinished_transactions().unwrap_or_default() {
            if let Err(x) = db.resume(u.id).and_then(|tx| tx.commit()) {
                resumed.push(format!("resuming unfinished transaction {:#x}: {x}", u.id));
            }
        }
        let names = db.table_names().map_err(|x| format!("table_names: {x}"))?;
        let mut r = db.begin_read().map_err(|x| format!("begin_read: {x}"))?;
        let tables = contents(&mut r, &names).map_err(|x| format!("scan: {x}"))?;
        let mut problems = resumed;
        if self.past && past_ignored != 0 {
            problems.push(format!(
                "the past workload's block was ignored at open ({past_ignored}): a crash left its selected copy incomplete"
            ));
        }
        problems.extend(engine_check(&db));
        for (n, rows) in &tables {
            problems.extend(index_problems(&db, &mut r, n, rows));
        }
        drop(r);
        let mut tables = tables;
        let (earlier, base) = split_probe_rows(&mut tables);
        problems.extend(earlier);
        if problems.is_empty() && tables.contains_key(Tab::Account.name()) {
            problems.extend(probe(&db, base, &names, &digest(&tables)));
        }
        if self.instant && problems.is_empty() {
            problems.extend(self.finish_rebuild(&db, &names, &tables));
        }
        if self.past && problems.is_empty() {
            // The probe's statements were sampled: one more write (nested crashes inside).
            if let Err(x) = db.persist_past_workload() {
                problems.push(format!("writing the past workload after recovery: {x}"));
            }
        }
        drop(db);
        Ok(Recovered::Db { tables, problems, past })
    }

    fn check(&self, rec: &Recovered, m: &ModelView<DbOp>) -> Result<(), String> {
        let created = m.committed.contains(&DbOp::Create);
        let (tables, problems) = match rec {
            Recovered::NotCreated(why) if created => {
                return Err(format!(
                    "the database's creation committed, but recovery found: {why}"
                ));
            }
            Recovered::NotCreated(_) => return Ok(()),
            Recovered::Db { tables, problems, past } => {
                if self.past {
                    past_problem(past, m)?;
                }
                (tables, problems)
            }
        };
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let candidates = expected_states(m)?;
        if candidates.iter().any(|(_, c)| c == tables) {
            return Ok(());
        }
        let (_, base) = &candidates[0];
        let in_flight: Vec<String> = m
            .in_flight
            .iter()
            .map(|op| match op {
                DbOp::Txn(id, _) => format!("txn {id}"),
                other => other.encode(),
            })
            .collect();
        Err(format!(
            "expected the committed state (or it with some of the in-flight [{}] applied whole); found, against the committed state: {}",
            in_flight.join(", "),
            diff(base, tables)
        ))
    }
}

/// `db-sofort-past`'s check of the counts `found` at open against the writes of the model:
/// with `C` the last completed write's counts, `found` must hold at least `C`'s count for every
/// shape (the block holds `C` or a later snapshot: an in-flight write, an automatic one, or the
/// probe's after an earlier recovery, all cumulative), and if it holds exactly as many
/// statements as `C` or as an in-flight write, it must be that snapshot. A mix of two copies
/// would fail the checksum (and be reported ignored); this checks the selector never names an
/// older or torn copy.
fn past_problem(found: &[(String, u64)], m: &ModelView<DbOp>) -> Result<(), String> {
    let snapshot = |op: &DbOp| match op {
        DbOp::Past(c) => Some(c.iter().cloned().collect::<BTreeMap<String, u64>>()),
        _ => None,
    };
    let found: BTreeMap<String, u64> = found.iter().cloned().collect();
    let total = |c: &BTreeMap<String, u64>| c.values().sum::<u64>();
    let Some(last) = m.committed.iter().rev().find_map(snapshot) else { return Ok(()) };
    if let Some((q, n)) = last.iter().find(|(q, n)| found.get(*q).copied().unwrap_or(0) < **n) {
        return Err(format!(
            "the past workload holds {} of {q}, the last completed write wrote {n}: an older copy was selected (found {found:?})",
            found.get(q).copied().unwrap_or(0)
        ));
    }
    let same_total: Vec<BTreeMap<String, u64>> = std::iter::once(last)
        .chain(m.in_flight.iter().filter_map(snapshot))
        .filter(|c| total(c) == total(&found))
        .collect();
    if !same_total.is_empty() && !same_total.contains(&found) {
        return Err(format!(
            "the past workload's counts {found:?} are not the snapshot of a write with as many statements ({same_total:?})"
        ));
    }
    Ok(())
}

/// The states a correct recovery may produce, computed with the reference engine: every
/// committed transaction, plus each subset of the in-flight ones, each applied whole, in the
/// order they began (their numbers). A subset is possible only if it is closed under shared
/// keys: an in-flight transaction that is left out takes every later transaction that shares a
/// row with it along (a committed one cannot be durable without what it read and overwrote,
/// `docs/design/api.md` §5). The first state is the one with no in-flight transaction if that
/// is possible. Each is labelled with the in-flight transactions it includes.
pub(crate) fn expected_states(m: &ModelView<DbOp>) -> Result<Vec<(Vec<u64>, Contents)>, String> {
    let e = |what: &str, e: ferrite::Error| format!("the reference engine fails at {what}: {e}");
    let refdb =
        ferrite::internals::reference_database(Default::default()).map_err(|x| e("create", x))?;
    let mut tables: Vec<Tab> = Vec::new();
    let mut ddl_in_flight: Vec<Tab> = Vec::new();
    // (number, committed, writes) of every transaction, in the order they began.
    let mut txns: Vec<(u64, bool, &Vec<Write>)> = Vec::new();
    for (committed, ops) in [(true, &m.committed), (false, &m.in_flight)] {
        for op in ops {
            match op {
                DbOp::Create => {}
                DbOp::Table(t) if committed => {
                    refdb.create_table(t.schema()).map_err(|x| e("create_table", x))?;
                    tables.push(*t);
                }
                DbOp::Table(t) => ddl_in_flight.push(*t),
                DbOp::Txn(id, writes) => txns.push((*id, committed, writes)),
                DbOp::Past(_) => {}
            }
        }
    }
    txns.sort_by_key(|t| t.0);
    // Committed transactions before the first in-flight one: committed in the reference.
    let first = txns.iter().position(|t| !t.1).unwrap_or(txns.len());
    for (id, _, writes) in &txns[..first] {
        let mut tx = refdb.begin().map_err(|x| e("begin", x))?;
        for w in *writes {
            w.apply(&mut tx).map_err(|x| e(&format!("txn {id} {w:?}"), x))?;
        }
        tx.commit().map_err(|x| e("commit", x))?;
    }
    let rest = &txns[first..];
    let in_flight: Vec<usize> = (0..rest.len()).filter(|&i| !rest[i].1).collect();
    if in_flight.len() > MAX_IN_FLIGHT {
        return Err(format!("{} transactions in flight: too many to enumerate", in_flight.len()));
    }
    let keys: Vec<BTreeSet<(Tab, i64)>> =
        rest.iter().map(|(_, _, w)| w.iter().map(Write::key).collect()).collect();
    let names: Vec<String> = tables.iter().map(|t| t.name().to_owned()).collect();
    let mut out = Vec::new();
    'subsets: for mask in 0u32..(1 << in_flight.len()) {
        let chosen: Vec<bool> = {
            let mut c: Vec<bool> = rest.iter().map(|t| t.1).collect();
            for (bit, &i) in in_flight.iter().enumerate() {
                c[i] = mask & (1 << bit) != 0;
            }
            c
        };
        for (i, &kept) in chosen.iter().enumerate() {
            if !kept && (i + 1..rest.len()).any(|j| chosen[j] && !keys[i].is_disjoint(&keys[j])) {
                continue 'subsets;
            }
        }
        let mut tx = refdb.begin().map_err(|x| e("begin", x))?;
        let mut ids = Vec::new();
        for (i, (id, committed, writes)) in rest.iter().enumerate() {
            if !chosen[i] {
                continue;
            }
            if !committed {
                ids.push(*id);
            }
            for w in *writes {
                if w.apply(&mut tx).is_err() {
                    continue 'subsets;
                }
            }
        }
        let state = contents(&mut tx, &names).map_err(|x| e("scan", x))?;
        tx.abort();
        // DDL in flight (only during setup, never beside a transaction): with and without it.
        if !ddl_in_flight.is_empty() {
            let mut with = state.clone();
            for t in &ddl_in_flight {
                with.insert(t.name().to_owned(), Vec::new());
            }
            out.push((ids.clone(), with));
        }
        out.push((ids, state));
    }
    if out.is_empty() {
        return Err("the model admits no state (a committed transaction cannot be replayed)".into());
    }
    out.sort_by_key(|(ids, _)| ids.len());
    Ok(out)
}

/// The end of a workload: the engine agrees with the workload's own mirror of `tables`
/// (contents, the engine's check, every index) before any crash, then the database closes.
pub(crate) fn agrees_then_close(
    db: Database,
    mirror: &Mirror,
    tables: &[Tab],
) -> Result<(), String> {
    let e = |what: &str, e: ferrite::Error| format!("{what}: {e}");
    let names: Vec<String> = tables.iter().map(|t| t.name().to_owned()).collect();
    let mut r = db.begin_read().map_err(|x| e("begin_read", x))?;
    let got = contents(&mut r, &names).map_err(|x| e("scan", x))?;
    let want = mirror_contents(mirror, tables);
    if got != want {
        return Err(format!(
            "before any crash, the database differs from the workload: {}",
            diff(&want, &got)
        ));
    }
    let mut problems = engine_check(&db);
    for n in &names {
        problems.extend(index_problems(&db, &mut r, n, &got[n]));
    }
    drop(r);
    if !problems.is_empty() {
        return Err(format!("before any crash: {}", problems.join("; ")));
    }
    db.close().map_err(|x| e("close", x))
}
