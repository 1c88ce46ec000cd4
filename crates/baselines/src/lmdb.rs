//! LMDB through `lmdb-master-sys` (LMDB's C sources, bundled and compiled with `cc`).
//!
//! Configuration (conventions §6: durable on commit):
//! - default environment flags for durability: no `MDB_NOSYNC`, `MDB_NOMETASYNC`,
//!   `MDB_MAPASYNC` or `MDB_WRITEMAP`: a commit writes its pages with `pwrite` and
//!   `fdatasync`s data and meta page before returning, so it survives power loss on a medium
//!   that honours fsync;
//! - `MDB_NOTLS` (a read transaction belongs to its handle, not to a thread) and
//!   `MDB_NORDAHEAD`;
//! - one named database per table with `MDB_INTEGERKEY` (8-byte native-endian keys, compared
//!   as integers);
//! - read-only transactions reuse one handle per reader with `mdb_txn_reset`/`mdb_txn_renew`
//!   (LMDB's recommended pattern); writers are serialized by LMDB's own writer lock.
//!
//! # Safety
//! Every LMDB handle here is used as LMDB documents: the environment is shared by all threads,
//! a write transaction lives inside one call of [`Lmdb::write`] on one thread, a read handle is
//! owned by one [`LmdbReader`] (`Send`, not `Sync`), data returned by LMDB is copied out before
//! the transaction ends, and the environment is closed only after every reader is dropped
//! (readers hold an `Arc` of it).

use std::ffi::{CStr, CString, c_int, c_uint};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use lmdb_master_sys as ffi;

use crate::error::{Error, Result, check_key, check_table_name};

/// How to configure an environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LmdbConfig {
    /// Map size, bytes: the largest the database may grow (address space; the file grows as
    /// pages are used).
    pub map_size: u64,
    /// Reader slots.
    pub max_readers: u32,
}

impl Default for LmdbConfig {
    fn default() -> Self {
        LmdbConfig { map_size: 16 << 30, max_readers: 126 }
    }
}

/// What a commit survives, in one sentence.
pub const DURABILITY: &str = "commit writes pages and fdatasyncs data and meta page: survives \
                              power loss (on a medium that honours fsync)";

/// The LMDB library version (`mdb_version`).
pub fn version() -> String {
    // SAFETY: `mdb_version` accepts null out-pointers and returns a static C string.
    let s = unsafe { ffi::mdb_version(ptr::null_mut(), ptr::null_mut(), ptr::null_mut()) };
    if s.is_null() {
        return "unknown".into();
    }
    // SAFETY: non-null, NUL-terminated, static (LMDB's version string constant).
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn strerror(code: c_int) -> String {
    // SAFETY: `mdb_strerror` returns a static or thread-local C string for any code.
    let s = unsafe { ffi::mdb_strerror(code) };
    if s.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null and NUL-terminated, read before any other LMDB call on this thread.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn check(op: &'static str, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        ffi::MDB_MAP_FULL => Err(Error::Full {
            engine: "LMDB",
            detail: format!("{op}: map full ({}); use a larger map size", strerror(rc)),
        }),
        _ => Err(Error::Lmdb { op, code: rc, message: strerror(rc) }),
    }
}

#[derive(Debug)]
struct Env {
    env: *mut ffi::MDB_env,
    dbis: Vec<ffi::MDB_dbi>,
}

// SAFETY: an LMDB environment handle may be used by any number of threads at once (LMDB
// serializes writers itself; with MDB_NOTLS read transactions belong to their handles), and
// `dbis` are plain integers fixed after creation.
unsafe impl Send for Env {}
// SAFETY: as above; no method of `Env` mutates it through `&self`.
unsafe impl Sync for Env {}

impl Drop for Env {
    fn drop(&mut self) {
        // SAFETY: the last reference is going away: every reader (which holds an `Arc<Env>`)
        // and every write transaction (scoped to `Lmdb::write`) has ended.
        unsafe { ffi::mdb_env_close(self.env) }
    }
}

/// An LMDB environment with one database per table.
#[derive(Debug, Clone)]
pub struct Lmdb {
    env: Arc<Env>,
    settings: Vec<(String, String)>,
}

const ENV_FLAGS: c_uint = ffi::MDB_NOTLS | ffi::MDB_NORDAHEAD;

impl Lmdb {
    /// Creates an environment in the directory `dir` (created; must not hold one already).
    pub fn create(dir: &Path, config: &LmdbConfig, tables: &[&str]) -> Result<Lmdb> {
        for t in tables {
            check_table_name(t)?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            op: "create_dir",
            path: dir.to_path_buf(),
            source: e,
        })?;
        if dir.join("data.mdb").exists() {
            return Err(Error::Io {
                op: "create",
                path: dir.join("data.mdb"),
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        let cpath = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| Error::InvalidArgument("path contains a NUL byte".into()))?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("mdb_env_create", unsafe { ffi::mdb_env_create(&mut raw) })?;
        // From here on `env` closes the handle on every error path.
        let mut env = Env { env: raw, dbis: Vec::new() };
        let maxdbs = ffi::MDB_dbi::try_from(tables.len().max(1))
            .map_err(|_| Error::InvalidArgument("too many tables".into()))?;
        // SAFETY: `env.env` was created above and is not open yet.
        check("mdb_env_set_maxdbs", unsafe { ffi::mdb_env_set_maxdbs(env.env, maxdbs) })?;
        // SAFETY: as above.
        check("mdb_env_set_mapsize", unsafe {
            ffi::mdb_env_set_mapsize(env.env, config.map_size as ffi::mdb_size_t)
        })?;
        // SAFETY: as above.
        check("mdb_env_set_maxreaders", unsafe {
            ffi::mdb_env_set_maxreaders(env.env, config.max_readers)
        })?;
        // SAFETY: `cpath` is NUL-terminated and outlives the call; the directory exists.
        check("mdb_env_open", unsafe {
            ffi::mdb_env_open(env.env, cpath.as_ptr(), ENV_FLAGS, 0o644)
        })?;

        let mut txn = ptr::null_mut();
        // SAFETY: open environment, no parent, valid out-pointer.
        check("mdb_txn_begin", unsafe {
            ffi::mdb_txn_begin(env.env, ptr::null_mut(), 0, &mut txn)
        })?;
        for t in tables {
            let name = CString::new(*t).map_err(|_| Error::InvalidArgument("table name".into()))?;
            let mut dbi = 0;
            // SAFETY: `txn` is this thread's open write transaction; `name` is NUL-terminated.
            let rc = unsafe {
                ffi::mdb_dbi_open(
                    txn,
                    name.as_ptr(),
                    ffi::MDB_CREATE | ffi::MDB_INTEGERKEY,
                    &mut dbi,
                )
            };
            if rc != 0 {
                // SAFETY: `txn` is open and not used again.
                unsafe { ffi::mdb_txn_abort(txn) };
                return Err(check("mdb_dbi_open", rc).unwrap_err());
            }
            env.dbis.push(dbi);
        }
        // SAFETY: `txn` is open; commit frees it whatever the result.
        check("mdb_txn_commit", unsafe { ffi::mdb_txn_commit(txn) })?;

        let settings = vec![
            ("lmdb_version".into(), version()),
            (
                "env_flags".into(),
                "MDB_NOTLS | MDB_NORDAHEAD (sync on commit: no MDB_NOSYNC, MDB_NOMETASYNC, \
                 MDB_MAPASYNC, MDB_WRITEMAP)"
                    .into(),
            ),
            ("db_flags".into(), "MDB_INTEGERKEY (8-byte native-endian keys)".into()),
            ("map_size".into(), config.map_size.to_string()),
            ("max_readers".into(), config.max_readers.to_string()),
            (
                "transactions".into(),
                "read-write: mdb_txn_begin/commit (LMDB's single-writer lock); read-only: one \
                 reset/renewed handle per session"
                    .into(),
            ),
        ];
        Ok(Lmdb { env: Arc::new(env), settings })
    }

    /// Configuration as LMDB runs it.
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// Runs `f` in a write transaction and commits it (durably) if `f` succeeds, else aborts.
    /// Waits for LMDB's writer lock.
    pub fn write<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut LmdbTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut txn = ptr::null_mut();
        // SAFETY: open environment, no parent, valid out-pointer; the transaction is used only
        // inside this call, on this thread.
        check("mdb_txn_begin", unsafe {
            ffi::mdb_txn_begin(self.env.env, ptr::null_mut(), 0, &mut txn)
        })?;
        let body = f(&mut LmdbTxn { txn, dbis: &self.env.dbis, writable: true, _p: PhantomData });
        match body {
            Ok(v) => {
                // SAFETY: `txn` is open; commit frees it whatever the result.
                check("mdb_txn_commit", unsafe { ffi::mdb_txn_commit(txn) })?;
                Ok(v)
            }
            Err(e) => {
                // SAFETY: `txn` is open and not used again.
                unsafe { ffi::mdb_txn_abort(txn) };
                Err(e)
            }
        }
    }

    /// A reader: one reusable read-only transaction handle, for one thread at a time.
    pub fn reader(&self) -> Result<LmdbReader> {
        let mut txn = ptr::null_mut();
        // SAFETY: open environment, valid out-pointer, read-only flag.
        check("mdb_txn_begin", unsafe {
            ffi::mdb_txn_begin(self.env.env, ptr::null_mut(), ffi::MDB_RDONLY, &mut txn)
        })?;
        // SAFETY: `txn` is an open read-only transaction; reset keeps the handle for renew.
        unsafe { ffi::mdb_txn_reset(txn) };
        Ok(LmdbReader { env: Arc::clone(&self.env), txn })
    }
}

/// A reusable read-only transaction handle (`MDB_NOTLS`): `Send`, used by one thread at a time.
#[derive(Debug)]
pub struct LmdbReader {
    env: Arc<Env>,
    txn: *mut ffi::MDB_txn,
}

// SAFETY: with MDB_NOTLS a read transaction handle may move between threads as long as one
// thread uses it at a time, which `&mut self` in `read` guarantees.
unsafe impl Send for LmdbReader {}

impl LmdbReader {
    /// Runs `f` in a read-only transaction (a fresh snapshot).
    pub fn read<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut LmdbTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        // SAFETY: `self.txn` is a reset read-only handle of `self.env`, which is alive.
        check("mdb_txn_renew", unsafe { ffi::mdb_txn_renew(self.txn) })?;
        let r = f(&mut LmdbTxn {
            txn: self.txn,
            dbis: &self.env.dbis,
            writable: false,
            _p: PhantomData,
        });
        // SAFETY: the handle was renewed above; reset ends the snapshot and keeps the handle.
        unsafe { ffi::mdb_txn_reset(self.txn) };
        r
    }
}

impl Drop for LmdbReader {
    fn drop(&mut self) {
        // SAFETY: the handle is reset (not active) and not used again; the environment is
        // still open (we hold an `Arc` of it).
        unsafe { ffi::mdb_txn_abort(self.txn) }
    }
}

/// An open transaction (read-only or read-write). Data is copied out before it ends.
#[derive(Debug)]
pub struct LmdbTxn<'a> {
    txn: *mut ffi::MDB_txn,
    dbis: &'a [ffi::MDB_dbi],
    writable: bool,
    _p: PhantomData<&'a mut ()>,
}

/// The key's bytes as `MDB_INTEGERKEY` wants them: native byte order (LMDB compares them as
/// native integers, so the host order *is* the format here).
#[allow(clippy::host_endian_bytes)]
fn key_bytes(key: u64) -> [u8; 8] {
    key.to_ne_bytes()
}

#[allow(clippy::host_endian_bytes)]
fn key_from(bytes: [u8; 8]) -> u64 {
    u64::from_ne_bytes(bytes)
}

fn val(bytes: &[u8]) -> ffi::MDB_val {
    ffi::MDB_val { mv_size: bytes.len(), mv_data: bytes.as_ptr() as *mut _ }
}

fn empty_val() -> ffi::MDB_val {
    ffi::MDB_val { mv_size: 0, mv_data: ptr::null_mut() }
}

/// The bytes of `v`, valid until the transaction ends or the next write.
///
/// # Safety
/// `v` must have been filled by LMDB in a transaction that is still open, with no write since.
unsafe fn slice<'t>(v: &ffi::MDB_val) -> &'t [u8] {
    if v.mv_size == 0 {
        return &[];
    }
    // SAFETY: LMDB points `mv_data` at `mv_size` readable bytes inside the map, which stay
    // valid while the transaction is open and unmodified (the caller's contract).
    unsafe { std::slice::from_raw_parts(v.mv_data as *const u8, v.mv_size) }
}

impl LmdbTxn<'_> {
    fn dbi(&self, t: usize) -> Result<ffi::MDB_dbi> {
        self.dbis.get(t).copied().ok_or_else(|| Error::InvalidArgument(format!("no table #{t}")))
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
        check_key(key)?;
        let dbi = self.dbi(table)?;
        let kb = key_bytes(key);
        let mut k = val(&kb);
        let mut d = empty_val();
        // SAFETY: open transaction, valid dbi, `k` points at 8 live bytes, `d` is an out-value.
        match unsafe { ffi::mdb_get(self.txn, dbi, &mut k, &mut d) } {
            0 => {
                out.clear();
                // SAFETY: `d` was just filled by LMDB in this open transaction.
                out.extend_from_slice(unsafe { slice(&d) });
                Ok(true)
            }
            ffi::MDB_NOTFOUND => Ok(false),
            rc => check("mdb_get", rc).map(|_| false),
        }
    }

    /// Inserts; `false` (and no effect) if the key exists.
    pub fn insert(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        self.writable()?;
        check_key(key)?;
        let dbi = self.dbi(table)?;
        let kb = key_bytes(key);
        let mut k = val(&kb);
        let mut d = val(value);
        // SAFETY: open write transaction, valid dbi, `k` and `d` point at live bytes that LMDB
        // copies; with NOOVERWRITE LMDB only reads `d` (or points it at the existing item).
        match unsafe { ffi::mdb_put(self.txn, dbi, &mut k, &mut d, ffi::MDB_NOOVERWRITE) } {
            0 => Ok(true),
            ffi::MDB_KEYEXIST => Ok(false),
            rc => check("mdb_put", rc).map(|_| false),
        }
    }

    /// Replaces the value; `false` (and no effect) if the key does not exist.
    pub fn update(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        self.writable()?;
        check_key(key)?;
        let dbi = self.dbi(table)?;
        let kb = key_bytes(key);
        let mut k = val(&kb);
        let mut d = empty_val();
        // SAFETY: as in `get`.
        match unsafe { ffi::mdb_get(self.txn, dbi, &mut k, &mut d) } {
            0 => {}
            ffi::MDB_NOTFOUND => return Ok(false),
            rc => return check("mdb_get", rc).map(|_| false),
        }
        let mut d = val(value);
        // SAFETY: as in `insert`, without NOOVERWRITE (replace).
        check("mdb_put", unsafe { ffi::mdb_put(self.txn, dbi, &mut k, &mut d, 0) })?;
        Ok(true)
    }

    /// Deletes; `false` if the key does not exist.
    pub fn delete(&mut self, table: usize, key: u64) -> Result<bool> {
        self.writable()?;
        check_key(key)?;
        let dbi = self.dbi(table)?;
        let kb = key_bytes(key);
        let mut k = val(&kb);
        // SAFETY: open write transaction, valid dbi, `k` points at live bytes; null data
        // deletes the key.
        match unsafe { ffi::mdb_del(self.txn, dbi, &mut k, ptr::null_mut()) } {
            0 => Ok(true),
            ffi::MDB_NOTFOUND => Ok(false),
            rc => check("mdb_del", rc).map(|_| false),
        }
    }

    /// Visits up to `limit` entries with key `>= start`, in key order; returns how many.
    pub fn scan(
        &mut self,
        table: usize,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize> {
        self.scan_range(table, start, u64::MAX, limit, visit)
    }

    /// Visits up to `limit` entries with `start <= key < end`, in key order; returns how many.
    pub fn scan_range(
        &mut self,
        table: usize,
        start: u64,
        end: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize> {
        check_key(start)?;
        let dbi = self.dbi(table)?;
        if limit == 0 {
            return Ok(0);
        }
        let mut cur = ptr::null_mut();
        // SAFETY: open transaction, valid dbi, valid out-pointer.
        check("mdb_cursor_open", unsafe { ffi::mdb_cursor_open(self.txn, dbi, &mut cur) })?;
        struct Close(*mut ffi::MDB_cursor);
        impl Drop for Close {
            fn drop(&mut self) {
                // SAFETY: the cursor was opened in the still-open transaction and is not used
                // after this guard drops.
                unsafe { ffi::mdb_cursor_close(self.0) }
            }
        }
        let _close = Close(cur);
        let kb = key_bytes(start);
        let mut k = val(&kb);
        let mut d = empty_val();
        let mut op = ffi::MDB_SET_RANGE;
        let mut n = 0;
        while n < limit {
            // SAFETY: open cursor; `k` points at live bytes for SET_RANGE and is an out-value
            // for NEXT, `d` an out-value.
            match unsafe { ffi::mdb_cursor_get(cur, &mut k, &mut d, op) } {
                0 => {}
                ffi::MDB_NOTFOUND => break,
                rc => return check("mdb_cursor_get", rc).map(|_| n),
            }
            // SAFETY: filled by LMDB in this open transaction, no write since.
            let kbytes = unsafe { slice(&k) };
            // SAFETY: as above.
            let vbytes = unsafe { slice(&d) };
            let key = <[u8; 8]>::try_from(kbytes).map(key_from).map_err(|_| {
                Error::InvalidArgument(format!("LMDB key of {} bytes", kbytes.len()))
            })?;
            if key >= end {
                break;
            }
            visit(key, vbytes);
            n += 1;
            op = ffi::MDB_NEXT;
        }
        Ok(n)
    }

    /// Number of entries (`mdb_stat`).
    pub fn count(&mut self, table: usize) -> Result<u64> {
        let dbi = self.dbi(table)?;
        let mut st = std::mem::MaybeUninit::<ffi::MDB_stat>::zeroed();
        // SAFETY: open transaction, valid dbi, `st` is writable storage of the right type.
        check("mdb_stat", unsafe { ffi::mdb_stat(self.txn, dbi, st.as_mut_ptr()) })?;
        // SAFETY: mdb_stat returned 0, so it filled the struct (and it was zeroed before).
        let st = unsafe { st.assume_init() };
        Ok(st.ms_entries as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LmdbConfig { map_size: 64 << 20, max_readers: 8 };
        let db = Lmdb::create(&dir.path().join("env"), &cfg, &["a", "b"]).unwrap();
        assert!(db.settings().iter().any(|(k, v)| k == "lmdb_version" && v.contains("LMDB")));
        db.write(|t| {
            assert!(t.insert(0, 5, b"five")?);
            assert!(!t.insert(0, 5, b"again")?);
            assert!(t.insert(0, 1 << 40, b"big")?);
            assert!(t.insert(0, 7, b"seven")?);
            assert!(t.insert(1, 5, b"other")?);
            assert!(t.update(0, 7, b"SEVEN")?);
            assert!(!t.update(0, 8, b"x")?);
            assert!(!t.delete(0, 9)?);
            Ok::<_, Error>(())
        })
        .unwrap();
        let mut r = db.reader().unwrap();
        let mut out = Vec::new();
        r.read(|t| {
            assert!(t.get(0, 7, &mut out)?);
            assert_eq!(out, b"SEVEN");
            assert!(!t.get(0, 6, &mut out)?);
            let mut seen = Vec::new();
            assert_eq!(t.scan(0, 6, 10, &mut |k, v| seen.push((k, v.to_vec())))?, 2);
            assert_eq!(seen, vec![(7, b"SEVEN".to_vec()), (1 << 40, b"big".to_vec())]);
            seen.clear();
            assert_eq!(t.scan_range(0, 5, 1 << 40, 10, &mut |k, _| seen.push((k, vec![])))?, 2);
            assert_eq!(seen, vec![(5, vec![]), (7, vec![])]);
            assert_eq!(t.count(0)?, 3);
            assert!(t.delete(0, 5).is_err(), "read-only");
            Ok::<_, Error>(())
        })
        .unwrap();
        let failed = db.write(|t| {
            t.delete(0, 5)?;
            Err::<(), _>(Error::InvalidArgument("stop".into()))
        });
        assert!(failed.is_err());
        r.read(|t| {
            assert!(t.get(0, 5, &mut out)?, "aborted delete left the key");
            Ok::<_, Error>(())
        })
        .unwrap();
        // Readers on other threads.
        std::thread::scope(|s| {
            for _ in 0..2 {
                let mut r = db.reader().unwrap();
                s.spawn(move || {
                    let mut out = Vec::new();
                    r.read(|t| t.get(0, 5, &mut out)).unwrap()
                });
            }
        });
        assert!(Lmdb::create(&dir.path().join("env"), &cfg, &["a"]).is_err(), "exists");
    }
}
