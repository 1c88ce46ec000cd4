//! Thread records: each thread leases one of the pool's records (8 per slot, at most 64) at its first
//! operation on an allocator and journals every operation there, so that the lazy disarm
//! (P-ALLOC-3) leaves a pending flush only on a line no other thread writes (P-ALLOC-8).
//!
//! # Invariants
//! - A record is leased by at most one live thread per allocator; the lease is returned when
//!   the thread exits, after a fence that makes its last disarm durable (P-ALLOC-8).
//! - A thread that finds every record leased journals in its slot's item instead (and pays the
//!   synchronous disarm, `redo.rs`).
//!
//! # Ordering
//! P-ALLOC-8: the exiting thread fences before its record goes back to the free list.
//!
//! # Concurrency
//! Leases are per thread (`thread_local!`) and per allocator instance; the free list of
//! records is behind a mutex touched only at a thread's first operation and at its exit.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ferrite_pmem::PoolSet;

use super::layout::record_count;
use super::{PAllocator, lock};

/// The records of one allocator instance that no live thread leases.
#[derive(Debug)]
pub(super) struct Records {
    /// Weak: the allocator's `close` needs to be the set's last holder.
    set: Weak<PoolSet>,
    free: Mutex<Vec<u32>>,
}

impl Records {
    /// The records of an allocator with `slots` slots, none leased.
    pub(super) fn new(set: &Arc<PoolSet>, slots: u32) -> Arc<Records> {
        let free = (0..record_count(slots)).rev().collect();
        Arc::new(Records { set: Arc::downgrade(set), free: Mutex::new(free) })
    }
}

struct Lease {
    alloc: u64,
    record: u32,
    owner: Weak<Records>,
}

/// The calling thread's leases; returned (after a fence) when the thread exits.
struct Leases(RefCell<Vec<Lease>>);

impl Drop for Leases {
    fn drop(&mut self) {
        for l in self.0.get_mut().drain(..) {
            if let Some(r) = l.owner.upgrade() {
                if let Some(set) = r.set.upgrade() {
                    set.fence_rule("P-ALLOC-8"); // ORDER(P-ALLOC-8): this thread's last disarm is durable before another thread may write the record
                }
                lock(&r.free).push(l.record);
            }
        }
    }
}

thread_local! {
    static LEASES: Leases = const { Leases(RefCell::new(Vec::new())) };
}

/// Source of allocator instance ids (a lease names the instance it belongs to).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_instance_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl PAllocator {
    /// The calling thread's record in this allocator, leased at its first call; `None` when
    /// every record is leased (or the thread is being torn down).
    pub(super) fn my_record(&self) -> Option<u32> {
        LEASES
            .try_with(|l| {
                let mut v = l.0.borrow_mut();
                if let Some(x) = v.iter().find(|x| x.alloc == self.id) {
                    return Some(x.record);
                }
                v.retain(|x| x.owner.strong_count() > 0);
                let record = lock(&self.records.free).pop()?;
                v.push(Lease { alloc: self.id, record, owner: Arc::downgrade(&self.records) });
                Some(record)
            })
            .ok()
            .flatten()
    }
}
