//! Property test of the simulated domain against a plain model of the media axioms: random
//! stores, flushes, non-temporal stores, fences and captures on 8 lines. Every capture must
//! equal the model's image for the same choices — so an image never holds a store that was
//! neither fenced, nor chosen pending, nor chosen evicted, and always holds every fenced
//! store — and with tearing every 8-byte word must be one of the values it could have (never
//! a mix, M1), with the same seed giving the same image.

#![allow(clippy::needless_range_loop)] // the model indexes lines and words explicitly, like the image

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

use ferrite_pmem::header::HEADER_AREA;
use ferrite_pmem::{ImageSpec, Options, Pick, Pool, SIM_POOL_FILE};
use proptest::prelude::*;

const LINES: usize = 8;
type Line = [u64; 8];

#[derive(Clone, Debug)]
enum Op {
    Store { line: usize, word: usize, val: u64 },
    Nt { line: usize, word: usize, val: u64 },
    Flush { line: usize },
    Fence,
    Capture { pending: u8, evict: u8, tear: bool, seed: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..LINES, 0..8usize, 1..u64::MAX).prop_map(|(line, word, val)| Op::Store { line, word, val }),
        1 => (0..LINES, 0..8usize, 1..u64::MAX).prop_map(|(line, word, val)| Op::Nt { line, word, val }),
        3 => (0..LINES).prop_map(|line| Op::Flush { line }),
        2 => Just(Op::Fence),
        2 => (any::<u8>(), any::<u8>(), any::<bool>(), any::<u64>())
            .prop_map(|(pending, evict, tear, seed)| Op::Capture { pending, evict, tear, seed }),
    ]
}

#[derive(Default)]
struct Model {
    working: [Line; LINES],
    durable: [Line; LINES],
    /// (line, content, word mask) in flush order.
    pending: Vec<(usize, Line, u8)>,
    dirty: BTreeSet<usize>,
}

fn image_lines(img: &ferrite_pmem::CrashImage) -> [Line; LINES] {
    let b = img.file(SIM_POOL_FILE).unwrap().bytes();
    let mut out = [[0u64; 8]; LINES];
    for (l, line) in out.iter_mut().enumerate() {
        for (w, word) in line.iter_mut().enumerate() {
            let at = HEADER_AREA as usize + l * 64 + w * 8;
            *word = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn sim_matches_the_axiom_model(ops in proptest::collection::vec(op(), 1..80)) {
        let p = Pool::create_sim(16 * 1024, &Options::default()).unwrap();
        let sim = p.sim().unwrap().clone();
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Store { line, word, val } => {
                    p.store_u64((line * 64 + word * 8) as u64, val, Relaxed).unwrap();
                    m.working[line][word] = val;
                    m.dirty.insert(line);
                }
                Op::Nt { line, word, val } => {
                    p.copy_nt((line * 64 + word * 8) as u64, &val.to_le_bytes()).unwrap();
                    m.working[line][word] = val;
                    m.dirty.insert(line);
                    let content = m.working[line];
                    match m.pending.iter_mut().find(|e| e.0 == line) {
                        Some(e) => { e.1 = content; e.2 |= 1 << word; }
                        None => m.pending.push((line, content, 1 << word)),
                    }
                }
                Op::Flush { line } => {
                    p.flush((line * 64) as u64, 64).unwrap();
                    let content = m.working[line];
                    match m.pending.iter_mut().find(|e| e.0 == line) {
                        Some(e) => { e.1 = content; e.2 = 0xff; }
                        None => m.pending.push((line, content, 0xff)),
                    }
                }
                Op::Fence => {
                    p.fence();
                    for (line, content, mask) in m.pending.drain(..) {
                        for w in 0..8 {
                            if mask & (1 << w) != 0 {
                                m.durable[line][w] = content[w];
                            }
                        }
                        if mask == 0xff && m.working[line] == content {
                            m.dirty.remove(&line);
                        }
                    }
                }
                Op::Capture { pending, evict, tear, seed } => {
                    let spec = ImageSpec {
                        pending: Pick::Mask(u64::from(pending)),
                        evict: Pick::Mask(u64::from(evict)),
                        tear,
                        seed,
                        ..ImageSpec::default()
                    };
                    let got = image_lines(&sim.capture(&spec));
                    prop_assert_eq!(got, image_lines(&sim.capture(&spec)), "seed reproduces");
                    // The model's image for the same choices.
                    let mut want = m.durable;
                    let mut chosen = BTreeSet::new();
                    for (i, (line, content, mask)) in m.pending.iter().enumerate() {
                        if pending & (1 << i) != 0 {
                            chosen.insert(*line);
                            for w in 0..8 {
                                if mask & (1 << w) != 0 {
                                    want[*line][w] = content[w];
                                }
                            }
                        }
                    }
                    for (j, line) in m.dirty.iter().enumerate() {
                        if j < 8 && evict & (1 << j) != 0 {
                            chosen.insert(*line);
                            want[*line] = m.working[*line];
                        }
                    }
                    if !tear {
                        prop_assert_eq!(got, want);
                    } else {
                        for l in 0..LINES {
                            if !chosen.contains(&l) {
                                prop_assert_eq!(got[l], m.durable[l], "unchosen line {} changed", l);
                                continue;
                            }
                            for w in 0..8 {
                                let g = got[l][w];
                                let allowed = g == m.durable[l][w]
                                    || g == want[l][w]
                                    || g == m.working[l][w]
                                    || m.pending.iter().any(|e| e.0 == l && e.1[w] == g);
                                prop_assert!(allowed, "line {} word {}: {:#x} is no value it had", l, w, g);
                            }
                        }
                    }
                    // Durable-only images hold exactly the fenced state.
                    prop_assert_eq!(image_lines(&sim.capture(&ImageSpec::durable())), m.durable);
                }
            }
        }
    }
}
