//! Recorded traces: every event of a domain with the bytes of each store, as owned values
//! that can be saved as text, loaded again and replayed ([`replay`](super::replay)).
//!
//! # Invariants
//! - `TraceEvent::from_line(e.to_line()) == e` for every event a domain records (the text
//!   format is one line per event, version line `ferrite-trace 1`).
//!
//! # Concurrency
//! Traces are plain values; a domain appends to its recording under its own lock.

use crate::error::{Error, Result};

use super::EventKind;

/// A recorded event (owned; can be saved, loaded and replayed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Sequence number.
    pub seq: u64,
    /// Thread index.
    pub thread: u32,
    /// Kind.
    pub kind: EventKind,
    /// File.
    pub file: String,
    /// Offset in the file.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Bytes written (stores and NT stores; empty otherwise).
    pub data: Vec<u8>,
    /// Site key.
    pub site: String,
}

impl TraceEvent {
    /// One text line: `seq thread kind file offset len site hexdata`.
    pub fn to_line(&self) -> String {
        let hex: String = self.data.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {} {} {} {} {} {}",
            self.seq,
            self.thread,
            self.kind.name(),
            if self.file.is_empty() { "-" } else { &self.file },
            self.offset,
            self.len,
            self.site.replace(' ', "_"),
            if hex.is_empty() { "-".to_owned() } else { hex }
        )
    }

    /// Parses a line written by [`TraceEvent::to_line`].
    pub fn from_line(line: &str) -> Result<TraceEvent> {
        let bad = || Error::InvalidArgument(format!("bad trace line {line:?}"));
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 8 {
            return Err(bad());
        }
        let data = if f[7] == "-" {
            Vec::new()
        } else {
            if !f[7].len().is_multiple_of(2) {
                return Err(bad());
            }
            (0..f[7].len() / 2)
                .map(|i| u8::from_str_radix(&f[7][2 * i..2 * i + 2], 16).map_err(|_| bad()))
                .collect::<Result<_>>()?
        };
        Ok(TraceEvent {
            seq: f[0].parse().map_err(|_| bad())?,
            thread: f[1].parse().map_err(|_| bad())?,
            kind: EventKind::parse(f[2]).ok_or_else(bad)?,
            file: if f[3] == "-" { String::new() } else { f[3].to_owned() },
            offset: f[4].parse().map_err(|_| bad())?,
            len: f[5].parse().map_err(|_| bad())?,
            site: f[6].to_owned(),
            data,
        })
    }
}

/// Saves a trace as text, one event per line (see [`TraceEvent::to_line`]).
pub fn save_trace(path: impl AsRef<std::path::Path>, events: &[TraceEvent]) -> Result<()> {
    let path = path.as_ref();
    let mut out = String::from("ferrite-trace 1\n");
    for e in events {
        out.push_str(&e.to_line());
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| Error::io("write", path, e))
}

/// Loads a trace written by [`save_trace`].
pub fn load_trace(path: impl AsRef<std::path::Path>) -> Result<Vec<TraceEvent>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    let mut lines = text.lines();
    if lines.next() != Some("ferrite-trace 1") {
        return Err(Error::corrupt(path, "not a ferrite trace (version 1)"));
    }
    lines.filter(|l| !l.is_empty()).map(TraceEvent::from_line).collect()
}
