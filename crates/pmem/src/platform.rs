//! Thin, checked wrappers over the operating-system calls the persistence layer needs:
//! `flock`, `fallocate`, `statvfs`/`statfs`, `mmap`/`munmap`/`msync`, `getrandom`,
//! `sched_getcpu`, `sched_getaffinity`/`sched_setaffinity`, `gettid`, `sched_setscheduler`.
//!
//! Each wrapper turns `errno` into `std::io::Error`; the callers attach the path and the
//! operation and map specific errors (`EWOULDBLOCK` → locked, `ENOSPC` → full) to typed errors.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// Page size of this machine.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory effects.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 { v as usize } else { 4096 }
    })
}

/// The CPU the calling thread is running on (`sched_getcpu`), or `None` where the call fails.
/// A hint only: the thread may be moved right after.
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and has no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

/// The kernel's id of the calling thread (`gettid`), as [`idle_thread`] takes it.
pub fn current_thread_id() -> i32 {
    // SAFETY: gettid takes no arguments and has no memory effects.
    unsafe { libc::gettid() }
}

/// Moves the thread `tid` (a [`current_thread_id`] of this process) to the idle scheduling
/// class (`SCHED_IDLE`, `sched_setscheduler`): from then on it runs only on a CPU nothing else
/// wants. For a thread that is given up and cannot be stopped (a crash tester's hung
/// recovery, which may spin for ever); lowering a thread's class needs no privilege. The
/// caller makes sure `tid` still runs (an id is reused once its thread has exited).
pub fn idle_thread(tid: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads one valid, initialised sched_param.
    let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity`): for tests and benchmarks that
/// need a thread on a given core. An error if the CPU does not exist or is not allowed.
pub fn pin_current_thread(cpu: u32) -> io::Result<()> {
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu}")));
    }
    let mut set = empty_cpu_set();
    // SAFETY: the index is below CPU_SETSIZE (checked above): the write stays inside `set`.
    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    // SAFETY: sched_setaffinity reads `size_of` bytes of a valid, initialised set.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), ascending.
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    let mut set = empty_cpu_set();
    // SAFETY: sched_getaffinity writes at most `size_of` bytes into the valid set.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE: the read stays inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

fn empty_cpu_set() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    unsafe { std::mem::zeroed() }
}

/// Takes an exclusive, non-blocking `flock` on `file`. `Ok(false)` means another open file
/// description holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a valid descriptor owned by `file`; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// Allocates backing space for `[0, len)` of `file` so that later stores through a mapping
/// cannot fail with SIGBUS for lack of space. Falls back to `posix_fallocate` where
/// `fallocate` is not supported.
pub fn allocate_space(file: &File, len: u64) -> io::Result<()> {
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: fallocate on a valid descriptor; no memory is passed.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => break,
            _ => return Err(err),
        }
    }
    // SAFETY: posix_fallocate on a valid descriptor; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
}

/// Populates the pages of `[addr, addr + len)` for writing (`MADV_POPULATE_WRITE`). Returns
/// `Ok(false)` where the kernel does not know the advice (before Linux 5.14).
///
/// # Safety
/// `[addr, addr + len)` must be a live shared mapping of a file with its space allocated (a
/// hole would fail with `EFAULT`, which is returned as an error, never a signal).
pub unsafe fn populate_write(addr: NonNull<u8>, len: usize) -> io::Result<bool> {
    loop {
        // SAFETY: the caller guarantees a live mapping of `len` bytes at `addr`; the advice
        // only faults pages in, it changes no contents.
        let rc = unsafe { libc::madvise(addr.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EINVAL) => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// Space figures of the file system holding a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSpace {
    /// Bytes available to an unprivileged user.
    pub available: u64,
    /// Total bytes.
    pub total: u64,
    /// `statfs` magic number of the file system type.
    pub fs_magic: u64,
}

/// `statvfs` + `statfs` of `path` (which must exist).
pub fn fs_space(path: &Path) -> io::Result<FsSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `vfs` points to writable storage of the right type.
    let rc = unsafe { libc::statvfs(c.as_ptr(), vfs.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let vfs = unsafe { vfs.assume_init() };
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: as above, for statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), fs.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs returned 0, so it initialised the struct.
    let fs = unsafe { fs.assume_init() };
    let frsize = vfs.f_frsize;
    Ok(FsSpace {
        available: vfs.f_bavail.saturating_mul(frsize),
        total: vfs.f_blocks.saturating_mul(frsize),
        fs_magic: fs.f_type as u64,
    })
}

/// A human name for a `statfs` magic number.
pub fn fs_name(magic: u64) -> &'static str {
    match magic {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x6573_5546 => "fuse",
        0x794c_7630 => "overlayfs",
        0x6969 => "nfs",
        0x0102_1997 => "9p",
        _ => "other",
    }
}

/// Whether the file system is memory-backed (tmpfs/ramfs): its pages live in RAM and survive a
/// process crash, but not power loss.
pub fn fs_is_ram(magic: u64) -> bool {
    matches!(magic, 0x0102_1994 | 0x8584_58f6)
}

/// Maps `len` bytes of `file` shared and writable. With `sync`, asks for
/// `MAP_SHARED_VALIDATE | MAP_SYNC` and returns the raw errno when the kernel refuses.
pub fn map_shared(file: &File, len: usize, sync: bool) -> Result<NonNull<u8>, i32> {
    let flags = if sync { libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC } else { libc::MAP_SHARED };
    // SAFETY: mmap with a null hint creates a new mapping and does not touch existing memory;
    // the descriptor is valid for the call.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    NonNull::new(p.cast::<u8>()).ok_or(libc::EIO)
}

/// Unmaps `[ptr, ptr + len)`: a mapping made by [`map_shared`] or [`reserve`], or a
/// page-aligned part of a reservation.
///
/// # Safety
/// The range must belong to mappings the caller owns, and no access to it may happen
/// afterwards (unless the caller maps it again first).
pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller guarantees the range is one of our mappings and is no longer used.
    let _ = unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}

/// `msync(MS_SYNC)` of the pages covering `[addr, addr+len)`.
///
/// # Safety
/// The range must lie inside one live mapping.
pub unsafe fn msync_range(addr: *const u8, len: usize) -> io::Result<u64> {
    let page = page_size();
    let start = (addr as usize) & !(page - 1);
    let end = (addr as usize + len).div_ceil(page) * page;
    // SAFETY: the caller guarantees the range is mapped; msync only writes back page-cache pages.
    let rc = unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_SYNC) };
    if rc == 0 { Ok(((end - start) / page) as u64) } else { Err(io::Error::last_os_error()) }
}

/// Fills `buf` with random bytes from the kernel.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        done += n as usize;
    }
    Ok(())
}

/// Symbolic name of an errno value, for messages such as "MAP_SYNC refused: EOPNOTSUPP".
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        libc::ENODEV => "ENODEV",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSPC => "ENOSPC",
        libc::EAGAIN => "EAGAIN",
        libc::EBADF => "EBADF",
        libc::ENXIO => "ENXIO",
        _ => "errno",
    }
}

/// Reserves `len` bytes of address space as private, anonymous, read-write memory with
/// `MAP_NORESERVE`: no memory is committed until touched. Pool sets map their segments over
/// it with `MAP_FIXED`; parts without a segment stay anonymous, so a stale access never faults.
pub fn reserve(len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping at a kernel-chosen address touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// Maps `len` bytes of `file` shared at exactly `addr` (which must lie inside a reservation
/// made by [`reserve`]), with `MAP_SYNC` when `sync`. Returns the errno on failure.
///
/// # Safety
/// `[addr, addr + len)` must lie inside a reservation owned by the caller, and no Rust
/// reference may cover it (its old contents are replaced).
pub unsafe fn map_fixed(addr: NonNull<u8>, len: usize, file: &File, sync: bool) -> Result<(), i32> {
    let flags = if sync { libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC } else { libc::MAP_SHARED };
    // SAFETY: the caller guarantees the range is its own reservation; MAP_FIXED replaces it
    // atomically with respect to other threads' accesses.
    let p = unsafe {
        libc::mmap(
            addr.as_ptr().cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    Ok(())
}

/// Replaces `[addr, addr + len)` with fresh anonymous memory (used when a segment leaves a pool
/// set: a reader still inside reads zeros instead of faulting).
///
/// # Safety
/// As [`map_fixed`].
pub unsafe fn map_anon_fixed(addr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is its own reservation.
    let p = unsafe {
        libc::mmap(
            addr.as_ptr().cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `fsync` of a directory, so that file creations and removals in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Allocates backing space for `[off, off + len)` of `file` (`fallocate` mode 0 with
/// `FALLOC_FL_KEEP_SIZE`): a range that was punched is backed again, so a later store through a
/// mapping cannot raise SIGBUS for lack of space. Cheap where the range is already allocated.
pub fn allocate_range(file: &File, off: u64, len: u64) -> io::Result<()> {
    let (off, len) = match (i64::try_from(off), i64::try_from(len)) {
        (Ok(o), Ok(l)) => (o, l),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    loop {
        // SAFETY: fallocate on a valid descriptor; no memory is passed.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, len) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// Deallocates `[off, off + len)` of `file` (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`): the
/// range reads as zeros and its space is released.
pub fn punch_hole(file: &File, off: u64, len: u64) -> io::Result<()> {
    let (off, len) = match (i64::try_from(off), i64::try_from(len)) {
        (Ok(o), Ok(l)) => (o, l),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    loop {
        // SAFETY: fallocate on a valid descriptor; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}
