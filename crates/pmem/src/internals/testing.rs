//! Test-pool directories (conventions §5): `FERRITE_POOL_DIR` if set, else a unique directory
//! under `/dev/shm` (or the system temp directory where `/dev/shm` is missing), removed when the
//! guard drops.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory for test pools, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl TestDir {
    /// Creates a fresh, empty directory whose name contains `tag`.
    pub fn new(tag: &str) -> TestDir {
        let root = std::env::var_os("FERRITE_POOL_DIR").map(PathBuf::from).unwrap_or_else(|| {
            let shm = Path::new("/dev/shm");
            if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = root.join(format!("ferrite-test-{}-{}-{tag}", std::process::id(), n));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create test dir {}: {e}", path.display()));
        TestDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Fault injection for soundness tests: the next segment mapping of `set` (by
/// [`PoolSet::grow`](crate::PoolSet::grow) or [`PoolSet::add_segment`](crate::PoolSet::add_segment))
/// fails the way a failing `MAP_FIXED` may on Linux before 6.12: after the memory under the
/// target range was already removed. The pool set must refill the range before returning the
/// error, so no hole is left in its address space.
pub fn fail_next_segment_map(set: &crate::PoolSet) {
    set.inject_map_failure();
}

/// The seed of a random test: `FERRITE_TEST_SEED` (decimal or `0x` hex) when set, else the
/// clock; printed as `FERRITE_TEST_SEED=0x…` so a failing run can be replayed.
pub fn test_seed() -> u64 {
    printed_seed(env_seed().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }))
}

/// The seed of a random test with a fixed default: `FERRITE_TEST_SEED` when set, else
/// `default`; printed as [`test_seed`] prints it.
pub fn test_seed_or(default: u64) -> u64 {
    printed_seed(env_seed().unwrap_or(default))
}

/// `FERRITE_TEST_SEED`, decimal or `0x` hex.
fn env_seed() -> Option<u64> {
    std::env::var("FERRITE_TEST_SEED").ok().and_then(|v| match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    })
}

fn printed_seed(s: u64) -> u64 {
    eprintln!("FERRITE_TEST_SEED={s:#x}");
    s
}
