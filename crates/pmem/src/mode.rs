//! How a pool persists: its durability mode and its cache-line flush instruction.
//!
//! A leaf module: `options` and `error` import it, it imports neither, so the dependency
//! between configuration and errors points one way. Parsing a name that is not known is the
//! typed [`UnknownName`], which converts into [`Error::InvalidArgument`](crate::Error).

use std::fmt;
use std::str::FromStr;

/// A name that is not one of the known modes or flush instructions (`FromStr` of
/// [`DurabilityMode`] and [`FlushKind`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {found:?} (expected {expected})")]
pub struct UnknownName {
    /// What was being parsed.
    pub what: &'static str,
    /// The name given (lower-cased).
    pub found: String,
    /// The accepted names.
    pub expected: &'static str,
}

/// How a pool's stores become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DurabilityMode {
    /// Real persistent memory: the file is mapped with `MAP_SYNC`, so a flushed and fenced line
    /// is durable across power loss (under ADR).
    Pmem,
    /// Persistent memory emulated by a shared file mapping on tmpfs or the page cache. The
    /// flush instructions run for their realistic cost, and data survives a **process** crash
    /// (the kernel keeps the pages), but **not** a power loss or kernel crash.
    Emulated,
    /// An ordinary file mapping whose flush is `msync(MS_SYNC)` of the covering pages: survives
    /// power loss on a block device, at block-device speed.
    Msync,
    /// Heap memory: nothing survives the process. Used by unit tests and in-memory images.
    Volatile,
    /// The simulated persistence domain of the crash tester: what "survives" is defined by the
    /// domain's durable image (flushed and fenced lines), not by any hardware.
    Simulated,
}

impl DurabilityMode {
    /// Stable lower-case name (`pmem`, `emulated`, `msync`, `volatile`).
    pub fn name(self) -> &'static str {
        match self {
            DurabilityMode::Pmem => "pmem",
            DurabilityMode::Emulated => "emulated",
            DurabilityMode::Msync => "msync",
            DurabilityMode::Volatile => "volatile",
            DurabilityMode::Simulated => "simulated",
        }
    }

    /// What a flushed-and-fenced store survives in this mode, in one sentence.
    pub fn guarantee(self) -> &'static str {
        match self {
            DurabilityMode::Pmem => "survives process crash and power loss (MAP_SYNC, ADR)",
            DurabilityMode::Emulated => {
                "survives a process crash, NOT power loss or a kernel crash (RAM/page cache)"
            }
            DurabilityMode::Msync => "survives process crash and power loss (msync per flush)",
            DurabilityMode::Volatile => "survives nothing: heap memory of this process",
            DurabilityMode::Simulated => {
                "what the simulated domain's durable image holds (testing)"
            }
        }
    }
}

impl fmt::Display for DurabilityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DurabilityMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s.to_ascii_lowercase().as_str() {
            "pmem" => Ok(DurabilityMode::Pmem),
            "emulated" => Ok(DurabilityMode::Emulated),
            "msync" => Ok(DurabilityMode::Msync),
            "volatile" => Ok(DurabilityMode::Volatile),
            "simulated" => Ok(DurabilityMode::Simulated),
            other => Err(UnknownName {
                what: "durability mode",
                found: other.to_owned(),
                expected: "pmem, emulated, msync, volatile or simulated",
            }),
        }
    }
}

/// The cache-line write-back instruction a pool uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `CLWB`: write back, line may stay cached; weakly ordered (needs `SFENCE`).
    Clwb,
    /// `CLFLUSHOPT`: write back and invalidate; weakly ordered (needs `SFENCE`).
    Clflushopt,
    /// `CLFLUSH`: write back and invalidate; ordered with other `CLFLUSH`es and stores.
    Clflush,
}

impl FlushKind {
    /// All kinds, best first.
    pub const ALL: [FlushKind; 3] = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush];

    /// Stable lower-case name (`clwb`, `clflushopt`, `clflush`).
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
        }
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s.to_ascii_lowercase().as_str() {
            "clwb" => Ok(FlushKind::Clwb),
            "clflushopt" => Ok(FlushKind::Clflushopt),
            "clflush" => Ok(FlushKind::Clflush),
            other => Err(UnknownName {
                what: "flush instruction",
                found: other.to_owned(),
                expected: "clwb, clflushopt or clflush",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_typed() {
        for k in FlushKind::ALL {
            assert_eq!(k.name().to_uppercase().parse::<FlushKind>(), Ok(k));
        }
        for m in [DurabilityMode::Pmem, DurabilityMode::Emulated, DurabilityMode::Simulated] {
            assert_eq!(m.name().parse::<DurabilityMode>(), Ok(m));
        }
        let e = "clzero".parse::<FlushKind>().unwrap_err();
        assert_eq!(e.found, "clzero");
        assert!(matches!(crate::Error::from(e), crate::Error::InvalidArgument(_)));
        assert!("nvram".parse::<DurabilityMode>().is_err());
    }
}
