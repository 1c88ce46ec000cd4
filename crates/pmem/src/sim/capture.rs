//! Capturing a crash image from a domain's current state (the choices are described by an
//! [`ImageSpec`]; the order of candidate lines and the seeded choices are documented in
//! [`crate::image`]).
//!
//! # Invariants
//! - D3: a capture takes the gate exclusively, so no store, flush or fence is half-applied in
//!   the image: it is a state some crash could produce.
//! - Pending lines carry their content at flush time (M3); evicted dirty lines their newest
//!   working content (M5); torn lines only some of their 8-byte words (M1 holds).
//! - Block files: the durable content plus, per sector written since the file's last sync,
//!   at most one of its versions (B1: sectors never tear), and the durable or the newest
//!   length (`sim/blocks.rs`).
//!
//! # Concurrency
//! Holds the gate exclusively and the pending lock while it reads pending sets.

use std::collections::BTreeMap;

use super::{SimDomain, thread_index};
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
        let mut put = |file: &str, line: u64, content: [u8; 64], mask: u8, rng: &mut SplitMix64| {
            let mask = match (spec.tear, spec.tear_words) {
                (false, _) => mask,
                (true, Some(words)) => mask & words,
                (true, None) => mask & (rng.next_u64() as u8),
            };
            if mask == 0 {
                return;
            }
            if let Some(f) = files.get_mut(file) {
                f.put_words(line, &content, mask);
            }
        };
        {
            let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mine) = pending.get(&me) {
                for (i, l) in mine.lines.iter().enumerate() {
                    if spec.pending.chooses(i, &mut rng) {
                        put(&l.file, l.line, l.content, l.mask, &mut rng);
                    }
                }
            }
            let mut others: Vec<_> = pending.iter().filter(|(t, _)| **t != me).collect();
            others.sort_by_key(|(t, _)| **t);
            let mut i = 0;
            for (_, v) in others {
                for l in &v.lines {
                    if spec.others_pending.chooses(i, &mut rng) {
                        put(&l.file, l.line, l.content, l.mask, &mut rng);
                    }
                    i += 1;
                }
            }
        }
        if spec.evict != Pick::None {
            let mut i = 0;
            for f in g.files.values() {
                for line in f.dirty_lines() {
                    if spec.evict.chooses(i, &mut rng)
                        && let Some(w) = f.working_line(line)
                    {
                        put(&f.name, line, w, 0xff, &mut rng);
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
