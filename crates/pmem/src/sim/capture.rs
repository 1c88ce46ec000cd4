//! Capturing a crash image from a domain's current state (the choices are described by an
//! [`ImageSpec`]; the order of candidate lines and the seeded choices are documented in
//! [`crate::image`]).
//!
//! # Invariants
//! - D3: a capture takes the gate exclusively, so no store, flush or fence is half-applied in
//!   the image: it is a state some crash could produce.
//! - Pending lines carry their content at flush time (M3); evicted dirty lines their newest
//!   working content (M5); torn lines only some of their 8-byte words (M1 holds).
//! - D7: under `WritebackOrder::Coherent` no pending line lands over newer durable content
//!   of its line, and of several chosen captures of one line the newest is written last.
//! - Block files: the durable content plus, per sector written since the file's last sync,
//!   at most one of its versions (B1: sectors never tear), and the durable or the newest
//!   length (`sim/blocks.rs`).
//!
//! # Concurrency
//! Holds the gate exclusively and the pending lock while it reads pending sets.

use std::collections::{BTreeMap, HashMap};

use super::{SimDomain, WritebackOrder, thread_index};
use crate::image::{CrashImage, ImageFile, ImageSpec, Pick, SplitMix64};

impl SimDomain {
    /// Captures a crash image per `spec` (see the module docs). Takes the gate exclusively, so
    /// the image is a state some crash could produce even while other threads run (D3).
    pub fn capture(&self, spec: &ImageSpec) -> CrashImage {
        let g = self.write_gate();
        let me = spec.thread.unwrap_or_else(thread_index);
        let mut rng = SplitMix64::new(spec.seed);
        let mut files: BTreeMap<String, ImageFile> = g
            .files
            .values()
            .map(|f| (f.name.clone(), ImageFile::from_pages(&f.name, f.len, f.durable.clone())))
            .collect();
        // The tear draws happen in candidate order (seeded choices stay as documented in
        // `crate::image`). Under `WritebackOrder::Coherent` the chosen pending lines are then
        // written in stamp order and a capture older than its line's durable content is left
        // out (D7): of two threads' captures of one line, the newer one wins. `Strict` writes
        // them in candidate order (the calling thread's, then the others' by thread).
        let tear = |mask: u8, rng: &mut SplitMix64| match (spec.tear, spec.tear_words) {
            (false, _) => mask,
            (true, Some(words)) => mask & words,
            (true, None) => mask & (rng.next_u64() as u8),
        };
        let mut put = |file: &str, line: u64, content: &[u8; 64], mask: u8| {
            if mask != 0
                && let Some(f) = files.get_mut(file)
            {
                f.put_words(line, content, mask);
            }
        };
        {
            let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let mut chosen = Vec::new();
            if let Some(mine) = pending.get(&me) {
                for (i, l) in mine.lines.iter().enumerate() {
                    if spec.pending.chooses(i, &mut rng) {
                        chosen.push((l, tear(l.mask, &mut rng)));
                    }
                }
            }
            let mut others: Vec<_> = pending.iter().filter(|(t, _)| **t != me).collect();
            others.sort_by_key(|(t, _)| **t);
            let mut i = 0;
            for (_, v) in others {
                for l in &v.lines {
                    if spec.others_pending.chooses(i, &mut rng) {
                        chosen.push((l, tear(l.mask, &mut rng)));
                    }
                    i += 1;
                }
            }
            if self.writeback_order() == WritebackOrder::Coherent {
                // Flushed lines by stamp, then non-temporal words (they reach memory at a
                // drain, after every capture older than it).
                chosen.sort_by_key(|(l, _)| if l.nt { u64::MAX } else { l.stamp });
            }
            let mut stamps: HashMap<(&str, u64), [u64; 8]> = HashMap::new();
            for (l, mask) in chosen {
                let s = stamps.entry((l.file.as_str(), l.line)).or_insert_with(|| {
                    g.files.get(&l.file).map_or([0; 8], |f| f.stamps_of(l.line))
                });
                let mask = self.landing_mask(l.stamp, l.nt, mask, s);
                let stamp = if l.nt { u64::MAX } else { l.stamp };
                for (w, word) in s.iter_mut().enumerate() {
                    if mask & (1 << w) != 0 {
                        *word = stamp;
                    }
                }
                put(&l.file, l.line, &l.content, mask);
            }
        }
        if spec.evict != Pick::None {
            let mut i = 0;
            for f in g.files.values() {
                for line in f.dirty_lines() {
                    if spec.evict.chooses(i, &mut rng)
                        && let Some(w) = f.working_line(line)
                    {
                        put(&f.name, line, &w, tear(0xff, &mut rng));
                    }
                    i += 1;
                }
            }
        }
        // Block files last: their candidates (and random draws) come after every line's.
        let blocks = SimDomain::capture_blocks(&g.blocks, &spec.blocks, &mut rng);
        drop(g);
        self.count_image();
        CrashImage { files: files.into_values().collect(), blocks, note: String::new() }
    }
}
