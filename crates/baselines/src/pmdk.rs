//! PMDK libpmemobj through a small C shim (`csrc/pmdk_shim.c`, compiled with `cc` against
//! Debian's `libpmemobj-dev`; feature `pmdk`).
//!
//! The shim keeps one persistent B+-tree (32 keys per node) per table in one pmemobj pool. A
//! read-write transaction is buffered on the Rust side (its reads see its own writes) and
//! applied by **one** C call that runs every operation inside one `TX_BEGIN … TX_END`, so
//! libpmemobj's `setjmp`/`longjmp` never crosses a Rust frame. An insert is a transactional
//! allocation of the value plus the undo-logged slot update in its leaf (the operation the
//! calibration anchor "PMDK transaction (alloc + slot update)" measures).
//!
//! Configuration (conventions §6): `PMEM_IS_PMEM_FORCE=1` in the process environment before the
//! first pool is opened (so libpmem flushes with `CLWB`/`CLFLUSHOPT` + `SFENCE` on tmpfs instead
//! of calling `msync`); the pool is created (and prefaulted: `prefault.at_create`) before any
//! timing; Debian's release build of the library. Concurrency: a reader-writer lock (writers
//! exclusive) around the tree, since pmemobj transactions give atomicity and durability, not
//! isolation.
//!
//! # Durability
//! A committed transaction is flushed and fenced into the pool: it survives a process crash on
//! tmpfs, and a power loss on real persistent memory (ADR).

use std::ffi::{CStr, CString, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, RwLock};

use crate::error::{Error, Result, check_key, check_table_name};

mod ffi {
    use std::ffi::{c_char, c_int};

    /// The shim's pool handle (opaque).
    #[repr(C)]
    pub struct FbPool {
        _opaque: [u8; 0],
    }

    /// One operation of a write batch (`fb_op` in the shim).
    #[repr(C)]
    pub struct FbOp {
        pub kind: u32,
        pub table: u32,
        pub key: u64,
        pub val: *const u8,
        pub len: u64,
    }

    pub const INSERT: u32 = 1;
    pub const UPDATE: u32 = 2;
    pub const DELETE: u32 = 3;

    unsafe extern "C" {
        pub fn fb_pmdk_check_version() -> *const c_char;
        pub fn fb_pmdk_create(
            path: *const c_char,
            size: u64,
            ntables: u32,
            out: *mut *mut FbPool,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        pub fn fb_pmdk_close(p: *mut FbPool);
        pub fn fb_pmdk_is_pmem(p: *const FbPool) -> c_int;
        pub fn fb_pmdk_get(
            p: *const FbPool,
            table: u32,
            key: u64,
            buf: *mut u8,
            cap: u64,
            len: *mut u64,
        ) -> c_int;
        pub fn fb_pmdk_scan(
            p: *const FbPool,
            table: u32,
            start: u64,
            limit: u64,
            keys: *mut u64,
            lens: *mut u64,
            data: *mut u8,
            cap: u64,
            more: *mut c_int,
        ) -> i64;
        pub fn fb_pmdk_count(p: *const FbPool, table: u32) -> u64;
        pub fn fb_pmdk_contains(p: *const FbPool, table: u32, key: u64) -> c_int;
        pub fn fb_pmdk_raw_alloc_slot(p: *mut FbPool, n: u64, len: u64) -> i64;
        pub fn fb_pmdk_bench_slots(p: *mut FbPool, n: u64) -> c_int;
        pub fn fb_pmdk_bench_alloc(p: *mut FbPool, sizes: *const u64, n: u64) -> i64;
        pub fn fb_pmdk_bench_free(p: *mut FbPool, n: u64) -> i64;
        pub fn fb_pmdk_bench_alloc_one(p: *mut FbPool, i: u64, size: u64) -> c_int;
        pub fn fb_pmdk_bench_free_one(p: *mut FbPool, i: u64) -> c_int;
        pub fn fb_pmdk_apply(
            p: *mut FbPool,
            ops: *const FbOp,
            n: usize,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
    }
}

/// The libpmemobj version this crate was built against (from `pkg-config`).
pub const VERSION: &str = env!("FERRITE_PMDK_VERSION");

/// What a commit survives, in one sentence.
pub const DURABILITY: &str = "pmemobj transaction flushed and fenced at commit: survives a \
                              process crash (tmpfs), and power loss on real PM (ADR)";

/// How to configure the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmdkConfig {
    /// Pool size, bytes (allocated and prefaulted at creation; at least 8 MiB).
    pub pool_size: u64,
}

static FORCE_PMEM: Once = Once::new();

/// Sets `PMEM_IS_PMEM_FORCE=1` unless the variable is already set (then the user's value
/// stands and is reported). libpmem reads it once, at its first `pmem_is_pmem`.
fn force_pmem() {
    FORCE_PMEM.call_once(|| {
        if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
            // SAFETY: `set_var` is unsafe because another thread may read the environment at
            // the same time. Rust's own readers take the standard library's environment lock;
            // no C code of this process reads the environment concurrently here: this runs
            // once, on the thread that creates the first pool, before libpmem (which reads it
            // lazily) is first used, and the benchmark starts its workers only after that.
            unsafe { std::env::set_var("PMEM_IS_PMEM_FORCE", "1") };
        }
    });
}

fn err_text(buf: &[c_char]) -> String {
    // The shim always NUL-terminates (snprintf) what it writes; the buffer starts zeroed.
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A pmemobj pool holding one B+-tree per table.
#[derive(Debug)]
pub struct Pmdk {
    pool: NonNull<ffi::FbPool>,
    ntables: usize,
    lock: RwLock<Scratch>,
    settings: Vec<(String, String)>,
}

/// Buffers of the write path, reused by every write transaction (under the write lock).
#[derive(Debug, Default)]
struct Scratch {
    pending: Vec<Pending>,
    arena: Vec<u8>,
    ops: Vec<ffi::FbOp>,
}

impl std::fmt::Debug for ffi::FbOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FbOp").field("kind", &self.kind).field("key", &self.key).finish()
    }
}

// SAFETY: the shim's pool handle is only used under `lock`: reads (get, scan, count) under the
// read lock, writes (apply) under the write lock, so the tree is never read while modified;
// libpmemobj's own functions are thread-safe. The raw pointers in `Scratch::ops` are only set
// and used under the write lock, within one `write` call (cleared before it returns).
unsafe impl Send for Pmdk {}
// SAFETY: as above.
unsafe impl Sync for Pmdk {}

impl Drop for Pmdk {
    fn drop(&mut self) {
        // SAFETY: the handle came from fb_pmdk_create and nothing uses it after drop.
        unsafe { ffi::fb_pmdk_close(self.pool.as_ptr()) }
    }
}

impl Pmdk {
    /// Creates a pool file at `path` (which must not exist) of `config.pool_size` bytes,
    /// prefaulted, with one empty tree per table (at most 16).
    pub fn create(path: &Path, config: &PmdkConfig, tables: &[&str]) -> Result<Pmdk> {
        for t in tables {
            check_table_name(t)?;
        }
        if tables.is_empty() || tables.len() > 16 {
            return Err(Error::InvalidArgument("PMDK baseline: 1 to 16 tables".into()));
        }
        // SAFETY: no arguments; returns null or a static message.
        let bad = unsafe { ffi::fb_pmdk_check_version() };
        if !bad.is_null() {
            // SAFETY: non-null NUL-terminated message owned by libpmemobj.
            let msg = unsafe { CStr::from_ptr(bad) }.to_string_lossy().into_owned();
            return Err(Error::Pmdk { op: "pmemobj_check_version", message: msg });
        }
        force_pmem();
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| Error::InvalidArgument("path contains a NUL byte".into()))?;
        let mut raw = std::ptr::null_mut();
        let mut err = [0 as c_char; 512];
        // SAFETY: `cpath` is NUL-terminated, `raw` a valid out-pointer, `err` writable for its
        // length; the table count was checked above.
        let rc = unsafe {
            ffi::fb_pmdk_create(
                cpath.as_ptr(),
                config.pool_size,
                tables.len() as u32,
                &mut raw,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            let message = err_text(&err);
            return Err(if rc == libc::ENOSPC || rc == libc::ENOMEM {
                Error::Full { engine: "PMDK", detail: message }
            } else {
                Error::Pmdk { op: "create", message: format!("{message} (errno {rc})") }
            });
        }
        let pool = NonNull::new(raw)
            .ok_or_else(|| Error::Pmdk { op: "create", message: "null pool".into() })?;
        let mut me = Pmdk {
            pool,
            ntables: tables.len(),
            lock: RwLock::new(Scratch::default()),
            settings: vec![],
        };
        // SAFETY: valid pool handle.
        let is_pmem = unsafe { ffi::fb_pmdk_is_pmem(me.pool.as_ptr()) } != 0;
        me.settings = vec![
            ("libpmemobj_version".into(), VERSION.into()),
            (
                "PMEM_IS_PMEM_FORCE".into(),
                std::env::var("PMEM_IS_PMEM_FORCE").unwrap_or_else(|_| "unset".into()),
            ),
            (
                "pmem_is_pmem".into(),
                if is_pmem {
                    "1 (flush instructions + fence)".into()
                } else {
                    "0 (msync per flush!)".into()
                },
            ),
            ("pool_size".into(), config.pool_size.to_string()),
            ("prefault".into(), "prefault.at_create=1 (pool created before timing)".into()),
            (
                "structure".into(),
                "persistent B+-tree per table, 32 keys/node, values as separate objects".into(),
            ),
            (
                "transactions".into(),
                "one pmemobj TX per read-write transaction (whole batch in C); RW lock around \
                 the tree (writers exclusive)"
                    .into(),
            ),
        ];
        Ok(me)
    }

    /// Configuration as it runs.
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// Calibration only: runs `n` transactions of the project's PMDK anchor (allocate a value
    /// of `len` bytes, at most 4 KiB, and point an undo-logged slot of an array at it; no
    /// index) and returns how long they took. The array is allocated before timing.
    pub fn raw_alloc_slot(&self, n: u64, len: usize) -> Result<std::time::Duration> {
        let _w = self.lock.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: valid pool handle under the write lock.
        let ns = unsafe { ffi::fb_pmdk_raw_alloc_slot(self.pool.as_ptr(), n, len as u64) };
        match u64::try_from(ns) {
            Ok(ns) => Ok(std::time::Duration::from_nanos(ns)),
            Err(_) if -ns == i64::from(libc::ENOMEM) => {
                Err(Error::Full { engine: "PMDK", detail: format!("{n} slots do not fit") })
            }
            Err(_) => Err(Error::Pmdk { op: "raw_alloc_slot", message: format!("errno {}", -ns) }),
        }
    }

    /// Runs `f` as a read-write transaction: its writes are buffered (and visible to its own
    /// reads), then applied atomically and durably in one pmemobj transaction if `f` succeeds.
    pub fn write<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut PmdkTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut guard = self.lock.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let scratch = &mut *guard;
        scratch.pending.clear();
        scratch.arena.clear();
        let v = f(&mut PmdkTxn { db: self, scratch: Some(&mut *scratch) })?;
        if scratch.pending.is_empty() {
            return Ok(v);
        }
        let Scratch { pending, arena, ops } = scratch;
        ops.clear();
        ops.extend(pending.iter().map(|p| ffi::FbOp {
            kind: p.kind,
            table: p.table as u32,
            key: p.key,
            val: arena[p.off..p.off + p.len].as_ptr(),
            len: p.len as u64,
        }));
        let mut err = [0 as c_char; 512];
        // SAFETY: valid pool handle under the write lock; `ops` and the arena bytes they point
        // to live until the call returns (nothing touches them meanwhile); `err` is writable.
        let rc = unsafe {
            ffi::fb_pmdk_apply(
                self.pool.as_ptr(),
                ops.as_ptr(),
                ops.len(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        ops.clear();
        match rc {
            0 => Ok(v),
            rc if rc == libc::ENOMEM || rc == libc::ENOSPC => {
                Err(Error::Full { engine: "PMDK", detail: err_text(&err) }.into())
            }
            rc => Err(Error::Pmdk {
                op: "apply",
                message: format!("{} (errno {rc})", err_text(&err)),
            }
            .into()),
        }
    }

    /// Runs `f` as a read-only transaction (under the read lock).
    pub fn read<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut PmdkTxn<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let _r = self.lock.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut PmdkTxn { db: self, scratch: None })
    }

    fn table(&self, t: usize) -> Result<u32> {
        if t < self.ntables {
            Ok(t as u32)
        } else {
            Err(Error::InvalidArgument(format!("no table #{t}")))
        }
    }

    /// Whether `key` is committed (caller holds the lock).
    fn contains_committed(&self, table: u32, key: u64) -> Result<bool> {
        // SAFETY: valid pool handle under a lock.
        match unsafe { ffi::fb_pmdk_contains(self.pool.as_ptr(), table, key) } {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::InvalidArgument(format!("no table #{table}"))),
        }
    }

    /// Committed value of `key` (caller holds the lock).
    fn get_committed(&self, table: u32, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        loop {
            let mut len = 0u64;
            let cap = out.capacity().max(64);
            out.clear();
            out.reserve(cap);
            // SAFETY: valid pool handle under a lock; `out` has `out.capacity()` writable
            // bytes; `len` is a valid out-pointer.
            let rc = unsafe {
                ffi::fb_pmdk_get(
                    self.pool.as_ptr(),
                    table,
                    key,
                    out.as_mut_ptr(),
                    out.capacity() as u64,
                    &mut len,
                )
            };
            match rc {
                0 => return Ok(false),
                1 if len <= out.capacity() as u64 => {
                    // SAFETY: the shim copied exactly `len` (<= capacity) bytes into `out`.
                    unsafe { out.set_len(len as usize) };
                    return Ok(true);
                }
                1 => out.reserve(len as usize),
                _ => return Err(Error::InvalidArgument(format!("no table #{table}"))),
            }
        }
    }
}

#[derive(Debug)]
struct Pending {
    kind: u32,
    table: usize,
    key: u64,
    /// The value: `arena[off..off + len]` (empty for deletes).
    off: usize,
    len: usize,
}

/// An open PMDK transaction: read-only, or read-write with buffered writes.
#[derive(Debug)]
pub struct PmdkTxn<'a> {
    db: &'a Pmdk,
    scratch: Option<&'a mut Scratch>,
}

fn read_only() -> Error {
    Error::InvalidArgument("write in a read-only transaction".into())
}

impl PmdkTxn<'_> {
    /// The transaction's own latest write to the key: `Some(None)` deleted, `Some(Some(v))`
    /// written, `None` untouched.
    fn own(&self, table: usize, key: u64) -> Option<Option<&[u8]>> {
        let s = self.scratch.as_deref()?;
        s.pending.iter().rev().find(|p| p.table == table && p.key == key).map(|p| {
            if p.kind == ffi::DELETE { None } else { Some(&s.arena[p.off..p.off + p.len]) }
        })
    }

    fn push(&mut self, kind: u32, table: usize, key: u64, value: &[u8]) -> Result<()> {
        let s = self.scratch.as_deref_mut().ok_or_else(read_only)?;
        let off = s.arena.len();
        s.arena.extend_from_slice(value);
        s.pending.push(Pending { kind, table, key, off, len: value.len() });
        Ok(())
    }

    fn exists(&mut self, table: usize, key: u64) -> Result<bool> {
        match self.own(table, key) {
            Some(v) => Ok(v.is_some()),
            None => self.db.contains_committed(self.db.table(table)?, key),
        }
    }

    /// Copies the value of `key` into `out`; `false` if there is none.
    pub fn get(&mut self, table: usize, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let t = self.db.table(table)?;
        match self.own(table, key) {
            Some(Some(v)) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            Some(None) => Ok(false),
            None => self.db.get_committed(t, key, out),
        }
    }

    /// Inserts; `false` (and no effect) if the key exists.
    pub fn insert(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        check_key(key)?;
        if self.scratch.is_none() {
            return Err(read_only());
        }
        if self.exists(table, key)? {
            return Ok(false);
        }
        self.push(ffi::INSERT, table, key, value)?;
        Ok(true)
    }

    /// Replaces the value; `false` (and no effect) if the key does not exist.
    pub fn update(&mut self, table: usize, key: u64, value: &[u8]) -> Result<bool> {
        check_key(key)?;
        if self.scratch.is_none() {
            return Err(read_only());
        }
        if !self.exists(table, key)? {
            return Ok(false);
        }
        // The key exists now, so the latest own write to it (if any) is an insert or an update;
        // updating a key this transaction inserted keeps it an insert, of the new value.
        if let Some(s) = self.scratch.as_deref_mut()
            && let Some(i) = s.pending.iter().rposition(|p| p.table == table && p.key == key)
            && s.pending[i].kind == ffi::INSERT
        {
            let off = s.arena.len();
            s.arena.extend_from_slice(value);
            s.pending[i].off = off;
            s.pending[i].len = value.len();
            return Ok(true);
        }
        self.push(ffi::UPDATE, table, key, value)?;
        Ok(true)
    }

    /// Deletes; `false` if the key does not exist.
    pub fn delete(&mut self, table: usize, key: u64) -> Result<bool> {
        check_key(key)?;
        if self.scratch.is_none() {
            return Err(read_only());
        }
        if !self.exists(table, key)? {
            return Ok(false);
        }
        self.push(ffi::DELETE, table, key, &[])?;
        Ok(true)
    }

    /// Visits up to `limit` entries with key `>= start`, in key order; returns how many.
    /// Not supported after a write in the same transaction (the workloads never do that).
    pub fn scan(
        &mut self,
        table: usize,
        start: u64,
        limit: usize,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize> {
        check_key(start)?;
        let t = self.db.table(table)?;
        if self.scratch.as_deref().is_some_and(|s| !s.pending.is_empty()) {
            return Err(Error::InvalidArgument(
                "PMDK baseline: scan after a write in the same transaction".into(),
            ));
        }
        let mut done = 0usize;
        let mut from = start;
        let batch = limit.min(256);
        let mut keys = vec![0u64; batch];
        let mut lens = vec![0u64; batch];
        let mut data = vec![0u8; 64 * 1024];
        while done < limit {
            let want = (limit - done).min(batch);
            let mut more: c_int = 0;
            // SAFETY: valid pool handle under a lock; `keys`/`lens` hold `want` entries and
            // `data` `data.len()` bytes, all writable; `more` is a valid out-pointer.
            let n = unsafe {
                ffi::fb_pmdk_scan(
                    self.db.pool.as_ptr(),
                    t,
                    from,
                    want as u64,
                    keys.as_mut_ptr(),
                    lens.as_mut_ptr(),
                    data.as_mut_ptr(),
                    data.len() as u64,
                    &mut more,
                )
            };
            let n = usize::try_from(n)
                .map_err(|_| Error::InvalidArgument(format!("no table #{table}")))?;
            let mut off = 0usize;
            for i in 0..n {
                let len = lens[i] as usize;
                visit(keys[i], &data[off..off + len]);
                off += len;
            }
            done += n;
            if more != 0 {
                if n == 0 {
                    let grown = data.len() * 4;
                    data.resize(grown, 0);
                }
            } else if n < want {
                break;
            }
            match keys[..n].last() {
                Some(&k) if k < u64::MAX => from = k + 1,
                Some(_) => break,
                None => {}
            }
        }
        Ok(done)
    }

    /// Number of committed entries (walks the leaves; for checks).
    pub fn count(&mut self, table: usize) -> Result<u64> {
        let t = self.db.table(table)?;
        // SAFETY: valid pool handle under a lock.
        Ok(unsafe { ffi::fb_pmdk_count(self.db.pool.as_ptr(), t) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_splits_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        let db = Pmdk::create(
            &dir.path().join("pool"),
            &PmdkConfig { pool_size: 64 << 20 },
            &["a", "b"],
        )
        .unwrap();
        let s: std::collections::BTreeMap<_, _> = db.settings().iter().cloned().collect();
        assert_eq!(s["PMEM_IS_PMEM_FORCE"], "1");
        assert!(s["pmem_is_pmem"].starts_with('1'), "{s:?}");
        // Enough keys for several levels of splits, inserted in a scrambled order.
        let keys: Vec<u64> = (0..5000u64).map(|i| (i * 7919) % 5000 * 3).collect();
        for chunk in keys.chunks(50) {
            db.write(|t| {
                for &k in chunk {
                    assert!(t.insert(0, k, &k.to_le_bytes())?);
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        db.write(|t| {
            assert!(!t.insert(0, 3, b"dup")?);
            assert!(t.update(0, 3, b"longer value")?);
            assert!(t.update(0, 6, &[9; 8])?);
            assert!(!t.update(0, 4, b"missing")?);
            assert!(t.delete(0, 9)?);
            assert!(!t.delete(0, 9)?, "own delete is visible");
            assert!(t.insert(1, 9, b"b")?);
            let mut out = Vec::new();
            assert!(t.get(0, 3, &mut out)?);
            assert_eq!(out, b"longer value", "own write is visible");
            Ok::<_, Error>(())
        })
        .unwrap();
        let mut out = Vec::new();
        db.read(|t| {
            assert_eq!(t.count(0)?, 4999);
            assert_eq!(t.count(1)?, 1);
            assert!(t.get(0, 3, &mut out)?);
            assert_eq!(out, b"longer value");
            assert!(!t.get(0, 9, &mut out)?);
            assert!(t.get(0, 14997, &mut out)?);
            let mut seen = Vec::new();
            t.scan(0, 7, 600, &mut |k, _| seen.push(k))?;
            let want: Vec<u64> =
                (3..5000u64).map(|i| i * 3).filter(|&k| k != 9).take(600).collect();
            assert_eq!(seen, want);
            assert!(t.insert(0, 1, b"x").is_err(), "read-only");
            Ok::<_, Error>(())
        })
        .unwrap();
        // A failing body applies nothing.
        let r = db.write(|t| {
            t.delete(0, 3)?;
            Err::<(), _>(Error::InvalidArgument("stop".into()))
        });
        assert!(r.is_err());
        db.read(|t| t.get(0, 3, &mut out)).map(|found| assert!(found)).unwrap();
    }

    #[test]
    fn raw_alloc_slot_runs() {
        let dir = tempfile::tempdir().unwrap();
        let db =
            Pmdk::create(&dir.path().join("pool"), &PmdkConfig { pool_size: 32 << 20 }, &["t"])
                .unwrap();
        let d = db.raw_alloc_slot(1000, 100).unwrap();
        assert!(d.as_nanos() > 0);
        assert!(matches!(db.raw_alloc_slot(1 << 30, 100), Err(Error::Full { .. })));
    }

    #[test]
    fn alloc_bench_allocates_and_frees_every_slot() {
        let dir = tempfile::tempdir().unwrap();
        let sizes: Vec<u64> = (0..2000u64).map(|i| 64 + i * 37 % 8192).collect();
        let b = AllocBench::create(&dir.path().join("pool"), &sizes).unwrap();
        for _ in 0..3 {
            assert!(b.alloc_all().unwrap().as_nanos() > 0);
            assert!(b.free_all().unwrap().as_nanos() > 0);
        }
        // The slots are null after a free round: allocating needs them null, freeing non-null.
        assert!(matches!(b.free_all(), Err(Error::Pmdk { op: "bench_free", .. })));
        assert!(matches!(
            AllocBench::create(&dir.path().join("p2"), &[64, 0]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn shared_slots_allocate_in_one_thread_and_free_in_another() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = AllocBench::create(&dir.path().join("pool"), &[64; 512]).unwrap();
        {
            let s = b.shared();
            assert_eq!(s.len(), 512);
            // Thread 0 allocates the even slots and frees the odd ones thread 1 allocated
            // (after both met at the barrier), so every slot is allocated in one thread and
            // freed in the other.
            let barrier = std::sync::Barrier::new(2);
            std::thread::scope(|sc| {
                for t in 0..2usize {
                    let (s, barrier) = (&s, &barrier);
                    sc.spawn(move || {
                        for i in (t..512).step_by(2) {
                            s.alloc(i, 64 + 16 * t as u64).unwrap();
                        }
                        barrier.wait();
                        for i in (1 - t..512).step_by(2) {
                            s.free(i).unwrap();
                        }
                    });
                }
            });
            assert!(matches!(s.free(3), Err(Error::InvalidArgument(_))), "slot 3 is null");
            s.alloc(3, 64).unwrap();
            assert!(matches!(s.alloc(3, 64), Err(Error::InvalidArgument(_))), "slot 3 is full");
            assert!(matches!(s.alloc(512, 64), Err(Error::InvalidArgument(_))));
            s.free(3).unwrap();
        }
        // Every slot is null again: a whole round works.
        b.alloc_all().unwrap();
        b.free_all().unwrap();
        assert!(b.fs_footprint().unwrap() >= 8 << 20);
    }

    /// Random batches of inserts, updates (same and other lengths) and deletes, some aborted,
    /// checked against a `BTreeMap` with gets, counts and scans from random keys.
    #[test]
    fn matches_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let db =
            Pmdk::create(&dir.path().join("pool"), &PmdkConfig { pool_size: 64 << 20 }, &["t"])
                .unwrap();
        let mut model = std::collections::BTreeMap::<u64, Vec<u8>>::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..400 {
            let abort = next(10) == 0;
            let mut staged = model.clone();
            let ops: Vec<(u64, u64, u64)> =
                (0..1 + next(40)).map(|_| (next(3), next(3000), next(3))).collect();
            let r = db.write(|t| {
                for &(kind, k, len) in &ops {
                    let v = vec![(k % 251) as u8; 8 + len as usize * 4];
                    match kind {
                        0 => {
                            let fresh = !staged.contains_key(&k);
                            assert_eq!(t.insert(0, k, &v)?, fresh);
                            if fresh {
                                staged.insert(k, v);
                            }
                        }
                        1 => {
                            let had = staged.contains_key(&k);
                            assert_eq!(t.update(0, k, &v)?, had);
                            if had {
                                staged.insert(k, v);
                            }
                        }
                        _ => assert_eq!(t.delete(0, k)?, staged.remove(&k).is_some()),
                    }
                    let mut out = Vec::new();
                    assert_eq!(t.get(0, k, &mut out)?, staged.contains_key(&k));
                }
                if abort { Err(Error::InvalidArgument("abort".into())) } else { Ok(()) }
            });
            assert_eq!(r.is_err(), abort, "round {round}");
            if !abort {
                model = staged;
            }
            db.read(|t| {
                assert_eq!(t.count(0)?, model.len() as u64, "round {round}");
                let start = next(3100);
                let limit = next(70) as usize;
                let mut seen = Vec::new();
                t.scan(0, start, limit, &mut |k, v| seen.push((k, v.to_vec())))?;
                let want: Vec<(u64, Vec<u8>)> =
                    model.range(start..).take(limit).map(|(k, v)| (*k, v.clone())).collect();
                assert_eq!(seen, want, "round {round}");
                Ok::<_, Error>(())
            })
            .unwrap();
        }
    }
}

/// The allocator benchmark's PMDK side: `pmemobj_alloc` of a fixed list of sizes into the
/// slots of a persistent `PMEMoid` array, then `pmemobj_free` of every slot — PMDK's atomic,
/// leak-free allocation interface, the counterpart of PAllocator's `allocate(size, into)` and
/// `deallocate(from)`. The pool (prefaulted) and the slot array exist before any timing.
///
/// For threads, [`AllocBench::shared`] hands out [`SharedSlots`]: one-slot allocate and free
/// callable from several threads at once, without the wrapper's lock.
#[derive(Debug)]
pub struct AllocBench {
    pmdk: Pmdk,
    sizes: Vec<u64>,
    path: std::path::PathBuf,
}

impl AllocBench {
    /// Creates a pool at `path` large enough to hold every block of `sizes` at once, and the
    /// slot array.
    pub fn create(path: &Path, sizes: &[u64]) -> Result<AllocBench> {
        if sizes.is_empty() || sizes.contains(&0) {
            return Err(Error::InvalidArgument("allocator benchmark: no size may be 0".into()));
        }
        // Blocks with PMDK's headers and class rounding, the slots, and headroom.
        let blocks: u64 = sizes.iter().map(|s| s + s / 4 + 128).sum();
        let pool_size = (blocks + sizes.len() as u64 * 16 + (64 << 20)).div_ceil(1 << 20) << 20;
        let pmdk = Pmdk::create(path, &PmdkConfig { pool_size }, &["alloc_bench"])?;
        let _w = pmdk.lock.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: valid pool handle under the write lock.
        let rc = unsafe { ffi::fb_pmdk_bench_slots(pmdk.pool.as_ptr(), sizes.len() as u64) };
        drop(_w);
        if rc != 0 {
            return Err(Error::Pmdk { op: "bench_slots", message: format!("errno {rc}") });
        }
        Ok(AllocBench { pmdk, sizes: sizes.to_vec(), path: path.to_path_buf() })
    }

    /// Number of slots (the length of the size list given at creation).
    pub fn slots(&self) -> usize {
        self.sizes.len()
    }

    /// The file-system space of the pool file, in bytes (`st_blocks` × 512). The pool is
    /// prefaulted at creation, so this is its whole size from the start.
    pub fn fs_footprint(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.path).map_err(|e| Error::Pmdk {
            op: "stat",
            message: format!("{}: {e}", self.path.display()),
        })?;
        Ok(m.blocks().saturating_mul(512))
    }

    /// One-slot access for several threads at once. Borrows the benchmark exclusively, so
    /// [`AllocBench::alloc_all`] and [`AllocBench::free_all`] cannot run meanwhile.
    pub fn shared(&mut self) -> SharedSlots<'_> {
        let busy = (0..self.sizes.len()).map(|_| AtomicBool::new(false)).collect();
        SharedSlots { bench: self, busy }
    }

    /// Allocates every size into its slot (all slots must be null); returns the time taken.
    pub fn alloc_all(&self) -> Result<std::time::Duration> {
        let _w = self.pmdk.lock.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: valid pool handle under the write lock; `sizes` has `len` readable elements,
        // no more than the slot array (sized from the same list).
        let ns = unsafe {
            ffi::fb_pmdk_bench_alloc(
                self.pmdk.pool.as_ptr(),
                self.sizes.as_ptr(),
                self.sizes.len() as u64,
            )
        };
        Self::duration("bench_alloc", ns)
    }

    /// Frees every slot (all must hold a block); returns the time taken.
    pub fn free_all(&self) -> Result<std::time::Duration> {
        let _w = self.pmdk.lock.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: valid pool handle under the write lock.
        let ns =
            unsafe { ffi::fb_pmdk_bench_free(self.pmdk.pool.as_ptr(), self.sizes.len() as u64) };
        Self::duration("bench_free", ns)
    }

    /// The pool's configuration as it runs.
    pub fn settings(&self) -> &[(String, String)] {
        self.pmdk.settings()
    }

    fn duration(op: &'static str, ns: i64) -> Result<std::time::Duration> {
        match u64::try_from(ns) {
            Ok(ns) => Ok(std::time::Duration::from_nanos(ns)),
            Err(_) if -ns == i64::from(libc::ENOMEM) => {
                Err(Error::Full { engine: "PMDK", detail: "allocator benchmark pool".into() })
            }
            Err(_) => Err(Error::Pmdk { op, message: format!("errno {}", -ns) }),
        }
    }
}

/// Concurrent one-slot `pmemobj_alloc` / `pmemobj_free` on an [`AllocBench`]'s slots (from
/// [`AllocBench::shared`]). `SharedSlots` is `Sync`: threads may call [`SharedSlots::alloc`]
/// and [`SharedSlots::free`] at the same time without any lock of the wrapper, each call
/// claiming its slot for its duration (a slot already claimed by another thread is an
/// `InvalidArgument`, never a concurrent use). A slot allocated by one thread may be freed by
/// another (the claim's acquire/release orders the two calls).
#[derive(Debug)]
pub struct SharedSlots<'a> {
    bench: &'a AllocBench,
    busy: Vec<AtomicBool>,
}

impl SharedSlots<'_> {
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.busy.len()
    }

    /// Whether there are no slots (never: a benchmark has at least one).
    pub fn is_empty(&self) -> bool {
        self.busy.is_empty()
    }

    /// `pmemobj_alloc` of `size` bytes into slot `i`, which must be null.
    pub fn alloc(&self, i: usize, size: u64) -> Result<()> {
        let _claim = self.claim(i)?;
        // SAFETY: the pool handle is valid for the borrow of the benchmark, whose `shared`
        // took it exclusively (so no call under the wrapper's lock runs meanwhile). The shim
        // reads only handle fields written before `shared` (pop, slot array, slot count) and
        // writes only slot `i`, which this thread claimed: no other call touches slot `i`
        // until the claim's release store, and an earlier call on it is ordered before by the
        // claim's acquire. libpmemobj's `pmemobj_alloc` is thread-safe.
        let rc =
            unsafe { ffi::fb_pmdk_bench_alloc_one(self.bench.pmdk.pool.as_ptr(), i as u64, size) };
        Self::status("bench_alloc_one", rc)
    }

    /// `pmemobj_free` of slot `i`, which must hold a block.
    pub fn free(&self, i: usize) -> Result<()> {
        let _claim = self.claim(i)?;
        // SAFETY: as in `alloc`: a valid handle, slot `i` claimed by this thread, and
        // libpmemobj's `pmemobj_free` is thread-safe.
        let rc = unsafe { ffi::fb_pmdk_bench_free_one(self.bench.pmdk.pool.as_ptr(), i as u64) };
        Self::status("bench_free_one", rc)
    }

    fn claim(&self, i: usize) -> Result<Claim<'_>> {
        let flag = self
            .busy
            .get(i)
            .ok_or_else(|| Error::InvalidArgument(format!("slot {i} of {}", self.busy.len())))?;
        if flag.swap(true, Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!("slot {i} is in use by another thread")));
        }
        Ok(Claim(flag))
    }

    fn status(op: &'static str, rc: c_int) -> Result<()> {
        match rc {
            0 => Ok(()),
            libc::ENOMEM | libc::ENOSPC => {
                Err(Error::Full { engine: "PMDK", detail: "allocator benchmark pool".into() })
            }
            libc::EINVAL => Err(Error::InvalidArgument(format!(
                "{op}: slot out of range or in the wrong state"
            ))),
            e => Err(Error::Pmdk { op, message: format!("errno {e}") }),
        }
    }
}

/// A claimed slot, released (with release ordering) on drop.
struct Claim<'a>(&'a AtomicBool);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
