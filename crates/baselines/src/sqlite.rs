//! SQLite through `rusqlite` (SQLite compiled from the bundled amalgamation with `cc`).
//!
//! Configured to be its best honest self for a key-value workload (conventions §6):
//! - one `WITHOUT ROWID` table per logical table, keyed by the primary key
//!   (`k INTEGER PRIMARY KEY NOT NULL, v BLOB NOT NULL`), so a row lives in the primary-key
//!   B-tree itself;
//! - prepared (cached) statements for every operation and for `BEGIN`/`COMMIT`;
//! - explicit transactions: read-write ones start with `BEGIN IMMEDIATE` (take the write lock at
//!   once, so a transaction never fails to upgrade), read-only ones with `BEGIN`;
//! - one connection per thread; writers of one process are serialized by an in-process mutex
//!   before `BEGIN IMMEDIATE` (SQLite admits one writer anyway; this keeps a waiting writer from
//!   sleeping in SQLite's busy handler, which backs off in milliseconds); a busy timeout stays as
//!   the backstop, and a transaction that still meets `SQLITE_BUSY` is retryable;
//! - a page cache (`cache_size`) large enough for the working set, set on every connection;
//! - the journal mode and `synchronous` level chosen by [`SqliteConfig`]; everything else at
//!   SQLite's defaults (4 KiB pages, WAL auto-checkpoint every 1000 pages, no `mmap_size`).
//!
//! [`Sqlite::settings`] reports what the database says it runs with (`sqlite_version()`,
//! `PRAGMA journal_mode`, `synchronous`, `cache_size`, `page_size`, `wal_autocheckpoint`,
//! `compile_options`), queried, not assumed.
//!
//! # Durability
//! - WAL + `synchronous=FULL`: the WAL is fsynced at every commit; a committed transaction
//!   survives power loss (on a medium that honours fsync).
//! - WAL + `synchronous=NORMAL`: the WAL is fsynced only at checkpoints; a commit survives a
//!   process crash but the last transactions may roll back after a power loss.
//! - rollback journal (`DELETE`) + `synchronous=FULL`: journal and database fsynced at every
//!   commit; survives power loss.
//!
//! On tmpfs (`/dev/shm`) an fsync costs next to nothing and nothing survives a power loss;
//! benchmark reports say so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, params};

use crate::error::{Error, Result, check_key, check_table_name};

/// An owned SQL value (a statement parameter): `rusqlite`'s, re-exported so callers need no
/// direct dependency on it.
pub use rusqlite::types::Value as SqlValue;
/// A borrowed SQL value of a result row, valid inside the visitor it is passed to.
pub use rusqlite::types::ValueRef as SqlValueRef;

/// Journal mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JournalMode {
    /// Write-ahead log (`PRAGMA journal_mode=WAL`).
    Wal,
    /// Rollback journal, deleted at commit (`PRAGMA journal_mode=DELETE`, SQLite's default).
    Rollback,
}

impl JournalMode {
    /// The `PRAGMA journal_mode` value.
    pub fn pragma(self) -> &'static str {
        match self {
            JournalMode::Wal => "WAL",
            JournalMode::Rollback => "DELETE",
        }
    }
}

/// `PRAGMA synchronous` level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Synchronous {
    /// `FULL`: sync at every commit.
    Full,
    /// `NORMAL`: in WAL mode, sync only at checkpoints.
    Normal,
}

impl Synchronous {
    /// The `PRAGMA synchronous` value.
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// How to configure a database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    /// Journal mode.
    pub journal: JournalMode,
    /// Sync level.
    pub synchronous: Synchronous,
    /// Page cache per connection, KiB (`PRAGMA cache_size = -cache_kib`).
    pub cache_kib: u64,
    /// Busy timeout per connection, ms (the backstop behind the writer mutex).
    pub busy_timeout_ms: u32,
}

impl SqliteConfig {
    /// The given journal mode and sync level, a 256 MiB page cache and a 5 s busy timeout.
    pub fn new(journal: JournalMode, synchronous: Synchronous) -> Self {
        SqliteConfig { journal, synchronous, cache_kib: 256 * 1024, busy_timeout_ms: 5000 }
    }

    /// What a commit survives under this configuration, in one sentence.
    pub fn durability(&self) -> &'static str {
        match (self.journal, self.synchronous) {
            (JournalMode::Wal, Synchronous::Full) => {
                "commit fsyncs the WAL: survives power loss (on a medium that honours fsync)"
            }
            (JournalMode::Wal, Synchronous::Normal) => {
                "WAL fsynced only at checkpoints: survives a process crash, a power loss may \
                 roll back the last commits"
            }
            (JournalMode::Rollback, Synchronous::Full) => {
                "commit fsyncs journal and database: survives power loss (on a medium that \
                 honours fsync)"
            }
            (JournalMode::Rollback, Synchronous::Normal) => {
                "rollback journal with fewer syncs: survives a process crash, a power loss may \
                 corrupt or roll back"
            }
        }
    }
}

/// The SQL of one table's operations.
#[derive(Debug)]
struct TableSql {
    get: String,
    insert: String,
    update: String,
    delete: String,
    scan: String,
    count: String,
}

impl TableSql {
    fn new(name: &str) -> Self {
        TableSql {
            get: format!("SELECT v FROM {name} WHERE k = ?1"),
            insert: format!("INSERT INTO {name} (k, v) VALUES (?1, ?2)"),
            update: format!("UPDATE {name} SET v = ?2 WHERE k = ?1"),
            delete: format!("DELETE FROM {name} WHERE k = ?1"),
            scan: format!("SELECT k, v FROM {name} WHERE k >= ?1 ORDER BY k LIMIT ?2"),
            count: format!("SELECT count(*) FROM {name}"),
        }
    }
}

/// A SQLite database file with key-value tables; hand out one [`SqliteConn`] per thread.
#[derive(Debug)]
pub struct Sqlite {
    path: PathBuf,
    config: SqliteConfig,
    tables: Arc<[TableSql]>,
    writers: Arc<Mutex<()>>,
    settings: Vec<(String, String)>,
}

/// The SQLite library version (`sqlite3_libversion`).
pub fn version() -> &'static str {
    rusqlite::version()
}

impl Sqlite {
    /// Creates a new database file at `path` (which must not exist) with one key-value table
    /// per name.
    pub fn create(path: &Path, config: SqliteConfig, tables: &[&str]) -> Result<Sqlite> {
        for t in tables {
            check_table_name(t)?;
        }
        let ddl: Vec<String> = tables
            .iter()
            .map(|t| {
                format!(
                    "CREATE TABLE {t} (k INTEGER PRIMARY KEY NOT NULL, v BLOB NOT NULL) \
                     WITHOUT ROWID"
                )
            })
            .collect();
        Self::create_inner(
            path,
            config,
            &ddl,
            tables.iter().map(|t| TableSql::new(t)).collect(),
            "k INTEGER PRIMARY KEY NOT NULL, v BLOB NOT NULL, WITHOUT ROWID",
        )
    }

    /// Creates a new database file at `path` (which must not exist) with the caller's schema:
    /// `ddl` (`CREATE TABLE … WITHOUT ROWID`, `CREATE INDEX …`) runs before anything else, and
    /// `schema` is how the settings describe it. Such a database is used through
    /// [`SqliteTxn::execute`] and [`SqliteTxn::query`]; the key-value operations have no tables.
    pub fn create_with_schema(
        path: &Path,
        config: SqliteConfig,
        ddl: &[String],
        schema: &str,
    ) -> Result<Sqlite> {
        Self::create_inner(path, config, ddl, Vec::new(), schema)
    }

    fn create_inner(
        path: &Path,
        config: SqliteConfig,
        ddl: &[String],
        tables: Vec<TableSql>,
        schema: &str,
    ) -> Result<Sqlite> {
        if path.exists() {
            return Err(Error::Io {
                op: "create",
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        let conn = open(path, &config, true)?;
        // The journal mode is stored in the file for WAL; set it before creating anything.
        let mode: String =
            conn.query_row(&format!("PRAGMA journal_mode={}", config.journal.pragma()), [], |r| {
                r.get(0)
            })?;
        if !mode.eq_ignore_ascii_case(config.journal.pragma()) {
            return Err(Error::InvalidArgument(format!(
                "SQLite refused journal_mode={} (got {mode})",
                config.journal.pragma()
            )));
        }
        for stmt in ddl {
            conn.execute_batch(stmt)?;
        }
        let settings = query_settings(&conn, &config, schema)?;
        drop(conn);
        Ok(Sqlite {
            path: path.to_path_buf(),
            config,
            tables: tables.into(),
            writers: Arc::new(Mutex::new(())),
            settings,
        })
    }

    /// A new connection (one per thread), configured like every other.
    pub fn connect(&self) -> Result<SqliteConn> {
        let conn = open(&self.path, &self.config, false)?;
        Ok(SqliteConn {
            conn,
            tables: Arc::clone(&self.tables),
            writers: Arc::clone(&self.writers),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SqliteConfig {
        &self.config
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the database reports it runs with (queried at creation): `sqlite_version`,
    /// `journal_mode`, `synchronous`, `cache_size`, `page_size`, `wal_autocheckpoint`,
    /// `busy_timeout`, `compile_options`, plus how writers are serialized.
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// Moves every WAL frame into the database and truncates the WAL (no-op in rollback mode),
    /// so that a timed run starts from the same state whatever the load left behind.
    pub fn checkpoint(&self) -> Result<()> {
        if self.config.journal == JournalMode::Wal {
            let conn = open(&self.path, &self.config, false)?;
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        Ok(())
    }
}

fn open(path: &Path, config: &SqliteConfig, create: bool) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(std::time::Duration::from_millis(u64::from(config.busy_timeout_ms)))?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA cache_size=-{};",
        config.synchronous.pragma(),
        config.cache_kib
    ))?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn query_settings(
    conn: &Connection,
    config: &SqliteConfig,
    schema: &str,
) -> Result<Vec<(String, String)>> {
    let one = |sql: &str| -> Result<String> {
        Ok(conn.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0)).map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(s) => s,
            other => format!("{other:?}"),
        })?)
    };
    let sync = match one("PRAGMA synchronous")?.as_str() {
        "0" => "OFF".to_owned(),
        "1" => "NORMAL".to_owned(),
        "2" => "FULL".to_owned(),
        "3" => "EXTRA".to_owned(),
        other => other.to_owned(),
    };
    let mut stmt = conn.prepare("PRAGMA compile_options")?;
    let opts: Vec<String> =
        stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(vec![
        ("sqlite_version".into(), one("SELECT sqlite_version()")?),
        ("journal_mode".into(), one("PRAGMA journal_mode")?.to_uppercase()),
        ("synchronous".into(), sync),
        ("cache_size".into(), format!("{} (KiB when negative)", one("PRAGMA cache_size")?)),
        ("page_size".into(), one("PRAGMA page_size")?),
        ("wal_autocheckpoint".into(), one("PRAGMA wal_autocheckpoint")?),
        ("locking_mode".into(), one("PRAGMA locking_mode")?),
        ("busy_timeout_ms".into(), config.busy_timeout_ms.to_string()),
        ("mmap_size".into(), one("PRAGMA mmap_size")?),
        ("tables".into(), schema.into()),
        (
            "transactions".into(),
            "BEGIN IMMEDIATE (read-write, writers serialized by an in-process mutex) / BEGIN \
             (read-only); prepared statements"
                .into(),
        ),
        ("compile_options".into(), opts.join(" ")),
    ])
}

/// One connection; use it from one thread at a time.
#[derive(Debug)]
pub struct SqliteConn {
    conn: Connection,
    tables: Arc<[TableSql]>,
    writers: Arc<Mutex<()>>,
}

impl SqliteConn {
    fn exec(&self, sql: &str) -> Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    fn finish<R, E: From<Error>>(&self, body: Result<R, E>) -> Result<R, E> {
        match body {
            Ok(v) => match self.exec("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    // A failed COMMIT (busy) leaves the transaction open: end it before retrying.
                    let _ = self.exec("ROLLBACK");
                    Err(e.into())
                }
            },
            Err(e) => {
                let _ = self.exec("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Runs `f` in a read-write transaction (`BEGIN IMMEDIATE` … `COMMIT`); rolls back if `f`
    /// fails. Busy errors are [`Error::Busy`] (retryable).
    pub fn write<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut SqliteTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let writers = Arc::clone(&self.writers);
        let _turn = writers.lock().unwrap_or_else(PoisonError::into_inner);
        self.exec("BEGIN IMMEDIATE")?;
        let body = f(&mut SqliteTxn { conn: &self.conn, tables: &self.tables, writable: true });
        self.finish(body)
    }

    /// Runs `f` in a read-only transaction (`BEGIN` … `COMMIT`).
    pub fn read<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut SqliteTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        self.exec("BEGIN")?;
        let body = f(&mut SqliteTxn { conn: &self.conn, tables: &self.tables, writable: false });
        self.finish(body)
    }
}

/// An open transaction of a [`SqliteConn`].
#[derive(Debug)]
pub struct SqliteTxn<'c> {
    conn: &'c Connection,
    tables: &'c [TableSql],
    writable: bool,
}

impl SqliteTxn<'_> {
    fn table(&self, t: usize) -> Result<&TableSql> {
        self.tables.get(t).ok_or_else(|| Error::InvalidArgument(format!("no table #{t}")))
    }

    fn writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::InvalidArgument("write in a read-only transaction".into()))
        }
    }

    /// Copies the value of `key` into `out`; `false` if there is none.
    pub fn get(&mut self, table: usize, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        let k = check_key(key)?;
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.get)?;
        let found = stmt
            .query_row([k], |r| {
                let v = r.get_ref(0)?.as_blob()?;
                out.clear();
                out.extend_from_slice(v);
                Ok(())
            })
            .optional()?;
        Ok(found.is_some())
    }

    /// Inserts; `false` (and no effect) if the key exists.
    pub fn insert(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        self.writable()?;
        let k = check_key(key)?;
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.insert)?;
        match stmt.execute(params![k, value]) {
            Ok(_) => Ok(true),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the value; `false` (and no effect) if the key does not exist.
    pub fn update(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        self.writable()?;
        let k = check_key(key)?;
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.update)?;
        Ok(stmt.execute(params![k, value])? == 1)
    }

    /// Deletes; `false` if the key does not exist.
    pub fn delete(&mut self, table: usize, key: u64) -> Result<bool> {
        self.writable()?;
        let k = check_key(key)?;
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.delete)?;
        Ok(stmt.execute([k])? == 1)
    }

    /// Visits up to `limit` rows with key `>= start`, in key order; returns how many.
    pub fn scan(
        &mut self,
        table: usize,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize> {
        let k = check_key(start)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.scan)?;
        let mut rows = stmt.query(params![k, limit])?;
        let mut n = 0;
        while let Some(r) = rows.next()? {
            let key: i64 = r.get(0)?;
            let v = r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
            visit(key as u64, v);
            n += 1;
        }
        Ok(n)
    }

    /// Number of rows (a full count; for checks, not timed paths).
    pub fn count(&mut self, table: usize) -> Result<u64> {
        let mut stmt = self.conn.prepare_cached(&self.table(table)?.count)?;
        let n: i64 = stmt.query_row([], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Runs one statement that returns no rows (`INSERT`, `UPDATE`, `DELETE`) with `params`
    /// bound to `?1`, `?2`, …, prepared once per connection and cached; returns the rows it
    /// changed. A violated constraint (a duplicate key) is [`Error::Constraint`] and leaves the
    /// transaction usable.
    pub fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<usize> {
        self.writable()?;
        let mut stmt = self.conn.prepare_cached(sql)?;
        Ok(stmt.execute(rusqlite::params_from_iter(params))?)
    }

    /// Runs one statement that returns rows (`SELECT`, or a write with `RETURNING` in a
    /// read-write transaction), prepared once per connection and cached, and passes each row's
    /// values to `visit`; returns how many rows it visited.
    pub fn query(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        visit: &mut dyn FnMut(&[SqlValueRef<'_>]),
    ) -> Result<usize> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        if !stmt.readonly() {
            self.writable()?;
        }
        let columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut n = 0;
        while let Some(r) = rows.next()? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                values.push(r.get_ref(i)?);
            }
            visit(&values);
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn each_config() -> Vec<SqliteConfig> {
        vec![
            SqliteConfig::new(JournalMode::Wal, Synchronous::Full),
            SqliteConfig::new(JournalMode::Wal, Synchronous::Normal),
            SqliteConfig::new(JournalMode::Rollback, Synchronous::Full),
        ]
    }

    #[test]
    fn operations_and_settings() {
        let dir = tempfile::tempdir().unwrap();
        for (i, cfg) in each_config().into_iter().enumerate() {
            let mut c = cfg.clone();
            c.cache_kib = 1024;
            let db = Sqlite::create(&dir.path().join(format!("db{i}")), c, &["a", "b"]).unwrap();
            let s: std::collections::BTreeMap<_, _> = db.settings().iter().cloned().collect();
            assert_eq!(s["journal_mode"], cfg.journal.pragma());
            assert_eq!(s["synchronous"], cfg.synchronous.pragma());
            assert!(s["compile_options"].contains("THREADSAFE"), "{}", s["compile_options"]);
            let mut conn = db.connect().unwrap();
            conn.write(|t| {
                assert!(t.insert(0, 5, b"five")?);
                assert!(!t.insert(0, 5, b"again")?);
                assert!(t.insert(0, 7, b"seven")?);
                assert!(t.insert(1, 5, b"other table")?);
                assert!(t.update(0, 7, b"SEVEN")?);
                assert!(!t.update(0, 8, b"x")?);
                assert!(!t.delete(0, 9)?);
                Ok::<_, Error>(())
            })
            .unwrap();
            let mut out = Vec::new();
            conn.read(|t| {
                assert!(t.get(0, 7, &mut out)?);
                assert_eq!(out, b"SEVEN");
                assert!(!t.get(0, 6, &mut out)?);
                let mut seen = Vec::new();
                assert_eq!(t.scan(0, 6, 10, &mut |k, v| seen.push((k, v.to_vec())))?, 1);
                assert_eq!(seen, vec![(7, b"SEVEN".to_vec())]);
                assert_eq!(t.count(0)?, 2);
                assert!(t.insert(0, 1, b"x").is_err(), "read-only");
                Ok::<_, Error>(())
            })
            .unwrap();
            // A failing body rolls back.
            let r = conn.write(|t| {
                t.delete(0, 5)?;
                Err::<(), _>(Error::InvalidArgument("stop".into()))
            });
            assert!(r.is_err());
            conn.read(|t| {
                assert!(t.get(0, 5, &mut out)?);
                Ok::<_, Error>(())
            })
            .unwrap();
            db.checkpoint().unwrap();
        }
    }

    #[test]
    fn statements_on_a_callers_schema() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SqliteConfig::new(JournalMode::Wal, Synchronous::Full);
        let ddl = ["CREATE TABLE t (a INTEGER NOT NULL, b INTEGER NOT NULL, s TEXT NOT NULL, \
                    PRIMARY KEY (a, b)) WITHOUT ROWID"
            .to_owned()];
        let db = Sqlite::create_with_schema(&dir.path().join("s"), cfg, &ddl, "t(a, b)").unwrap();
        assert!(db.settings().iter().any(|(k, v)| k == "tables" && v == "t(a, b)"));
        let mut c = db.connect().unwrap();
        let ins = "INSERT INTO t (a, b, s) VALUES (?1, ?2, ?3)";
        let row =
            |a, b, s: &str| [SqlValue::Integer(a), SqlValue::Integer(b), SqlValue::Text(s.into())];
        c.write(|t| {
            assert_eq!(t.execute(ins, &row(1, 2, "x"))?, 1);
            assert_eq!(t.execute(ins, &row(1, 3, "y"))?, 1);
            assert!(matches!(t.execute(ins, &row(1, 2, "z")), Err(Error::Constraint(_))));
            let mut got = Vec::new();
            let sql = "UPDATE t SET b = b + ?3 WHERE a = ?1 AND b = ?2 RETURNING b";
            let params = [SqlValue::Integer(1), SqlValue::Integer(3), SqlValue::Integer(10)];
            assert_eq!(t.query(sql, &params, &mut |r| got.push(r[0].as_i64().unwrap()))?, 1);
            assert_eq!(got, [13]);
            Ok::<_, Error>(())
        })
        .unwrap();
        c.read(|t| {
            let mut got = Vec::new();
            let n = t.query(
                "SELECT b, s FROM t WHERE a = ?1 ORDER BY b",
                &[SqlValue::Integer(1)],
                &mut |r| {
                    got.push((r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_owned()));
                },
            )?;
            assert_eq!((n, got), (2, vec![(2, "x".to_owned()), (13, "y".to_owned())]));
            assert!(t.execute(ins, &row(2, 2, "r")).is_err(), "read-only");
            let upd = "UPDATE t SET s = 'q' WHERE a = 1 RETURNING a";
            assert!(t.query(upd, &[], &mut |_| ()).is_err(), "a write in a read-only query");
            Ok::<_, Error>(())
        })
        .unwrap();
    }

    #[test]
    fn bad_input_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SqliteConfig::new(JournalMode::Wal, Synchronous::Full);
        assert!(Sqlite::create(&dir.path().join("x"), cfg.clone(), &["no spaces"]).is_err());
        let db = Sqlite::create(&dir.path().join("y"), cfg.clone(), &["t"]).unwrap();
        assert!(Sqlite::create(&dir.path().join("y"), cfg, &["t"]).is_err(), "exists");
        let mut c = db.connect().unwrap();
        let r = c.write(|t| t.insert(0, u64::MAX, b"x"));
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
        let r = c.write(|t| t.insert(3, 1, b"x"));
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
    }
}
