//! Which images to build at a crash point: subsets of the pending lines (the stash), subsets
//! of the block files' unsynced sector versions and length changes, early eviction of dirty
//! lines, torn lines, and corrupted variants; and how to describe each.
//!
//! # Invariants
//! - Every choice comes from the explorer's seeded generator: the same state and seed give
//!   the same images.
//!
//! # Concurrency
//! Called by the explorer while it holds the world lock (no workload thread runs).

use ferrite_pmem::{CrashImage, ImageSpec, Pick, SimDomain, SplitMix64};

use super::{Config, Explorer, lock};
use crate::target::Target;

/// The pending-line subsets to try for `k` pending lines.
pub(super) fn subsets(k: usize, cfg: &Config, rng: &mut SplitMix64) -> Vec<Pick> {
    if !cfg.stash {
        return if k == 0 { vec![Pick::None] } else { vec![Pick::None, Pick::All] };
    }
    if k <= cfg.max_exhaustive_lines.min(16) {
        return (0..1u64 << k).map(Pick::Mask).collect();
    }
    let mut v = vec![Pick::None, Pick::All];
    // Singletons and all-but-one only while that stays affordable (a bulk persist of
    // thousands of lines gets the samples alone).
    if k <= 64 {
        for i in 0..k {
            v.push(Pick::Indices(vec![i]));
            v.push(Pick::Indices((0..k).filter(|&j| j != i).collect()));
        }
    }
    for _ in 0..cfg.samples_beyond {
        v.push(Pick::Indices((0..k).filter(|_| rng.next_u64() & 1 == 1).collect()));
    }
    v
}

/// What `p` picks of `k` candidates called `what`.
fn picked(p: &Pick, k: usize, what: &str) -> String {
    match p {
        Pick::None => format!("none of {k} {what}"),
        Pick::All => format!("all {k} {what}"),
        Pick::Mask(m) => {
            format!("{what} {:?} of {k}", (0..k).filter(|i| m & (1 << i) != 0).collect::<Vec<_>>())
        }
        Pick::Indices(v) => format!("{what} {v:?} of {k}"),
        Pick::Random(p) => format!("each of {k} {what} with p={p}"),
    }
}

/// A spec in words: `k` pending lines, `b` unsynced block-file choices.
pub(super) fn describe(s: &ImageSpec, k: usize, b: usize) -> String {
    let mut d = picked(&s.pending, k, "pending lines");
    if b > 0 {
        d.push_str(", ");
        d.push_str(&picked(&s.blocks, b, "unsynced block-file choices"));
    }
    if s.evict != Pick::None {
        d.push_str(", dirty lines evicted early");
    }
    match (s.tear, s.tear_words) {
        (true, Some(w)) => d.push_str(&format!(", lines torn to words {w:#010b}")),
        (true, None) => d.push_str(", lines torn at 8 bytes"),
        _ => {}
    }
    if s.evict != Pick::None || s.tear || matches!(s.blocks, Pick::Random(_)) {
        d.push_str(&format!(" (image seed {:#x})", s.seed));
    }
    d
}

impl<T: Target> Explorer<T> {
    /// The images to test at a crash point of `thread` with `pending` lines pending, at the
    /// top level or inside a recovery: every subset of the pending lines (sampled beyond
    /// `max_exhaustive_lines`), each dirty line evicted alone (up to `max_exhaustive_lines`)
    /// plus `evict_samples` seeded evictions, and for targets without M2 each word of small
    /// stashes alone and each alone missing plus `tear_samples` seeded tears.
    pub(super) fn specs_at(
        &self,
        domain: &SimDomain,
        thread: u32,
        pending: usize,
        rng: &mut SplitMix64,
    ) -> Vec<ImageSpec> {
        let mut specs: Vec<ImageSpec> = subsets(pending, &self.cfg, rng)
            .into_iter()
            .map(|pick| ImageSpec { thread: Some(thread), pending: pick, ..ImageSpec::default() })
            .collect();
        let unsynced = domain.unsynced_blocks().len();
        if unsynced > 0 {
            // The block files' unsynced choices, picked as the pending lines are (every
            // subset up to `max_exhaustive_lines`, sampled beyond), with none of the pending
            // lines; then everything at once. Not the cross product of both.
            for pick in subsets(unsynced, &self.cfg, rng) {
                if matches!(pick, Pick::None | Pick::Mask(0)) {
                    continue; // the durable image, already there
                }
                specs.push(ImageSpec {
                    thread: Some(thread),
                    blocks: pick,
                    ..ImageSpec::default()
                });
            }
            if pending > 0 {
                specs.push(ImageSpec {
                    thread: Some(thread),
                    pending: Pick::All,
                    blocks: Pick::All,
                    ..ImageSpec::default()
                });
            }
        }
        let n_dirty = domain.dirty_lines().len();
        let dirty = n_dirty > 0;
        if dirty && self.cfg.evict_samples > 0 {
            // Each dirty line written back early on its own (systematic for small sets),
            // then seeded random combinations.
            if n_dirty <= self.cfg.max_exhaustive_lines {
                for i in 0..n_dirty {
                    specs.push(ImageSpec {
                        thread: Some(thread),
                        evict: Pick::Indices(vec![i]),
                        ..ImageSpec::default()
                    });
                }
            }
            for _ in 0..self.cfg.evict_samples {
                specs.push(ImageSpec {
                    thread: Some(thread),
                    pending: Pick::Random(0.5),
                    evict: Pick::Random(0.5),
                    seed: rng.next_u64(),
                    ..ImageSpec::default()
                });
            }
        }
        if !self.target.axioms().m2 && (dirty || pending > 0) && self.cfg.tear_samples > 0 {
            // Each 8-byte word of the pending lines persisting on its own, and each word
            // alone missing (systematic for small stashes), then seeded random tears.
            if pending > 0 && pending <= 4 {
                for w in 0..8 {
                    for words in [1u8 << w, !(1u8 << w)] {
                        specs.push(ImageSpec {
                            thread: Some(thread),
                            pending: Pick::All,
                            tear: true,
                            tear_words: Some(words),
                            ..ImageSpec::default()
                        });
                    }
                }
            }
            for _ in 0..self.cfg.tear_samples {
                specs.push(ImageSpec {
                    thread: Some(thread),
                    pending: Pick::All,
                    evict: if self.cfg.evict_samples > 0 { Pick::Random(0.5) } else { Pick::None },
                    tear: true,
                    seed: rng.next_u64(),
                    ..ImageSpec::default()
                });
            }
        }
        specs
    }

    /// A corrupted copy of `image`: random bit flips, or a truncated file.
    pub(super) fn corrupt(&self, mut image: CrashImage, n: usize) -> (CrashImage, String) {
        let mut st = lock(&self.state);
        let rng = &mut st.rng;
        let (nf, nb) = (image.files.len(), image.blocks.len());
        if nf + nb == 0 {
            return (image, "no files".into());
        }
        // Pool files and block files alike.
        let fi = (rng.next_u64() % (nf + nb) as u64) as usize;
        let f = if fi < nf { &mut image.files[fi] } else { &mut image.blocks[fi - nf] };
        if n % 4 == 3 && f.len > 0 {
            let len = rng.next_u64() % f.len;
            f.truncate(len);
            let what = format!("file {} truncated to {len} bytes", f.name);
            return (image, what);
        }
        let flips = 1 + rng.next_u64() % 8;
        let hot = 4096u64.min(f.len.max(1));
        let mut at = Vec::new();
        for _ in 0..flips {
            // Half of the flips land in the first page (headers, roots), half anywhere.
            let off = if rng.next_u64() & 1 == 0 {
                rng.next_u64() % hot
            } else {
                rng.next_u64() % f.len.max(1)
            };
            f.xor_byte(off, 1 << (rng.next_u64() % 8));
            at.push(off);
        }
        let name = f.name.clone();
        (image, format!("{flips} bit flips in {name} at {at:?}"))
    }
}
