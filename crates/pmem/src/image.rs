//! Crash images: what a simulated crash leaves in persistent memory, built cheaply as the
//! durable image (shared copy-on-write pages) plus a sparse overlay of chosen lines.
//!
//! Which lines join the durable base is described by an [`ImageSpec`]; every random choice
//! comes from its `seed` (SplitMix64), so the same domain state and the same spec give the
//! same image. Lines are considered in a fixed order: the chosen thread's pending lines in
//! flush order, then other threads' pending lines by thread and flush order, then dirty lines
//! by (file, line). Pending lines carry their content at flush time (M3); evicted dirty lines
//! carry their newest content (M5). With `tear`, each chosen line persists only a random
//! subset of its 8-byte words (M1 holds; M2 does not). Simulated block files come last: their
//! unsynced choices (see [`ImageSpec::blocks`]) are numbered after every line, and an image
//! holds each block file as plain bytes ([`CrashImage::blocks`]).
//!
//! # Invariants
//! - An [`ImageFile`] is its durable pages (shared, never written through) plus an overlay of
//!   whole lines, each with the mask of the 8-byte words that persisted: the same image
//!   always reads the same bytes.
//! - This module knows nothing of the domain that captures images (`sim::capture` builds
//!   them) nor of the pools that open them: dependencies go `pool` → `sim` → `image`.
//!
//! # Concurrency
//! Images are plain values (pages behind `Arc`, copied on write).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::region::CACHE_LINE;

/// Bytes per durable-image page (the copy-on-write unit of images and of the sim domain).
pub const PAGE: u64 = 4096;

/// One durable-image page.
pub(crate) type Page = [u8; PAGE as usize];

/// Which of a set of candidate lines to include.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Pick {
    /// None of them.
    #[default]
    None,
    /// All of them.
    All,
    /// Those whose index (in the documented order) has its bit set (first 64 candidates).
    Mask(u64),
    /// Those at these indices.
    Indices(Vec<usize>),
    /// Each independently with this probability (from the seed).
    Random(f64),
}

impl Pick {
    pub(crate) fn chooses(&self, i: usize, rng: &mut SplitMix64) -> bool {
        match self {
            Pick::None => false,
            Pick::All => true,
            Pick::Mask(m) => i < 64 && m & (1 << i) != 0,
            Pick::Indices(v) => v.contains(&i),
            Pick::Random(p) => rng.next_f64() < *p,
        }
    }
}

/// How to build a crash image from a domain's current state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageSpec {
    /// Whose pending lines [`ImageSpec::pending`] picks from (default: the calling thread).
    pub thread: Option<u32>,
    /// Which of that thread's pending (flushed, unfenced) lines persisted.
    pub pending: Pick,
    /// Which of the other threads' pending lines persisted.
    pub others_pending: Pick,
    /// Which dirty (stored, not yet durable) lines were evicted early, with newest content.
    pub evict: Pick,
    /// Tear every chosen line at 8-byte granularity (only for targets without axiom M2).
    pub tear: bool,
    /// With `tear`: the 8-byte words (bit w = bytes 8w..8w+8) of every chosen line that
    /// persist; `None` chooses them at random from the seed.
    pub tear_words: Option<u8>,
    /// Which unsynced choices of the simulated block files persisted. Candidates, in order:
    /// block files by name; per file first its pending length change (if `set_len` or an
    /// extending write happened since its last sync), then every sector written since the
    /// last sync in ascending order, each with its versions in write order. A sector takes the
    /// newest of its versions that is picked, or keeps its durable content when none is; the
    /// file takes its newest length if that candidate is picked, else its durable length.
    pub blocks: Pick,
    /// Seed of every random choice.
    pub seed: u64,
}

impl ImageSpec {
    /// The durable image only.
    pub fn durable() -> ImageSpec {
        ImageSpec::default()
    }
}

/// Deterministic generator for image choices (SplitMix64).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One file of a crash image.
#[derive(Clone)]
pub struct ImageFile {
    /// File name (`pool` for a single-file pool, `seg-NNNNNN.pm` for a pool set).
    pub name: String,
    /// Length in bytes.
    pub len: u64,
    pages: Vec<Arc<Page>>,
    /// Line → (content, mask of 8-byte words that persisted).
    overlay: BTreeMap<u64, ([u8; 64], u8)>,
}

impl std::fmt::Debug for ImageFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageFile")
            .field("name", &self.name)
            .field("len", &self.len)
            .field("overlay_lines", &self.overlay.len())
            .finish()
    }
}

impl ImageFile {
    /// The durable pages with the overlay applied (shares untouched pages).
    pub(crate) fn pages(&self) -> Vec<Arc<Page>> {
        let mut pages = self.pages.clone();
        for (&line, (content, mask)) in &self.overlay {
            let lpp = PAGE / CACHE_LINE;
            let page = Arc::make_mut(&mut pages[(line / lpp) as usize]);
            let at = ((line % lpp) * CACHE_LINE) as usize;
            for w in 0..8 {
                if mask & (1 << w) != 0 {
                    page[at + w * 8..at + w * 8 + 8].copy_from_slice(&content[w * 8..w * 8 + 8]);
                }
            }
        }
        pages
    }

    /// Copies the file's content (overlay applied) to the start of `region`, page by page,
    /// and returns the pages (for the durable image of a new sim domain).
    pub(crate) fn copy_into(&self, region: &crate::region::Region) -> Result<Vec<Arc<Page>>> {
        let pages = self.pages();
        for (i, p) in pages.iter().enumerate() {
            let off = i as u64 * PAGE;
            let n = (self.len - off).min(PAGE) as usize;
            region.write_bytes(off, &p[..n])?;
        }
        Ok(pages)
    }

    /// The first `n` bytes of the file (overlay applied).
    pub fn prefix(&self, n: usize) -> Vec<u8> {
        let n = n.min(self.len as usize);
        let mut out = Vec::with_capacity(n);
        let lpp = PAGE / CACHE_LINE;
        for (i, p) in self.pages.iter().enumerate() {
            if out.len() >= n {
                break;
            }
            let mut page = **p;
            for (&line, (content, _)) in self.overlay.range(i as u64 * lpp..(i as u64 + 1) * lpp) {
                let at = ((line % lpp) * CACHE_LINE) as usize;
                page[at..at + 64].copy_from_slice(content);
            }
            let take = (n - out.len()).min(PAGE as usize);
            out.extend_from_slice(&page[..take]);
        }
        out
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len as usize);
        for p in self.pages() {
            out.extend_from_slice(&p[..]);
        }
        out.truncate(self.len as usize);
        out
    }

    /// Lines that differ from the durable base (pending, evicted or torn lines included).
    pub fn overlay_lines(&self) -> usize {
        self.overlay.len()
    }

    /// XORs byte `off` of the file with `mask` (corrupt-image testing). Out-of-range offsets
    /// are ignored.
    pub fn xor_byte(&mut self, off: u64, mask: u8) {
        if off >= self.len {
            return;
        }
        let lpp = PAGE / CACHE_LINE;
        let line = off / CACHE_LINE;
        let pages = &self.pages;
        let e = self.overlay.entry(line).or_insert_with(|| {
            let page = &pages[(line / lpp) as usize];
            let at = ((line % lpp) * CACHE_LINE) as usize;
            let mut base = [0u8; 64];
            base.copy_from_slice(&page[at..at + 64]);
            (base, 0xff)
        });
        e.0[(off % CACHE_LINE) as usize] ^= mask;
    }

    /// Shortens the file to `len` bytes (corrupt-image testing); a longer `len` is ignored.
    pub fn truncate(&mut self, len: u64) {
        if len >= self.len {
            return;
        }
        self.len = len;
        self.pages.truncate(len.div_ceil(PAGE) as usize);
        // Bytes past the end of the last page stay in memory but are never read: `bytes`,
        // `prefix` and `copy_into` stop at `len`.
        self.overlay.retain(|&line, _| line * CACHE_LINE < len);
    }
}

/// A crash image (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct CrashImage {
    /// The files, by name.
    pub files: Vec<ImageFile>,
    /// The simulated block files (`BlockFile`), by name: plain bytes (no overlay), a
    /// namespace of their own (a block file may share a name with a pool file).
    pub blocks: Vec<ImageFile>,
    /// Free-form description (the tester records the crash point and seed here).
    pub note: String,
}

impl CrashImage {
    /// The file called `name`.
    pub fn file(&self, name: &str) -> Option<&ImageFile> {
        self.files.iter().find(|f| f.name == name)
    }

    /// The block file called `name`.
    pub fn block(&self, name: &str) -> Option<&ImageFile> {
        self.blocks.iter().find(|f| f.name == name)
    }

    /// Lines overlaid on the durable base, over all files.
    pub fn overlay_lines(&self) -> usize {
        self.files.iter().map(|f| f.overlay.len()).sum()
    }

    /// Writes the image to `dir` (created if needed): one file per image file, one file
    /// `NAME.block` per block file, plus `image.txt` (names, lengths and the note). Loaded
    /// again by [`CrashImage::load`].
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
        let mut manifest = String::from("ferrite-crash-image 1\n");
        for f in &self.files {
            if f.name.contains(['/', '\n', ' ']) || f.name.starts_with('.') || f.name == "image.txt"
            {
                return Err(Error::InvalidArgument(format!("bad image file name {:?}", f.name)));
            }
            let path = dir.join(&f.name);
            std::fs::write(&path, f.bytes()).map_err(|e| Error::io("write", &path, e))?;
            let _ = writeln!(manifest, "file {} {}", f.name, f.len);
        }
        for f in &self.blocks {
            if f.name.contains(['/', '\n', ' ']) || f.name.starts_with('.') {
                return Err(Error::InvalidArgument(format!("bad block file name {:?}", f.name)));
            }
            let path = dir.join(format!("{}.block", f.name));
            std::fs::write(&path, f.bytes()).map_err(|e| Error::io("write", &path, e))?;
            let _ = writeln!(manifest, "block {} {}", f.name, f.len);
        }
        for line in self.note.lines() {
            let _ = writeln!(manifest, "note {line}");
        }
        let path = dir.join("image.txt");
        std::fs::write(&path, manifest).map_err(|e| Error::io("write", &path, e))
    }

    /// Loads an image written by [`CrashImage::save`].
    pub fn load(dir: impl AsRef<Path>) -> Result<CrashImage> {
        let dir = dir.as_ref();
        let mpath = dir.join("image.txt");
        let manifest = std::fs::read_to_string(&mpath).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound { path: mpath.clone() },
            _ => Error::io("read", &mpath, e),
        })?;
        let mut lines = manifest.lines();
        if lines.next() != Some("ferrite-crash-image 1") {
            return Err(Error::corrupt(&mpath, "not a ferrite crash image manifest (version 1)"));
        }
        let mut img = CrashImage::default();
        let mut notes = Vec::new();
        for l in lines {
            if let Some(n) = l.strip_prefix("note ") {
                notes.push(n.to_owned());
            } else if let Some((rest, block)) = l
                .strip_prefix("file ")
                .map(|r| (r, false))
                .or_else(|| l.strip_prefix("block ").map(|r| (r, true)))
            {
                let (name, len) = rest
                    .rsplit_once(' ')
                    .and_then(|(n, l)| l.parse::<u64>().ok().map(|l| (n, l)))
                    .ok_or_else(|| Error::corrupt(&mpath, format!("bad line {l:?}")))?;
                if name.contains('/') || name.starts_with('.') {
                    return Err(Error::corrupt(&mpath, format!("bad file name {name:?}")));
                }
                let path = if block { dir.join(format!("{name}.block")) } else { dir.join(name) };
                let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
                if bytes.len() as u64 != len {
                    return Err(Error::corrupt(
                        &path,
                        format!("{} bytes, manifest says {len}", bytes.len()),
                    ));
                }
                let f = ImageFile::from_bytes(name, &bytes);
                if block { img.blocks.push(f) } else { img.files.push(f) }
            } else if !l.is_empty() {
                return Err(Error::corrupt(&mpath, format!("bad line {l:?}")));
            }
        }
        img.note = notes.join("\n");
        Ok(img)
    }
}

impl ImageFile {
    /// An image file whose base is `pages` (a domain's durable image), with no overlay.
    pub(crate) fn from_pages(name: &str, len: u64, pages: Vec<Arc<Page>>) -> ImageFile {
        ImageFile { name: name.to_owned(), len, pages, overlay: BTreeMap::new() }
    }

    /// Overlays the words of `content` that `mask` selects (bit w = bytes 8w..8w+8) on line
    /// `line`; the line's other words keep what the image held before.
    pub(crate) fn put_words(&mut self, line: u64, content: &[u8; 64], mask: u8) {
        let lpp = PAGE / CACHE_LINE;
        let pages = &self.pages;
        let e = self.overlay.entry(line).or_insert_with(|| {
            let page = &pages[(line / lpp) as usize];
            let at = ((line % lpp) * CACHE_LINE) as usize;
            let mut base = [0u8; 64];
            base.copy_from_slice(&page[at..at + 64]);
            (base, 0xff)
        });
        for w in 0..8 {
            if mask & (1 << w) != 0 {
                e.0[w * 8..w * 8 + 8].copy_from_slice(&content[w * 8..w * 8 + 8]);
            }
        }
    }

    /// An image file holding `bytes` (no overlay).
    pub fn from_bytes(name: &str, bytes: &[u8]) -> ImageFile {
        let pages = bytes
            .chunks(PAGE as usize)
            .map(|c| {
                let mut p = [0u8; PAGE as usize];
                p[..c.len()].copy_from_slice(c);
                Arc::new(p)
            })
            .collect();
        ImageFile {
            name: name.to_owned(),
            len: bytes.len() as u64,
            pages,
            overlay: BTreeMap::new(),
        }
    }
}
