//! Crash target `poolset-files`: a pool set's file operations ([S1] item 6), crashed at every
//! persist point they reach.
//!
//! The workload creates a pool set of tiny segments (four 4 KiB data pages each) and runs a
//! seeded mix of operations on it: growing a segment (P-PM-1 header and magic, P-PM-8 bitmap
//! bit), stamping a page (one word, persisted), punching a hole over a page
//! (`PoolSet::punch_hole`: the page reads zeros from then on), and removing a segment
//! (`PoolSet::remove_segment`, P-PM-9: bitmap bit first, then the file goes). Segment ids are
//! not reused within one open, so the id a grow will get is known before it runs (the lowest
//! id never used in this open) and the model can name it.
//!
//! The check after every crash: the image opens (the open deletes orphan files of an
//! interrupted grow or removal); the live segments are exactly those the committed operations
//! leave (an in-flight grow or removal may or may not have happened, but never half: a live
//! segment always has its complete header); and every stamped page of a live segment holds its
//! stamp, or zero after a punch (an in-flight stamp or punch of that page may go either way).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use ferrite_pmem::{CrashImage, Options, PPtr, PoolSet};

use crate::target::{Ctx, ModelOp, ModelView, Target};

/// Segment size: the 4 KiB header page and four data pages.
const SEG: u64 = 5 * 4096;
/// Data pages per segment.
const PAGES: u64 = 4;
/// Operations of the workload.
const OPS: u64 = 120;
/// At most this many segments besides segment 0 are live at once.
const MAX_LIVE: usize = 4;

fn opts() -> Options {
    Options::default().layout("crashtest-poolset").segment_size(SEG)
}

/// One operation of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileOp {
    /// Creating the pool set.
    Create,
    /// Adding segment `seg`.
    Grow { seg: u64 },
    /// Writing `value` into the first word of page `page` of segment `seg` (persisted).
    Stamp { seg: u64, page: u64, value: u64 },
    /// Punching a hole over page `page` of segment `seg`.
    Punch { seg: u64, page: u64 },
    /// Removing segment `seg`.
    Remove { seg: u64 },
}

impl ModelOp for FileOp {
    fn encode(&self) -> String {
        match self {
            FileOp::Create => "create".into(),
            FileOp::Grow { seg } => format!("grow {seg}"),
            FileOp::Stamp { seg, page, value } => format!("stamp {seg} {page} {value}"),
            FileOp::Punch { seg, page } => format!("punch {seg} {page}"),
            FileOp::Remove { seg } => format!("remove {seg}"),
        }
    }
    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(' ').collect();
        Some(match f.as_slice() {
            ["create"] => FileOp::Create,
            ["grow", a] => FileOp::Grow { seg: a.parse().ok()? },
            ["stamp", a, b, c] => FileOp::Stamp {
                seg: a.parse().ok()?,
                page: b.parse().ok()?,
                value: c.parse().ok()?,
            },
            ["punch", a, b] => FileOp::Punch { seg: a.parse().ok()?, page: b.parse().ok()? },
            ["remove", a] => FileOp::Remove { seg: a.parse().ok()? },
            _ => return None,
        })
    }
}

/// What the model says the pool set holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    created: bool,
    /// Live segments besides segment 0, with the first word of each data page.
    segs: BTreeMap<u64, [u64; PAGES as usize]>,
}

impl State {
    fn apply(&mut self, op: &FileOp) {
        match *op {
            FileOp::Create => self.created = true,
            FileOp::Grow { seg } => {
                self.segs.insert(seg, [0; PAGES as usize]);
            }
            FileOp::Stamp { seg, page, value } => {
                if let Some(p) = self.segs.get_mut(&seg) {
                    p[page as usize] = value;
                }
            }
            FileOp::Punch { seg, page } => {
                if let Some(p) = self.segs.get_mut(&seg) {
                    p[page as usize] = 0;
                }
            }
            FileOp::Remove { seg } => {
                self.segs.remove(&seg);
            }
        }
    }
}

/// The target (see the module docs).
#[derive(Debug, Default)]
pub struct PoolSetFiles;

impl Target for PoolSetFiles {
    type Op = FileOp;
    /// `None`: creation never finished; otherwise the live segments and their page words.
    type Recovered = Option<BTreeMap<u64, [u64; PAGES as usize]>>;

    fn name(&self) -> &'static str {
        "poolset-files"
    }
    fn summary(&self) -> &'static str {
        "a pool set's file operations: grow, stamped pages, hole punches, segment removal"
    }
    fn rules(&self) -> &'static [&'static str] {
        &["P-PM-1", "P-PM-8", "P-PM-9"]
    }
    fn min_images(&self) -> u64 {
        100
    }

    fn workload(&self, ctx: &mut Ctx<FileOp>) -> Result<(), String> {
        let pe = |e: ferrite_pmem::Error| e.to_string();
        let tok = ctx.begin(FileOp::Create);
        let set = ctx.create_pool_set(&opts())?;
        ctx.done(tok);
        // Ids live or removed in this open: a grow takes the lowest id in neither.
        let mut used: BTreeSet<u64> = BTreeSet::from([0]);
        let mut live: Vec<u64> = Vec::new();
        for step in 0..OPS {
            let r = ctx.rng().next_u64();
            let choice = r % 10;
            if live.is_empty() || (choice < 2 && live.len() < MAX_LIVE) {
                let seg = (1..).find(|i| !used.contains(i)).unwrap_or(u64::MAX);
                let tok = ctx.begin(FileOp::Grow { seg });
                let got = set.grow().map_err(pe)?;
                if got != seg {
                    return Err(format!("grow gave segment {got}, the model expected {seg}"));
                }
                ctx.done(tok);
                used.insert(seg);
                live.push(seg);
                continue;
            }
            let seg = live[(r >> 8) as usize % live.len()];
            let page = (r >> 16) % PAGES;
            match choice {
                2 if live.len() > 1 => {
                    let tok = ctx.begin(FileOp::Remove { seg });
                    set.remove_segment(seg).map_err(pe)?;
                    ctx.done(tok);
                    live.retain(|&s| s != seg);
                }
                3 | 4 => {
                    let tok = ctx.begin(FileOp::Punch { seg, page });
                    set.punch_hole(PPtr::new(seg, page * 4096), 4096).map_err(pe)?;
                    ctx.done(tok);
                }
                _ => {
                    let value = (step + 1) << 8 | seg;
                    let tok = ctx.begin(FileOp::Stamp { seg, page, value });
                    let g = set.resolve(PPtr::new(seg, page * 4096)).map_err(pe)?;
                    set.store_u64(g, value, Ordering::Release).map_err(pe)?;
                    set.persist(g, 8).map_err(pe)?; // ORDER(P-APP-1): workload data durable before it counts as done or is published
                    ctx.done(tok);
                }
            }
        }
        Ok(())
    }

    fn recover(&self, image: &CrashImage) -> Result<Self::Recovered, String> {
        let set = match PoolSet::open_sim(image, &opts()) {
            Ok(s) => s,
            Err(ferrite_pmem::Error::Incomplete { .. }) => return Ok(None),
            Err(e) => return Err(format!("the pool set does not open: {e}")),
        };
        let mut segs = BTreeMap::new();
        for info in set.segments().into_iter().filter(|i| i.id != 0) {
            let mut words = [0u64; PAGES as usize];
            for (page, w) in words.iter_mut().enumerate() {
                let g = set
                    .resolve(PPtr::new(info.id, page as u64 * 4096))
                    .map_err(|e| format!("live segment {} does not resolve: {e}", info.id))?;
                *w = set.load_u64(g, Ordering::Acquire).map_err(|e| e.to_string())?;
            }
            segs.insert(info.id, words);
        }
        Ok(Some(segs))
    }

    fn check(&self, r: &Self::Recovered, m: &ModelView<FileOp>) -> Result<(), String> {
        let mut without = State::default();
        for op in &m.committed {
            without.apply(op);
        }
        let mut with = without.clone();
        for op in &m.in_flight {
            with.apply(op);
        }
        let Some(segs) = r else {
            return if without.created {
                Err("the pool set's creation committed, but the image does not open".into())
            } else {
                Ok(())
            };
        };
        if segs == &without.segs || segs == &with.segs {
            return Ok(());
        }
        Err(format!(
            "live segments and page words {segs:?}; expected {:?} (or, with the in-flight {:?}, {:?})",
            without.segs, m.in_flight, with.segs
        ))
    }
}
