//! The [`Database`] handle: create or open a database with the engine chosen in [`Options`],
//! define tables, start transactions, wait for durability.
//!
//! # Invariants
//! - A `Database` is a thin typed wrapper over one engine (`Arc<dyn Engine>`); everything it
//!   hands to the engine has been checked against the schema.
//! - A [`CommitTicket`] is only accepted by the database that issued it.
//!
//! # Ordering (durability)
//! DDL ([`Database::create_table`]) runs outside transactions and is durable when it returns
//! (for a persistent engine; the reference engine keeps nothing). Commits: see
//! [`Transaction::commit`] and [`Transaction::commit_deferred`].
//!
//! # Concurrency
//! `Database: Send + Sync`; share it by reference (scoped threads) or in an `Arc`. Each thread
//! runs its own transactions; what they meet while a writer is open is
//! [`crate::EngineKind::concurrency`].

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::Engine;
use crate::engine::registry;
use crate::error::{Error, Result};
use crate::options::{EngineKind, Options};
use crate::schema::{Table, TableSchema};
use crate::txn::{CommitTicket, ReadTransaction, Transaction};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What [`Database::open`] recovered and how long it took
/// ([`Database::recovery_report`]). All times are measured from the start of the `open` call.
///
/// With synchronous recovery (the default) `open` returns when every index is rebuilt, so
/// `time_to_first_transaction` is `open`'s whole duration and `time_to_index_rebuild` is at most
/// that. With SOFORT's instant recovery ([`crate::RecoveryMode::Instant`]) `open` returns
/// before the indexes are rebuilt: `time_to_index_rebuild` is known once `indexes_complete`
/// ([`Database::wait_recovered`] waits for it).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Until the storage was mapped and validated and the allocator recovered (before the
    /// engine's own recovery).
    pub time_to_open: Duration,
    /// Until the first transaction could begin (= when `open` returned).
    pub time_to_first_transaction: Duration,
    /// Until every index was rebuilt (zero while `indexes_complete` is false).
    pub time_to_index_rebuild: Duration,
    /// Whether every index is rebuilt (always, for synchronous recovery).
    pub indexes_complete: bool,
    /// Per index rebuilt at this open (`table.primary`, `table.<index>`): until its rebuild
    /// completed (`None`: not yet, or it failed). Empty for engines without such a rebuild.
    pub index_times: Vec<(String, Option<Duration>)>,
    /// Whether the previous opener closed the database cleanly.
    pub clean_shutdown: bool,
    /// Committed transactions whose persistent records recovery examined.
    pub committed_areas: u64,
    /// Version fields of committed transactions that recovery finished.
    pub rolled_forward: u64,
    /// Version fields of uncommitted transactions that recovery undid.
    pub undone: u64,
    /// Live rows found (and indexed).
    pub live_rows: u64,
    /// Row slots found holding garbage (queued for reuse).
    pub garbage_rows: u64,
    /// Tables.
    pub tables: u64,
    /// Sampled statements of the past workload found at open (SOFORT: the PM block that
    /// seeds adaptive recovery's ranking, `docs/design/sofort.md` §16.1; 0 if none).
    pub past_statements: u64,
    /// Past-workload blocks ignored at open (a bad checksum, an unknown version or a bad
    /// pointer: advisory data, logged and skipped, never an error of `open`).
    pub past_ignored: u64,
    /// How the indexes were recovered: `"synchronous"`, `"instant"`, or the adaptive-recovery
    /// configuration used, in the ASCII form of the seed's Table 6.1 labels (`"rk.Qad.R2ad"`; see
    /// [`crate::RecoveryStrategy`]). Empty for engines without an index rebuild.
    pub recovery: String,
}

/// An unfinished continuable transaction that [`Database::open`] found
/// ([`Database::unfinished_transactions`]): resume it with [`Database::resume`] or abort it
/// with [`Database::abort_unfinished`]; unclaimed, it is aborted after
/// [`Options::unfinished_timeout`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfinishedTransaction {
    /// Its id (stable across crashes until it ends).
    pub id: u64,
    /// Statements it completed; the one that was running when the database stopped is
    /// rolled back and must be run again.
    pub statements: u32,
    /// Whether it is read-only (always `false`: only read-write transactions are continuable).
    pub read_only: bool,
    /// When `open` found it (its timeout counts from here).
    pub found_at: std::time::Instant,
}

/// An open database.
///
/// ```
/// use ferrite::{Database, EngineKind, Options, TableSchema, Type, row};
/// // The reference engine is in memory and ignores the path.
/// let db = Database::create("ignored", Options::new().engine(EngineKind::Reference))?;
/// db.create_table(TableSchema::new("kv").column("k", Type::Str).column("v", Type::Bytes).primary_key("k"))?;
///
/// let mut tx = db.begin()?;
/// tx.insert("kv", row!["hello", b"world"])?;
/// let ticket = tx.commit_deferred()?;     // committed and visible ...
/// db.wait_durable(&ticket)?;              // ... and now durable
///
/// let mut r = db.begin_read()?;
/// assert_eq!(r.get("kv", "hello")?, Some(row!["hello", b"world"]));
/// # Ok::<(), ferrite::Error>(())
/// ```
pub struct Database {
    engine: Arc<dyn Engine>,
    id: u64,
    /// The thread that aborts unclaimed unfinished transactions (`start_reaper`); stopped and
    /// joined by `close` and by drop, so it never holds the engine while `close` runs.
    reaper: Option<Reaper>,
}

/// The unfinished-transaction reaper's handle.
struct Reaper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Reaper {
    /// Stops the thread and waits for it (at most one `reap_unfinished` call in progress).
    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some(r) = self.reaper.take() {
            r.stop();
        }
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database").field("engine", &self.engine).field("id", &self.id).finish()
    }
}

impl Database {
    /// Creates a new database at `path` with the engine in `options` (built by the engine
    /// registry, with the engine's settings from `options`).
    ///
    /// Persistent engines fail with an `Io` error of kind `AlreadyExists` if something is at
    /// `path`. The reference engine ([`EngineKind::Reference`]) is in memory: it ignores `path`
    /// and writes nothing.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Database> {
        Ok(Database::from_engine(registry::open(path.as_ref(), &options, true)?))
    }

    /// Opens the database at `path` with the engine in `options` (recovering it after a crash).
    ///
    /// Errors: `Io` of kind `NotFound` if there is none; `Corrupted`, `Incompatible`, `Locked`.
    /// The reference engine keeps nothing on disk, so opening one fails with
    /// [`Error::Unsupported`] (rather than silently returning an empty database).
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Database> {
        let mut db = Database::from_engine(registry::open(path.as_ref(), &options, false)?);
        db.start_reaper();
        Ok(db)
    }

    /// If `open` found unfinished transactions, a thread aborts each one its timeout passes
    /// unclaimed ([`Database::reap_unfinished`] with the current time). It holds the engine
    /// weakly and ends when none is left, or when `close` or drop stops it.
    fn start_reaper(&mut self) {
        let Ok(left) = self.engine.unfinished() else { return };
        if left.is_empty() {
            return;
        }
        let weak = Arc::downgrade(&self.engine);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let spawned = std::thread::Builder::new().name("ferrite-reaper".into()).spawn(move || {
            loop {
                std::thread::park_timeout(Duration::from_millis(500));
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Some(engine) = weak.upgrade() else { return };
                let _ = engine.reap_unfinished(std::time::Instant::now());
                if engine.unfinished().map_or(true, |u| u.is_empty()) {
                    return;
                }
            }
        });
        // Without the thread, unclaimed transactions wait for `reap_unfinished` or a reopen.
        self.reaper = spawned.ok().map(|thread| Reaper { stop, thread });
    }

    /// Starts a **continuable** read-write transaction (SOFORT only; others return
    /// `Unsupported`): like [`Database::begin`], and each statement (`insert`, `update`,
    /// `delete`, `get`, a scan or select) is durable when it returns, though invisible to
    /// others until commit. After a crash, [`Database::open`] lists it in
    /// [`Database::unfinished_transactions`] with the statement that was running rolled back.
    /// Each statement costs two persist barriers more than in a normal transaction.
    pub fn begin_continuable(&self) -> Result<Transaction> {
        Ok(Transaction::new(Arc::clone(&self.engine), self.engine.begin_continuable()?, self.id))
    }

    /// The unfinished continuable transactions that `open` found and nobody has resumed or
    /// aborted yet (each holds one of the engine's transaction slots until then). Errors:
    /// `Unsupported` on engines without continuable transactions.
    pub fn unfinished_transactions(&self) -> Result<Vec<UnfinishedTransaction>> {
        self.engine.unfinished()
    }

    /// Resumes unfinished transaction `id`: a [`Transaction`] that carries on with the same
    /// snapshot, sees its own completed statements, and is validated at commit against
    /// everything it read before and after the crash (serializable). Errors:
    /// `UnknownTransaction` (no such id, or already resumed, aborted or timed out).
    pub fn resume(&self, id: u64) -> Result<Transaction> {
        Ok(Transaction::new(Arc::clone(&self.engine), self.engine.resume(id)?, self.id))
    }

    /// Aborts unfinished transaction `id`. Errors: `UnknownTransaction`.
    pub fn abort_unfinished(&self, id: u64) -> Result<()> {
        self.resume(id)?.abort();
        Ok(())
    }

    /// Aborts every unfinished transaction whose timeout ([`Options::unfinished_timeout`])
    /// has passed at `now`, and returns their ids. The database's background thread calls it
    /// with the current time; tests call it with a chosen one.
    pub fn reap_unfinished(&self, now: std::time::Instant) -> Result<Vec<u64>> {
        self.engine.reap_unfinished(now)
    }

    /// What `open` recovered and how long it took: time to open, to the first transaction and
    /// to the full index rebuild. `None` for a database made by `create`, and for engines that
    /// keep nothing.
    pub fn recovery_report(&self) -> Option<RecoveryReport> {
        self.engine.recovery_report()
    }

    /// Waits until recovery is complete (for SOFORT's instant recovery: every index rebuilt in
    /// the background; at once otherwise) and returns the updated [`RecoveryReport`].
    ///
    /// Errors: `Corrupted` if an index could not be rebuilt (its rows could not be read; the
    /// index stays usable through the slower path of `docs/design/sofort.md` §15, which meets
    /// the same error on the same rows).
    pub fn wait_recovered(&self) -> Result<Option<RecoveryReport>> {
        self.engine.wait_recovered()?;
        Ok(self.engine.recovery_report())
    }

    /// Test hook (SOFORT instant recovery): no background index rebuild passes `hold` rows of
    /// its table; with `Some`, returns once every index reached it (or is complete); `None`
    /// releases the rebuild. Nothing for other engines.
    #[doc(hidden)]
    pub fn hold_rebuild(&self, hold: Option<u64>) {
        self.engine.hold_rebuild(hold);
    }

    /// Test hook (SOFORT): the past workload's sampled statement counts now (loaded at open,
    /// plus those sampled since), most frequent first, by statement shape (`get t0`,
    /// `scan t1 i0`, ...). Empty for other engines.
    #[doc(hidden)]
    pub fn past_workload(&self) -> Vec<(String, u64)> {
        self.engine.past_workload()
    }

    /// Test hook (SOFORT): writes the past workload's PM block now (it is also written every
    /// `SofortConfig::past_persist_every` sampled statements and at close).
    #[doc(hidden)]
    pub fn persist_past_workload(&self) -> Result<()> {
        self.engine.persist_past_workload()
    }

    /// Checks the engine's stored invariants and returns a one-line summary of what it
    /// checked. Call it with no transaction open (in-flight rows of open transactions may be
    /// reported as broken invariants). For SOFORT: the allocator's full check, then
    /// every table's rows, MVCC entries, indexes and heap free space against each other. The
    /// reference engine keeps nothing to check and says so.
    ///
    /// Errors: `Corrupted` naming the first broken invariant.
    pub fn check(&self) -> Result<String> {
        self.engine.check()
    }

    pub(crate) fn from_engine(engine: Arc<dyn Engine>) -> Database {
        Database { engine, id: NEXT_ID.fetch_add(1, Ordering::Relaxed), reaper: None }
    }

    /// The engine behind this database.
    pub fn engine(&self) -> EngineKind {
        self.engine.kind()
    }

    /// Creates a table. Runs outside transactions: transactions already open see the table
    /// (empty) from their next operation on. Errors: `Schema(TableExists)`,
    /// `Schema(InvalidDefinition)`.
    pub fn create_table(&self, schema: TableSchema) -> Result<()> {
        self.engine.create_table(Table::new(schema)?)
    }

    /// The schema of table `name`. Errors: `Schema(UnknownTable)`.
    pub fn table_schema(&self, name: &str) -> Result<TableSchema> {
        Ok(self.engine.table(name)?.schema.clone())
    }

    /// The names of every table, sorted.
    pub fn table_names(&self) -> Result<Vec<String>> {
        self.engine.table_names()
    }

    /// Starts a read-write transaction (serializable).
    pub fn begin(&self) -> Result<Transaction> {
        Ok(Transaction::new(Arc::clone(&self.engine), self.engine.begin()?, self.id))
    }

    /// Starts a read-only transaction (snapshot).
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        Ok(ReadTransaction::new(Arc::clone(&self.engine), self.engine.begin_read()?, self.id))
    }

    /// Returns once the transaction behind `ticket` (and every transaction it depends on) is
    /// durable. Errors: `InvalidArgument` for a ticket of another database.
    pub fn wait_durable(&self, ticket: &CommitTicket) -> Result<()> {
        if ticket.db != self.id {
            return Err(Error::InvalidArgument(
                "the commit ticket belongs to another database".into(),
            ));
        }
        self.engine.wait_durable(ticket.seq)
    }

    /// Closes the database, making everything committed durable and reporting any error
    /// (dropping it closes it too, silently).
    pub fn close(mut self) -> Result<()> {
        if let Some(r) = self.reaper.take() {
            r.stop();
        }
        self.engine.close()
    }
}
